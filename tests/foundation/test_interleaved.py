"""The providers' default baseline ``interleaved``: reasoning kept within the current user turn, dropped at user-turn
boundaries, checked on a hand-built conversation of two user turns with tool calls inside each."""

from __future__ import annotations

import pytest

from interp.data.conditions import apply_condition
from interp.data.trajectory import Trajectory

pytestmark = pytest.mark.unit


def conversation() -> Trajectory:
    """Turn 1: steps 1-2 call a tool, step 3 answers the user (text) and the user replies; turn 2: steps 4-5 call
    a tool, step 6 answers."""
    def step(t: int, text: bool) -> dict:
        action = {"text": f"answer {t}"} if text else {"tool": "bash", "arguments": {"cmd": f"ls {t}"}}
        return {"reasoning": f"think {t} a\n\nthink {t} b", "action": action,
                "observation": f"user says {t}" if text else f"out {t}"}

    return Trajectory.from_json({"task_id": "conv", "domain": "chat", "system_prompt": "sys", "task": "hello",
                                 "tools": [{"name": "bash", "description": "run", "parameters": {}}],
                                 "steps": [step(t, t in (3, 6)) for t in range(1, 7)]})


@pytest.mark.parametrize("b, dropped", [(1, set()), (2, set()), (3, {1, 2, 3}), (4, {1, 2, 3}), (5, {1, 2, 3}),
                                        (6, {1, 2, 3, 4, 5, 6})])
def test_interleaved_drops_the_reasoning_of_finished_user_turns_only(b, dropped):
    traj = conversation()
    edited, log = apply_condition("interleaved", traj, b)
    for t in range(1, 7):  # worked out by hand from the two turns above
        want = "" if t in dropped else traj.steps[t - 1].reasoning
        assert edited.steps[t - 1].reasoning == want, (b, t)
        assert edited.steps[t - 1].action == traj.steps[t - 1].action
        assert edited.steps[t - 1].observation == traj.steps[t - 1].observation
    assert {(e.step, e.block) for e in log.edits} == {(t, k) for t in dropped for k in (0, 1)}
    assert log.params["turn_start"] == max(dropped, default=0) + 1
