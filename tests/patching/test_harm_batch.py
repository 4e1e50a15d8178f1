"""Batched set-level harm (padded suffixes from one snapshot) against one set per forward, hybrid and plain attention.

Reference: ``set_harms(..., batch_bytes=0)``, the scheduler's one-suffix-per-forward path (itself tested against
recomputation from scratch in ``test_harm.py``). In float64 the harms agree within 1e-6 relative; a spy on the
scheduler's ``run_batch`` shows that batches of several sets really ran, within the memory budget.
"""

from __future__ import annotations

import pytest

from interp.data.deletions import UNIT_KINDS
from interp.sensor import prefix
from interp.sensor.forward import batch_row_bytes
from interp.sensor.prefix import DEFAULT_BATCH_BYTES
from patching.harm import candidate_sets, set_harms

pytestmark = pytest.mark.parity


@pytest.fixture(scope="module")
def llama_fp64(llama_path):
    from interp.sensor.models import load_model

    return load_model(str(llama_path), dtype="fp64")


def _spy(monkeypatch) -> list[tuple[int, list[int]]]:
    """Record (snapshot length, suffix lengths) of every padded batch the scheduler runs."""
    calls: list[tuple[int, list[int]]] = []
    real = prefix.run_batch

    def spy(sensor, suffixes, plans, start=None):
        calls.append((start.length if start is not None else 0, [len(s) for s in suffixes]))
        return real(sensor, suffixes, plans, start=start)

    monkeypatch.setattr(prefix, "run_batch", spy)
    return calls


def _compare(sensor, traj, b, sets, batch_bytes, monkeypatch, rel, abs_):
    ref_nll, ref = set_harms(sensor, traj, b, sets, batch_bytes=0)
    calls = _spy(monkeypatch)
    nll, got = set_harms(sensor, traj, b, sets, batch_bytes=batch_bytes)
    assert nll == pytest.approx(ref_nll, rel=rel, abs=abs_)
    for a, r in zip(got, ref, strict=True):
        assert a.members == r.members and a.tokens_removed == r.tokens_removed
        assert a.nll == pytest.approx(r.nll, rel=rel, abs=abs_)
        assert a.harm == pytest.approx(r.harm, rel=rel, abs=abs_)
    return calls


@pytest.mark.parametrize("model,b,budget", [("tiny_sensor_fp64", 2, 2), ("llama_fp64", 3, 4)])
def test_batched_harm_equals_one_set_per_forward_fp64(model, b, budget, request, mini_trajectory, monkeypatch):
    """The hybrid (Gated-DeltaNet recurrence and conv, attention) and plain attention; singletons, pairs, triples."""
    sensor = request.getfixturevalue(model)
    sets = candidate_sets(mini_trajectory, b, max_k=3, budget=budget, seed=0, units=UNIT_KINDS)
    calls = _compare(sensor, mini_trajectory, b, sets, DEFAULT_BATCH_BYTES, monkeypatch, 1e-6, 1e-12)
    batched = sum(len(rows) for _, rows in calls)
    assert max(len(rows) for _, rows in calls) >= 3 and batched >= len(sets) // 2, calls


def test_batches_stay_within_the_budget(llama_fp64, mini_trajectory, monkeypatch):
    """A budget of about three rows: several batches, each within it, and the same harms."""
    traj, b = mini_trajectory, 3
    sets = candidate_sets(traj, b, max_k=3, budget=4, seed=1, units=UNIT_KINDS)
    budget = 3 * batch_row_bytes(llama_fp64, 200, 200)
    calls = _compare(llama_fp64, traj, b, sets, budget, monkeypatch, 1e-6, 1e-12)
    assert len(calls) >= 2
    for start, rows in calls:
        assert 2 <= len(rows) <= 3 and len(rows) * batch_row_bytes(llama_fp64, start, max(rows)) <= budget


def test_batched_harm_float32(tiny_sensor, mini_trajectory, monkeypatch):
    """The default dtype: equal within float32 rounding (different kernels' summation order)."""
    sets = candidate_sets(mini_trajectory, 2, max_k=2, budget=3, seed=2, units=UNIT_KINDS)
    calls = _compare(tiny_sensor, mini_trajectory, 2, sets, DEFAULT_BATCH_BYTES, monkeypatch, 1e-4, 1e-4)
    assert calls
