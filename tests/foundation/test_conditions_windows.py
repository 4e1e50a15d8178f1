"""The window baselines: keep_last_k_reasoning (reasoning of the last k steps) and sliding_window (last k steps)."""

from __future__ import annotations

import pytest

from interp.data.conditions import apply_condition, sliding_window, validate_condition
from interp.data.trajectory import load_trajectories

from ._support import DEMO

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def traj():
    return max(load_trajectories(DEMO), key=lambda t: t.n_steps)


def test_keep_last_k_reasoning_keeps_exactly_the_last_k_steps_reasoning(traj):
    b = traj.n_steps
    for k in (1, 2, b, b + 3):
        edited, log = apply_condition("keep_last_k_reasoning", traj, b, k=k)
        for t in range(1, b + 1):
            expect = traj.steps[t - 1].reasoning if t > b - k or not traj.steps[t - 1].blocks else ""
            assert edited.steps[t - 1].reasoning == expect, (k, t)
            assert edited.steps[t - 1].action == traj.steps[t - 1].action
        gone = {(t, i) for t in range(1, b - k + 1) for i in range(len(traj.steps[t - 1].blocks))}
        assert {(e.step, e.block) for e in log.edits} == gone and log.params == {"k": k}
    one, _ = apply_condition("keep_last_k_reasoning", traj, b, k=1)
    assert one == apply_condition("keep_latest_reasoning", traj, b)[0]


def test_sliding_window_drops_whole_steps_and_moves_the_boundary(traj):
    b = traj.n_steps - 1
    edited, boundary, log = sliding_window(traj, b, k=2)
    assert boundary == 2 and edited.steps == traj.steps[b - 2:]
    assert [(e.step, e.what, e.op) for e in log.edits] == [(t, "step", "removed") for t in range(1, b - 1)]
    assert (edited.task, edited.system_prompt) == (traj.task, traj.system_prompt)
    same, boundary, log = sliding_window(traj, b, k=b)
    assert same is traj and boundary == b and not log.edits


def test_window_parameters_are_checked():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="k must be an integer"):
            validate_condition("keep_last_k_reasoning", {"k": bad})
        with pytest.raises(ValueError, match="k must be an integer"):
            sliding_window(load_trajectories(DEMO)[0], 1, k=bad)
