"""The gate's calibration where the truth is known both ways: the guaranteed rule (``patching.gate.select_bound``)
keeps the unsafe rate of its deletions <= alpha in at least 1 - delta of 200 seeded draws with an informative
score and abstains on an uninformative one; both scorers abstain on a harm no feature predicts over 20 seeds;
the selected setting does not move under perturbations that mimic another CPU (thread count, row order, float32
features); the vectorised tau sweep equals the slow per-boundary rule; refusals name bad harms."""

from __future__ import annotations

import json
import random
import warnings

import numpy as np
import pytest

from patching.config import GateConfig
from patching.gate import (K_GRID, TAU_GRID, GateSetting, Scored, Supervision, decisions, gate_metrics,
                           needed_boundaries, restrict, score_split, select_bound, supervision, sweep)
from patching.gate_eval import evaluate, train

from .synthetic import records

pytestmark = pytest.mark.unit

ALPHA, DELTA = GateConfig.alpha, GateConfig.delta
SETS = 3  # candidate sets per synthetic boundary (singletons: the gate picks the largest saving under tau)


def _draw(rng: np.random.Generator, n: int, informative: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per boundary and set: the true unsafe probability, the gate's score and the saving."""
    p = rng.uniform(0, 1, (n, SETS)) ** 2 if informative else np.full((n, SETS), 0.27)
    score = np.clip(p + rng.normal(0, 0.05, p.shape), 0, 1) if informative else rng.uniform(0, 1, p.shape)
    return p, score, rng.uniform(10, 200, (n, SETS))


def _calibration(p: np.ndarray, score: np.ndarray, saving: np.ndarray, rng: np.random.Generator
                 ) -> tuple[Supervision, Scored]:
    n = len(p)
    unsafe = rng.uniform(size=p.shape) < p
    harm = np.where(unsafe, 0.03, 0.0).ravel()  # unsafe above the 0.02 cut; mean harm stays under its limit
    views = [{"prompt_tokens": 2000, "task_id": f"t{i}"} for i in range(n)]
    sup = Supervision(views, [np.arange(SETS)] * n, np.repeat(np.arange(n), SETS),
                      np.repeat(np.array([f"t{i}" for i in range(n)], dtype=object), SETS),
                      [(j,) for _ in range(n) for j in range(SETS)], harm, np.ones(n * SETS, bool),
                      np.round(saving).astype(int).ravel(), [{} for _ in range(n)])
    rows = np.arange(n * SETS)
    return sup, Scored(rows, score.ravel(), np.zeros(n * SETS), np.arange(n), sup.boundary)


def _true_rate(p: np.ndarray, score: np.ndarray, saving: np.ndarray, tau: float) -> float | None:
    """The expected unsafe rate of the gate's deletions at tau on fresh boundaries (an independent reference of
    the rule: the largest saving among the sets scored under tau)."""
    feasible = score < tau
    pick = np.argmax(np.where(feasible, saving, -np.inf), 1)
    deleted = feasible.any(1)
    return float(p[np.arange(len(p)), pick][deleted].mean()) if deleted.any() else None


@pytest.mark.parametrize("informative", [True, False])
def test_the_bound_holds_in_1_minus_delta_of_200_draws_and_abstains_without_signal(informative):
    cal = GateConfig().calibration()
    fresh = _draw(np.random.default_rng(10_000), 20_000, informative)
    held, certified = 0, 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        p, score, saving = _draw(rng, 200, informative)
        sup, scored = _calibration(p, score, saving, rng)
        setting, _ = select_bound(sup, scored, cal)
        rate = None if setting.tau is None else _true_rate(*fresh, setting.tau)
        certified += setting.tau is not None
        held += rate is None or rate <= ALPHA
    assert held >= (1 - DELTA) * 200, held
    if informative:
        assert certified >= 150  # the bound is not vacuous: with signal it deletes in most draws
    else:
        assert certified <= DELTA * 200


def test_the_vectorised_sweep_is_the_per_boundary_rule():
    rng = np.random.default_rng(3)
    p, score, saving = _draw(rng, 60, True)
    saving[:5] = 100.0  # ties in saving: the lower score, then the first set
    sup, scored = _calibration(p, score, saving, rng)
    for k in K_GRID:
        sw = sweep(sup, scored, k, 0.5, TAU_GRID)
        for i in range(0, len(TAU_GRID), 97):
            m = gate_metrics(sup, decisions(sup, restrict(sup, scored, k), GateSetting(k=k, beta=0.5, tau=TAU_GRID[i])))
            assert sw["n_deleted"][i] == m["n_deleted"] and sw["n_measured"][i] == m["n_measured"]
            if m["n_measured"]:
                assert sw["n_unsafe"][i] == round(m["unsafe_rate"] * m["n_measured"])
                assert np.isclose(sw["harm"][i], m["mean_harm"] * m["n_measured"], rtol=1e-12, atol=1e-15)
            assert np.isclose(sw["removal"][i] / sw["n_boundaries"][i], m["removal"], rtol=1e-12)


def test_needed_boundaries_is_the_smallest_count_that_could_certify():
    from scipy.stats import binom
    cal = GateConfig().calibration()
    n = needed_boundaries(cal, len(K_GRID))
    level = cal.delta / len(K_GRID)
    assert binom.cdf(0, n, cal.alpha) <= level < binom.cdf(0, n - 1, cal.alpha)
    emp = GateConfig(rule="empirical").calibration()
    assert needed_boundaries(emp) == 8 and (0 + 1) / (8 + 2) <= emp.alpha < (0 + 1) / (7 + 2)
    assert needed_boundaries(GateConfig(rule="empirical", smooth=False).calibration()) == 1


def _fast(kind: str) -> dict:
    return {"fractions": (0.6, 0.2, 0.2), "n_members": 1 if kind == "set-mlp" else 2, "scorer": kind,
            "calibration": GateConfig(folds=2 if kind == "set-mlp" else 3).calibration()}


@pytest.mark.slow  # 20 seeds x cross-fitted set-model fits: about a minute on a loaded 2-core machine
@pytest.mark.parametrize("kind", ["ridge", "set-mlp"])
def test_both_scorers_abstain_on_a_harm_no_feature_predicts_over_20_seeds(kind):
    for seed in range(20):
        recs = records(40, planted=False, seed=100 + seed, measured=0.15)
        gate, info = train(recs, seed=seed, **_fast(kind))
        sup = supervision(recs)
        test = restrict(sup, score_split(sup, gate.split["test"], gate.scorer, gate.spec), gate.setting.k)
        m = gate_metrics(sup, decisions(sup, test, gate.setting))
        assert m["coverage"] <= 0.05, (seed, gate.setting, m)
        s = info["summary"]
        assert s["n_boundaries"] >= s["needed_boundaries"] and s["abstain"] == "no_safe_setting"  # not for lack of data


def _float32(recs: list[dict]) -> list[dict]:
    out = json.loads(json.dumps(recs))
    for r in out:
        r["state"] = np.float32(r["state"]).astype(float).tolist()
        for c in r["candidates"]:
            c["rep"] = (np.float32(c["rep"]) * np.float32(1 + 2 ** -20)).astype(float).tolist()
            c["attention"] = np.float32(c["attention"]).astype(float).tolist()
    return out


@pytest.mark.slow  # four cross-fitted trainings: about two minutes for the set model on a loaded 2-core machine
@pytest.mark.parametrize("kind", ["ridge", "set-mlp"])
def test_the_selected_setting_is_the_same_under_another_cpus_perturbations(kind):
    import torch

    recs = records(60, planted=True, seed=5)  # every set measured: the bound counts an unmeasured deletion unsafe

    def selected(rs: list[dict]) -> tuple:
        gate, info = train(rs, **_fast(kind))
        return gate.setting, {r: (v["k"], v["beta"], v["tau"]) for r, v in info["summary"]["rules"].items()}

    base = selected(recs)
    assert all(tau is not None for _, _, tau in base[1].values())  # settings that delete: perturbations could move them
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert selected(recs) == base
    finally:
        torch.set_num_threads(threads)
    shuffled = list(recs)
    random.Random(0).shuffle(shuffled)
    assert selected(shuffled) == base
    assert selected(_float32(recs)) == base


def test_nan_harms_are_named_before_any_fit():
    recs = records(6, seed=4)
    recs[2]["sets"][0]["harm"] = float("nan")
    recs[2]["sets"][3]["harm"] = float("inf")
    recs[4]["sets"][1]["harm"] = None
    with pytest.raises(ValueError, match=r"harm: 3 measured sets at 2 boundaries .*t002@4 \(2 sets\), t004@4 \(1 sets\)"):
        supervision(recs)
    with pytest.raises(ValueError, match="t002@4"):
        train(recs)


def test_one_class_harms_train_with_a_warning_naming_the_count():
    recs = records(30, seed=6)
    for r in recs:
        for st in r["sets"]:
            st["harm"] = 0.001  # every set safe
    with pytest.warns(UserWarning, match=r"one class: \d+ measured calibration sets, 0 unsafe"):
        gate, info = train(recs, n_members=2)
    assert info["summary"]["labels"].startswith("one class")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        doc = evaluate(recs, gate, n_boot=0)
    assert any(n.startswith("one class") for n in doc["notes"]) and doc["calibration"]["labels"]
