"""The gate's candidate pool is one rule, checked against the edit itself: ``empties_step`` says exactly when
``delete_units`` removes a step, ``grow_sets`` (grown size by size from valid sets) equals brute-force
enumeration with validity judged by deleting, and the offline pool keeps the sets DRSR did not measure as
unmeasured (in the pool, never given a harm). The pruned gate (sets scored largest saving first, stopping once
nothing unscored can win) chooses the exhaustive gate's set, and the offline evaluation's, on held-out
trajectories at several thresholds."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from interp.data.deletions import (DRSR_UNIT_KINDS, delete_units, empties_step, history_units, step_shapes,
                                   units_overlap)
from interp.data.trajectory import load_trajectories
from patching.config import GateConfig
from patching.gate import (GateSetting, admissible, decide_view, decisions, gate_metrics, grow_sets, online_view,
                           pool_members, restrict, score_split, supervision)
from patching.gate_eval import evaluate, train

from .synthetic import records, truth

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "data" / "demo" / "trajectories.jsonl"
MINI = ROOT / "tests" / "data" / "mini.jsonl"


def _trajectories():
    return load_trajectories(DEMO) + load_trajectories(MINI)


def _disjoint(units) -> bool:
    return not any(units_overlap(a, b) for a, b in itertools.combinations(units, 2))


def test_empties_step_says_when_delete_units_removes_a_step():
    rng = random.Random(0)
    n_checked = n_emptied = 0
    for traj in _trajectories():
        for b in range(1, traj.n_steps + 1):
            units = history_units(traj, b, DRSR_UNIT_KINDS)
            shapes = step_shapes(traj, b)
            trials = [tuple(u for u in units if u[1] == t and u[0] != "observation") for t in range(1, b + 1)]
            trials += [tuple(u for u in units if u[1] == t and u[0] != "tool_exchange") for t in range(1, b + 1)]
            trials += [tuple(rng.sample(units, min(len(units), rng.randint(1, 4)))) for _ in range(20)]
            for s in (s for s in trials if s and _disjoint(s)):
                _, b2, _ = delete_units(traj, b, s)
                assert empties_step(shapes, s) == (b2 != b), (traj.task_id, b, s)
                n_checked += 1
                n_emptied += b2 != b
    assert n_checked > 500 and n_emptied > 20  # both outcomes exercised


def _view(traj, b):
    """A view of the trajectory's units without a model: span sizes from the units' text (4 characters a token)."""
    cands = []
    for u in history_units(traj, b, DRSR_UNIT_KINDS):
        step = traj.steps[u[1] - 1]
        text = {"reasoning": lambda: step.blocks[u[2]], "observation": lambda: step.observations[u[2]],
                "tool_exchange": lambda: str(step.action.calls[u[2]]) + (
                    step.observations[u[2]] if u[2] < len(step.observations) else "")}[u[0]]()
        cands.append({"unit": list(u), "n_tokens": len(text) // 4})
    total = sum(c["n_tokens"] for c in cands) + 400
    return {"task_id": traj.task_id, "after_step": b, "candidates": cands, "prompt_tokens": total,
            "shapes": step_shapes(traj, b)}


@pytest.mark.parametrize("k", [2, 3])
def test_grown_sets_are_exactly_the_valid_sets(k):
    n_sets = n_refused = 0
    for traj in _trajectories():
        for b in range(1, traj.n_steps + 1):
            view = _view(traj, b)
            setting = GateSetting(k=k, max_removal=0.2)
            pool = pool_members(view, setting)
            if k == 3 and len(pool) > 12:  # brute force over small pools only (seconds)
                continue
            units = [tuple(c["unit"]) for c in view["candidates"]]
            assert all(units[m][1] < b and units[m][0] in DRSR_UNIT_KINDS for m in pool)  # latest step protected
            sets, saving, capped = grow_sets(view, pool, setting)
            brute = []
            for size in range(1, k + 1):
                for c in itertools.combinations(pool.tolist(), size):
                    us = [units[m] for m in c]
                    n = sum(view["candidates"][m]["n_tokens"] for m in c)
                    if _disjoint(us) and n <= 0.2 * view["prompt_tokens"] and delete_units(traj, b, us)[1] == b:
                        brute.append(c)
                    elif _disjoint(us):
                        n_refused += 1
            assert sets == sorted(brute, key=lambda x: (len(x), x)) and not capped
            assert saving.tolist() == [sum(view["candidates"][m]["n_tokens"] for m in c) for c in sets]
            n_sets += len(sets)
    assert n_sets > 200 and n_refused > 10
    cut, _, capped = grow_sets(view, pool, GateSetting(k=3), max_sets=5)
    assert capped and len(cut) == 5


def test_sets_drsr_did_not_measure_are_in_the_pool_unmeasured_never_guessed():
    recs = records(30, planted=True, seed=4, measured=0.5)
    sup = supervision(recs)
    assert len(sup.harm) == 30 * (9 + 36 + 84)  # the whole pool of every boundary: steps 1..3, K = 3
    assert 0.3 < sup.measured.mean() < 0.7 and np.isnan(sup.harm[~sup.measured]).all()
    assert not sup.unsafe[~sup.measured].any()
    for bi, rec in enumerate(recs):  # a measured pool row carries DRSR's own number
        view = online_view(rec)
        exact = {tuple(sorted(tuple(m) for m in s["members"])): s["harm"] for s in rec["sets"]}
        for r in np.flatnonzero((sup.boundary == bi) & sup.measured):
            key = tuple(sorted(tuple(view["candidates"][m]["unit"]) for m in sup.members[r]))
            assert sup.harm[r] == exact[key]
    chosen = {0: int(np.flatnonzero((sup.boundary == 0) & ~sup.measured)[0]), 1: None}
    m = gate_metrics(sup, chosen)
    assert m["n_deleted"] == 1 and m["n_measured"] == 0 and m["unsafe_rate"] is None and m["mean_harm"] is None
    cal = GateConfig().calibration()  # a deletion whose harm is unknown is never admitted as safe
    assert not admissible(np.array(m["n_deleted"]), np.array(m["n_measured"]), np.array(0), np.array(0.0), cal)
    assert admissible(np.array(0), np.array(0), np.array(0), np.array(0.0), cal)  # abstaining always is
    gate, _ = train(recs, fractions=(0.5, 0.25, 0.25), n_members=2)
    doc = evaluate(recs, gate, n_boot=0)
    g = doc["gate"]
    assert g["n_measured"] <= g["n_deleted"] and doc["split"]["test"]["n_pool"] > doc["split"]["test"]["n_sets"]
    assert len(doc["scores"]["test"]["score"]) == len(doc["scores"]["test"]["unsafe"]) == doc["split"]["test"]["n_sets"]


@pytest.fixture(scope="module")
def planted():
    recs = records(80, planted=True, seed=1)
    gate, _ = train(recs, fractions=(0.5, 0.25, 0.25), n_members=4)
    return recs, gate


def test_the_gate_over_the_online_pool_meets_the_known_truth(planted):
    """Every deletion the gate makes on held-out trajectories, measured or not, judged by the planted harm."""
    recs, gate = planted
    test = [r for r in recs if r["task_id"] in gate.split["test"]]
    truths = []
    for rec in test:
        d = decide_view(gate, online_view(rec))
        if d.members is not None:
            truths.append(truth(rec["candidates"], np.array(rec["state"]), list(d.members)))
    assert len(truths) >= 0.8 * len(test)
    assert np.mean(np.array(truths) > 0.020) <= 0.1 and np.mean(truths) <= 0.020


@pytest.mark.parametrize("quantile", [None, 0.05, 0.2, 0.5])
def test_pruned_and_exhaustive_gates_choose_the_same_set(planted, quantile):
    recs, gate = planted
    sup = supervision(recs)
    test = restrict(sup, score_split(sup, gate.split["test"], gate.scorer, gate.spec), gate.setting.k)
    tau = gate.setting.tau if quantile is None else float(np.quantile(test.risk, quantile))
    model = replace(gate, setting=replace(gate.setting, tau=tau))
    chosen = decisions(sup, test, model.setting)
    n_deleting = 0
    for bi, row in chosen.items():
        view = sup.views[bi]
        pruned, full = decide_view(model, view), decide_view(model, view, prune=False)
        assert pruned.members == full.members and pruned.score == full.score, (bi, pruned, full)
        assert full.members == (None if row is None else sup.members[row])  # = the offline evaluation's choice
        assert pruned.n_scored <= full.n_scored
        n_deleting += full.members is not None
    assert n_deleting >= 5
