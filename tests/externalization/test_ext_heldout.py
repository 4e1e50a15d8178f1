"""Held-out agreement of rule labelers: the task split, tuning only on tuning tasks, the kappa bootstrap CI."""

from __future__ import annotations

import json

import pytest

from interp.data.labels import agreement, held_out_agreement, kappa_ci, task_split

from ._support import DEMO

pytestmark = pytest.mark.unit


def _boundaries(tasks, n=6):
    return [(t, b) for t in tasks for b in range(1, n + 1)]


def test_task_split_is_disjoint_complete_stratified_and_seeded():
    tasks = [f"{d}-{i}" for d in ("code", "web", "office") for i in range(5)] + ["solo-0"]
    strata = {t: t.split("-")[0] for t in tasks}
    tune, held = task_split(tasks + tasks[:3], strata, seed=3)  # duplicates count once
    assert not set(tune) & set(held) and sorted(tune + held) == sorted(tasks)
    for domain in ("code", "web", "office"):
        assert any(t.startswith(domain) for t in tune) and any(t.startswith(domain) for t in held)
    assert task_split(tasks, strata, seed=3) == (tune, held)
    assert task_split(tasks, strata, seed=4) != (tune, held)
    with pytest.raises(ValueError, match="tune_fraction"):
        task_split(tasks, tune_fraction=1.0)


def test_tuning_sees_only_the_tuning_tasks():
    """Config 'A' is perfect on the tuning tasks and inverted on the others; 'B' the reverse.

    A tuner that looked at the evaluation tasks would pick B (held-out kappa 1); the
    held-out protocol must pick A and report its held-out kappa, -1.
    """
    tune, held = ["t1", "t2", "t3"], ["e1", "e2", "e3"]
    keys = _boundaries(tune + held)
    reference = {k: (k[1] + int(k[0][1])) % 2 for k in keys}

    def label_fn(config):
        good = set(tune) if config == "A" else set(held)
        return {k: v if k[0] in good else 1 - v for k, v in reference.items()}

    out = held_out_agreement(label_fn, ["B", "A"], reference, (tune, held), default="B", n_boot=200)
    assert out["chosen"] == "'A'" and out["tune"]["kappa"] == 1.0
    assert out["held_out"]["kappa"] == -1.0 and out["held_out"]["n"] == len(_boundaries(held))
    assert out["default_held_out"]["kappa"] == 1.0  # the shipped config is reported on the same held-out tasks
    assert [g["tune_kappa"] for g in out["grid"]] == [-1.0, 1.0]
    assert (out["tune_tasks"], out["eval_tasks"]) == (tune, held)
    with pytest.raises(ValueError, match="overlap"):
        held_out_agreement(label_fn, ["A"], reference, (tune, held + ["t1"]), n_boot=10)


def test_kappa_ci_is_a_task_bootstrap_of_cohens_kappa():
    from sklearn.metrics import cohen_kappa_score

    keys = _boundaries([f"t{i}" for i in range(8)], 5)
    reference = {k: int(k[1] > 2) for k in keys}
    perfect = kappa_ci(reference, reference, n_boot=200)
    assert perfect["kappa"] == 1.0 and perfect["kappa_ci"] == [1.0, 1.0] and perfect["n_tasks"] == 8
    noisy = {k: v if (k[1] + int(k[0][1:])) % 4 else 1 - v for k, v in reference.items()}
    out = kappa_ci(noisy, reference, n_boot=500, seed=1)
    expected = cohen_kappa_score([reference[k] for k in keys], [noisy[k] for k in keys])
    assert out["kappa"] == pytest.approx(expected, abs=1e-4) == agreement(noisy, reference)["kappa"]
    assert out["kappa_ci"][0] <= out["kappa"] <= out["kappa_ci"][1] < 1.0
    one_task = kappa_ci({("t0", b): 1 for b in range(1, 4)} | {("t0", 4): 0}, {("t0", b): b % 2 for b in range(1, 5)},
                        n_boot=100)
    assert one_task["kappa_ci"] is None  # a task bootstrap needs two tasks


def test_demo_both_labelers_held_out_on_disjoint_tasks(tmp_path):
    from interp.pipelines import stages

    summary = stages.externalize(DEMO, tmp_path, config=_config(n_boot=200))
    doc = json.loads((tmp_path / "externalization_labels.json").read_text())
    assert doc["config"]["scope"] == "all" and "PROXY" not in doc["scope_note"]
    assert set(summary["held_out"]) == set(doc["held_out"]) == {"externalization_gap", "future_necessity"}
    for name, report in doc["held_out"].items():
        tune, held = set(report["tune_tasks"]), set(report["eval_tasks"])
        assert tune and held and not tune & held, name
        domains = {t.split("-")[0] for t in held}
        assert domains == {t.split("-")[0] for t in tune} == {"code", "office", "security", "web"}
        assert report["held_out"]["n_tasks"] == len(held)
        assert len(report["grid"]) > 1 and report["chosen"] in [g["config"] for g in report["grid"]]
        ci = report["held_out"]["kappa_ci"]
        assert ci is None or ci[0] <= report["held_out"]["kappa"] <= ci[1]
    proxy = stages.externalize(DEMO, tmp_path / "latest", config=_config(scope="latest", n_boot=50))
    assert proxy["scope_note"].startswith("PROXY")


def _config(**kwargs):
    from interp.externalization.labeler import GapLabelerConfig

    return GapLabelerConfig(**kwargs)
