"""``drsr_gate`` is online with memory, like ``iclr``: at step t the gate's input is the history it pruned at
1..t-1 plus step t as recorded, its deletions persist into every later step, and ``gate_step`` (what a live
agent calls after each step) is that one decision."""

from __future__ import annotations

from pathlib import Path

import pytest

from interp.data.conditions import EditLog, apply_condition, gate_step
from interp.data.deletions import DRSR_UNIT_KINDS, delete_units, empties_step, history_units, step_shapes
from interp.data.trajectory import load_trajectories

pytestmark = pytest.mark.unit

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo" / "trajectories.jsonl"


class RecordingGate:
    """Deletes the first unit of step t-1 that keeps every step, and records every history it is shown."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, object]] = []

    def __call__(self, history, t):
        self.seen.append((t, history))
        shapes = step_shapes(history, t)
        units = [u for u in history_units(history, t, DRSR_UNIT_KINDS) if u[1] == t - 1
                 and not empties_step(shapes, [u])]
        return units[:1] or None


def test_at_step_t_the_gate_sees_the_history_it_pruned_at_t_minus_1_plus_step_t():
    traj = max(load_trajectories(DEMO), key=lambda t: t.n_steps)
    b = traj.n_steps - 1
    gate = RecordingGate()
    edited, log = apply_condition("drsr_gate", traj, b, gate=gate)
    assert [t for t, _ in gate.seen] == list(range(1, b + 1))  # one decision per step, in order
    pruned = traj
    for t, shown in gate.seen:
        assert shown == pruned  # the history pruned at 1..t-1 ...
        assert shown.steps[t - 1:] == traj.steps[t - 1:]  # ... plus step t (and later) as recorded
        units = [tuple(u) for u in log.params["units"][str(t)]]
        pruned = delete_units(pruned, t, units)[0] if units else pruned
    assert edited == pruned
    deleted = sum(bool(v) for v in log.params["units"].values())
    assert deleted >= 3 and len(log.edits) >= deleted  # earlier deletions persist: several, all kept
    again = RecordingGate()  # one step by hand is the same decision and write-back
    one = EditLog("drsr_gate", 2)
    assert gate_step(gate.seen[1][1], 2, again, one) == gate.seen[2][1]


def test_a_gate_that_always_abstains_leaves_the_history_and_says_so():
    traj = load_trajectories(DEMO)[0]
    edited, log = apply_condition("drsr_gate", traj, traj.n_steps, gate=lambda h, t: None)
    assert edited == traj and not log.edits and "abstained at every step" in log.notes[0]
    assert set(log.params["units"]) == {str(t) for t in range(1, traj.n_steps + 1)}
