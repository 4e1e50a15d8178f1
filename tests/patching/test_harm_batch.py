"""Batched and nested set-level harm against one set per forward, on the hybrid (Gated-DeltaNet) and plain attention.

Reference: ``set_harms(..., batch_bytes=0, nest=False)``, the scheduler's one-suffix-per-forward path (itself
tested against recomputation from scratch in ``test_harm.py``). In float64 the harms agree within 1e-6 relative.
Spies on the scheduler's ``run_batch`` and ``run_plan`` show that the fast paths really ran: batches of several
sets within the memory budget, and nesting forwarding fewer tokens than one forward per set.
"""

from __future__ import annotations

import pytest

from interp.data.deletions import UNIT_KINDS
from interp.sensor import prefix
from interp.sensor.forward import batch_row_bytes
from interp.sensor.prefix import DEFAULT_BATCH_BYTES
from patching.harm import candidate_sets, set_harms

pytestmark = pytest.mark.parity

CASES = {"tiny_sensor_fp64": (2, 2), "llama_fp64": (3, 4)}  # model -> (boundary, sampled sets per size)


@pytest.fixture(scope="module")
def llama_fp64(llama_path):
    from interp.sensor.models import load_model

    return load_model(str(llama_path), dtype="fp64")


@pytest.fixture(scope="module")
def reference():
    """One-set-per-forward results and the tokens they forwarded, computed once per (model, boundary, sets)."""
    cache: dict = {}

    def get(name, sensor, traj, b, sets):
        key = (name, b, tuple(sets))
        if key not in cache:
            with pytest.MonkeyPatch.context() as mp:
                seen = _spy(mp)
                cache[key] = set_harms(sensor, traj, b, sets, batch_bytes=0, nest=False), sum(seen["tokens"])
        return cache[key]
    return get


def _spy(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """Record each padded batch (snapshot length, suffix lengths) and the tokens of every forward."""
    seen: dict[str, list] = {"batches": [], "tokens": []}
    run_batch, run_plan = prefix.run_batch, prefix.run_plan

    def batch(sensor, suffixes, plans, start=None):
        seen["batches"].append((start.length if start is not None else 0, [len(s) for s in suffixes]))
        seen["tokens"].append(sum(len(s) for s in suffixes))
        return run_batch(sensor, suffixes, plans, start=start)

    def plan(sensor, ids, plan, start=None, out=None):
        seen["tokens"].append(len(ids))
        return run_plan(sensor, ids, plan, start=start, out=out)

    monkeypatch.setattr(prefix, "run_batch", batch)
    monkeypatch.setattr(prefix, "run_plan", plan)
    return seen


def _check(got, ref, rel, abs_):
    nll, rows = got
    ref_nll, ref_rows = ref
    assert nll == pytest.approx(ref_nll, rel=rel, abs=abs_)
    for a, r in zip(rows, ref_rows, strict=True):
        assert a.members == r.members and a.tokens_removed == r.tokens_removed
        assert a.nll == pytest.approx(r.nll, rel=rel, abs=abs_)
        assert a.harm == pytest.approx(r.harm, rel=rel, abs=abs_)


@pytest.mark.parametrize("model", list(CASES))
def test_batched_harm_equals_one_set_per_forward_fp64(model, request, mini_trajectory, reference, monkeypatch):
    """Padded batches only (no nesting): singletons, pairs, triples of every kind, hybrid and plain attention."""
    sensor, (b, budget) = request.getfixturevalue(model), CASES[model]
    sets = candidate_sets(mini_trajectory, b, max_k=3, budget=budget, seed=0, units=UNIT_KINDS)
    ref, _ = reference(model, sensor, mini_trajectory, b, sets)
    seen = _spy(monkeypatch)
    _check(set_harms(sensor, mini_trajectory, b, sets, batch_bytes=DEFAULT_BATCH_BYTES, nest=False), ref, 1e-6,
           1e-12)
    rows = [n for _, lengths in seen["batches"] for n in lengths]
    assert max(len(lengths) for _, lengths in seen["batches"]) >= 3 and len(rows) >= len(sets) // 2, seen


@pytest.mark.parametrize("model", list(CASES))
def test_default_nested_and_batched_harm_equals_one_set_per_forward_fp64(model, request, mini_trajectory, reference,
                                                                        monkeypatch):
    """The default (nesting, then batches): the same harms from fewer forwarded tokens."""
    sensor, (b, budget) = request.getfixturevalue(model), CASES[model]
    sets = candidate_sets(mini_trajectory, b, max_k=3, budget=budget, seed=0, units=UNIT_KINDS)
    ref, one_per_set = reference(model, sensor, mini_trajectory, b, sets)
    seen = _spy(monkeypatch)
    _check(set_harms(sensor, mini_trajectory, b, sets), ref, 1e-6, 1e-12)
    assert sum(seen["tokens"]) < 0.9 * one_per_set, (sum(seen["tokens"]), one_per_set)


def test_batches_stay_within_the_budget(llama_fp64, mini_trajectory, monkeypatch):
    """A budget of about three rows: several batches, each within it, and the same harms."""
    traj, b = mini_trajectory, 3
    sets = candidate_sets(traj, b, max_k=3, budget=4, seed=1, units=UNIT_KINDS)
    ref = set_harms(llama_fp64, traj, b, sets, batch_bytes=0, nest=False)
    budget = 3 * batch_row_bytes(llama_fp64, 200, 200)
    seen = _spy(monkeypatch)
    _check(set_harms(llama_fp64, traj, b, sets, batch_bytes=budget, nest=False), ref, 1e-6, 1e-12)
    assert len(seen["batches"]) >= 2
    for start, lengths in seen["batches"]:
        assert 2 <= len(lengths) <= 3 and len(lengths) * batch_row_bytes(llama_fp64, start, max(lengths)) <= budget


def test_default_harm_float32(tiny_sensor, mini_trajectory):
    """The default dtype: equal within float32 rounding (other kernels, other summation order)."""
    sets = candidate_sets(mini_trajectory, 2, max_k=3, budget=3, seed=2, units=UNIT_KINDS)
    _check(set_harms(tiny_sensor, mini_trajectory, 2, sets),
           set_harms(tiny_sensor, mini_trajectory, 2, sets, batch_bytes=0, nest=False), 1e-4, 1e-4)
