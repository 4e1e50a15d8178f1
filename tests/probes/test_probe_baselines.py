"""Probe results a reviewer can trust: the position baseline, the paired gain, a position-keeping null, the exact
(nested) permutation test, and undefined final boundaries.

The two synthetic cases know the truth both ways: labels that depend only on the step index b (a probe on
hidden states that encode b must not beat the baseline, and only the position-keeping null may say so), and
labels that depend on a feature direction independent of b (a real gain, significant under both nulls).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from interp.extraction.store import MANIFEST_FIELDS
from probes import (NUISANCE_FEATURES, FeatureSet, ProbeConfig, oof_frame, paired_gain, permutation_tests,
                    permute_labels_across_tasks, permute_labels_within_length, run_nested_cv, run_probe,
                    write_probe_results)
from probes.baselines import BASELINE_KEY, baseline_set, with_nuisance
from probes.metrics import auroc
from probes.report import FIELDS
from probes.stats import null_labels

pytestmark = pytest.mark.unit

CONFIG = ProbeConfig(standardize_grid=(True,), pca_grid=(None, 4), C_grid=(0.1, 1.0), n_boot=200, n_perm=39,
                     n_jobs=1, permutation="fixed")
"""Small grid; 39 permutations so that p < 0.05 is reachable (smallest p = 0.025); the fast screen."""


def position_case(kind: str, seed: int = 0, n_tasks: int = 30, d: int = 8) -> FeatureSet:
    """Tasks of 6-8 steps (final boundary left out); hidden dim 0 encodes b (+ N(0, 0.1)), the rest is noise.

    kind "position": P(y = 1) = sigmoid(1.5 (3.5 - b)), labels depend on b only.
    kind "signal": y = [z + N(0, 0.5) > 0] with z ~ N(0, 1) independent of b, written into hidden dim 1.
    """
    rng = np.random.default_rng(seed)
    lengths = rng.choice([6, 7, 8], size=n_tasks)
    groups = np.array([f"t{t:02d}" for t, n in enumerate(lengths) for _ in range(1, n)])
    b = np.array([s for n in lengths for s in range(1, n)], dtype=float)
    n_steps = np.array([n for n in lengths for _ in range(1, n)], dtype=float)
    z = rng.standard_normal(b.size)
    if kind == "position":
        y = (rng.random(b.size) < 1 / (1 + np.exp(1.5 * (b - 3.5)))).astype(int)
    else:
        y = (z + 0.5 * rng.standard_normal(b.size) > 0).astype(int)
    features = {}
    for layer in (0, 1):
        X = rng.standard_normal((b.size, d))
        X[:, 0] = b + 0.1 * rng.standard_normal(b.size)
        if kind == "signal":
            X[:, 1] = z
        features[layer, "last"] = X.astype(np.float32)
    ids = [f"{g}@{int(s)}:full" for g, s in zip(groups, b)]
    return FeatureSet(features, y, groups, ids,
                      nuisance={"after_step": b, "n_steps": n_steps, "rel_position": b / n_steps})


@pytest.fixture(scope="module")
def position_only() -> dict:
    return run_probe(position_case("position"), CONFIG)


@pytest.fixture(scope="module")
def real_signal() -> dict:
    return run_probe(position_case("signal"), CONFIG)


def test_position_only_labels_are_explained_by_the_baseline(position_only):
    res = position_only
    assert res["auroc"] > 0.85, "the hidden-state probe looks strong on its own"
    assert res["baseline"]["auroc"] >= res["auroc"] - 0.02, "the position baseline reaches it"
    low, high = res["gain"]["auroc_ci"]
    assert low <= 0 <= high and res["gain"]["auroc"] == pytest.approx(res["auroc"] - res["baseline"]["auroc"])
    # The across-task null destroys position structure: it calls position a signal ...
    assert res["permutation_p"] < 0.05
    # ... the position-keeping null does not.
    assert res["permutation_p_position"] > 0.05
    assert res["nuisance_features"] == ["after_step", "n_steps", "rel_position"]


def test_real_signal_beats_the_baseline_under_both_nulls(real_signal):
    res = real_signal
    assert res["baseline"]["auroc"] < 0.65 < res["auroc"]
    low, high = res["gain"]["auroc_ci"]
    assert res["gain"]["auroc"] > 0.2 and low > 0
    assert res["permutation_p"] < 0.05 and res["permutation_p_position"] < 0.05
    assert res["probe_plus_baseline"]["auroc"] > res["baseline"]["auroc"] + 0.2


def test_every_p_names_its_statistic_and_the_file_is_strict_json(position_only, tmp_path):
    res = position_only
    assert "max over (layer, pooling) candidates" in res["permutation_statistic"]
    assert len(res["permutation_null"]) == len(res["permutation_null_position"]) == 39
    assert res["config"]["permutation"] == "fixed" and res["permutation_n_failed"] == 0
    json_path, _ = write_probe_results(res, oof_frame(res), tmp_path)
    saved = json.loads(json_path.read_text())
    assert {f.name for f in FIELDS} <= set(saved)
    for name in ("gain", "baseline", "probe_plus_baseline", "permutation_p_position", "excluded_final"):
        assert name in saved["schema"]


def test_nested_permutation_equals_a_hand_written_loop(capsys):
    fs = position_case("signal", seed=3, n_tasks=10, d=4)
    config = dataclasses.replace(CONFIG, n_perm=3, permutation="nested", n_jobs=2, n_outer=3, n_inner=2)
    got = permutation_tests(fs, config)
    assert "permutations (nested CV): 6/6 label vectors (100%)" in capsys.readouterr().err  # progress, both nulls
    loop_config = dataclasses.replace(config, n_jobs=1)
    observed = run_nested_cv(fs, loop_config).auroc
    for null, purpose in (("across_tasks", "permutation"), ("within_length", "permutation:within_length")):
        rng, null_values = config.rng(purpose), []
        while len(null_values) < config.n_perm:
            if null == "across_tasks":
                y = permute_labels_across_tasks(fs.y, fs.groups, rng)
            else:
                y = permute_labels_within_length(fs.y, fs.groups, fs.nuisance["after_step"], rng)
            if np.unique(y).size < 2:
                continue
            null_values.append(run_nested_cv(dataclasses.replace(fs, y=y), loop_config).auroc)
        p = (1 + sum(v >= observed for v in null_values)) / (1 + len(null_values))
        assert got[null].observed == observed
        np.testing.assert_array_equal(got[null].null, null_values)
        assert got[null].p_value == p and got[null].candidate_auroc is None


def test_within_length_null_keeps_each_task_a_label_by_position_sequence():
    rng = np.random.default_rng(0)
    lengths = {"a": 3, "b": 3, "c": 3, "d": 4, "e": 4, "f": 5}
    groups = np.array([t for t, n in lengths.items() for _ in range(n)])
    positions = np.array([s for n in lengths.values() for s in range(n, 0, -1)], dtype=float)  # rows not in order
    y = rng.integers(0, 2, groups.size)
    sequences = {t: tuple(y[groups == t][np.argsort(positions[groups == t])]) for t in lengths}
    moved = False
    for _ in range(30):
        permuted = permute_labels_within_length(y, groups, positions, rng)
        got = {t: tuple(permuted[groups == t][np.argsort(positions[groups == t])]) for t in lengths}
        for t, seq in got.items():
            same_length = [s for u, s in sequences.items() if lengths[u] == lengths[t]]
            assert seq in same_length
        assert got["f"] == sequences["f"]  # alone in its stratum: keeps its labels
        assert sorted(got.values()) == sorted(sequences.values())
        moved |= got != sequences
    assert moved
    fs = FeatureSet({(0, "last"): np.zeros((groups.size, 1))}, y, groups, [str(i) for i in range(groups.size)],
                    nuisance={"after_step": positions})
    assert null_labels(fs, "within_length", 5, np.random.default_rng(1)).shape == (5, groups.size)


def test_paired_gain_uses_the_same_tasks_for_both_scores():
    rng = np.random.default_rng(0)
    groups = np.repeat([f"t{i}" for i in range(12)], 5)
    y = rng.integers(0, 2, groups.size)
    base = y + rng.normal(0, 1.0, y.size)
    new = y + rng.normal(0, 0.5, y.size)
    gain = paired_gain(y, base, new, groups, {"auroc": auroc}, 300, np.random.default_rng(5))
    assert gain.estimate["auroc"] == pytest.approx(auroc(y, new) - auroc(y, base))
    same = paired_gain(y, base, base, groups, {"auroc": auroc}, 300, np.random.default_rng(5))
    assert same.estimate["auroc"] == 0 and same.cis["auroc"] == [0.0, 0.0]  # unpaired resamples would not cancel
    from interp.stats import task_resamples

    rows = next(iter(task_resamples(groups, 1, np.random.default_rng(5))))
    first = paired_gain(y, base, new, groups, {"auroc": auroc}, 1, np.random.default_rng(5))
    assert first.cis["auroc"][0] == pytest.approx(auroc(y[rows], new[rows]) - auroc(y[rows], base[rows]))


def test_baseline_and_augmented_sets():
    fs = position_case("position", n_tasks=8)
    base = baseline_set(fs)
    assert base.keys == [BASELINE_KEY] and base.features[BASELINE_KEY].shape == (len(fs.sample_ids), 3)
    aug = with_nuisance(fs)
    X, A = fs.features[0, "last"], aug.features[0, "last"]
    assert A.shape == (X.shape[0], X.shape[1] + 3) and np.array_equal(A[:, :X.shape[1]], X)
    block = A[:, X.shape[1]:].astype(float)
    np.testing.assert_allclose(block.std(axis=0), np.sqrt(np.mean(X.var(axis=0, dtype=np.float64))), rtol=1e-4)
    no_nuisance = FeatureSet(fs.features, fs.y, fs.groups, fs.sample_ids)
    res = run_probe(no_nuisance, dataclasses.replace(CONFIG, n_perm=0, n_boot=0))
    assert res["baseline"] is None and res["gain"] is None and res["nuisance_features"] == []


def test_final_boundaries_are_excluded_not_labelled_zero():
    fs = position_case("signal", n_tasks=10)
    # Append each task's final boundary (after_step == n_steps), labelled -1 and listed as undefined.
    tasks, first = np.unique(fs.groups, return_index=True)
    finals = [f"{t}@{int(fs.nuisance['n_steps'][i])}:full" for t, i in zip(tasks, first)]
    full = FeatureSet(
        {k: np.vstack([X, np.zeros((len(tasks), X.shape[1]), X.dtype)]) for k, X in fs.features.items()},
        np.concatenate([fs.y, np.full(len(tasks), -1)]), np.concatenate([fs.groups, tasks]), fs.sample_ids + finals,
        nuisance={k: np.concatenate([v, fs.nuisance["n_steps"][first] if k != "rel_position" else np.ones(len(tasks))])
                  for k, v in fs.nuisance.items()},
        undefined=finals)
    res = run_probe(full, dataclasses.replace(CONFIG, n_perm=0, n_boot=0))
    assert res["n_excluded_final"] == len(tasks) and res["excluded_final"] == finals
    assert res["n_samples"] == len(fs.sample_ids) and not set(finals) & set(res["oof"]["sample_id"])
    with pytest.raises(ValueError, match="undefined must list samples with y = -1"):
        FeatureSet(fs.features, fs.y, fs.groups, fs.sample_ids, undefined=[fs.sample_ids[0]])


def test_nuisance_features_are_manifest_columns():
    assert set(NUISANCE_FEATURES) <= {f.name for f in MANIFEST_FIELDS}
    assert len(set(NUISANCE_FEATURES)) == len(NUISANCE_FEATURES)


def test_config_refuses_an_unknown_permutation():
    with pytest.raises(ValueError, match="^permutation: must be one of fixed, nested"):
        ProbeConfig(permutation="exact")
