"""The field's history baselines: observation masking (keep the last M observations) and keep-last-M tool exchanges."""

from __future__ import annotations

from dataclasses import replace

import pytest

from interp.data.conditions import (
    OBSERVATION_MASK, STEP_POLICIES, apply_condition, keep_last_m_tool_exchanges, validate_condition,
)
from interp.data.trajectory import Trajectory, load_trajectories

from ._support import DEMO

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def trajs():
    return load_trajectories(DEMO)


def _without_reasoning(traj: Trajectory, steps: set[int]) -> Trajectory:
    return replace(traj, steps=tuple(replace(s, reasoning="") if t in steps else s
                                     for t, s in enumerate(traj.steps, start=1)))


def test_observation_masking_keeps_the_last_m_tool_observations(trajs):
    for traj in trajs:
        b = traj.n_steps
        tool_steps = [t for t in range(1, b + 1) if traj.steps[t - 1].action.calls]  # hand list: steps with calls
        for m in (1, 2, 3, 50):
            edited, log = apply_condition("observation_masking", traj, b, m=m)
            masked = set(tool_steps[:-m]) if m < len(tool_steps) else set()
            for t in range(1, b + 1):
                old, new = traj.steps[t - 1], edited.steps[t - 1]
                assert (new.reasoning, new.action) == (old.reasoning, old.action)
                if t in masked:
                    assert list(new.observations) == [OBSERVATION_MASK] * len(old.observations)
                    assert type(new.observation) is type(old.observation)
                else:
                    assert new.observations == old.observations
            assert sorted({e.step for e in log.edits}) == sorted(masked) and log.params == {"m": m}
            assert all(e.what == "observation" and e.op == "masked" for e in log.edits)
            assert log.chars_removed == sum(len(o) for t in masked for o in traj.steps[t - 1].observations)


def test_observation_masking_leaves_text_replies(trajs):
    base = max(trajs, key=lambda t: t.n_steps)  # a user reply given to step 1, made a text action
    steps = list(base.steps)
    steps[0] = replace(steps[0], action=type(steps[0].action)(text="Shall I go on?"), observation="Yes, go on.")
    text = replace(base, steps=tuple(steps))
    edited, _ = apply_condition("observation_masking", text, text.n_steps, m=1)
    for old, new in zip(text.steps, edited.steps):
        if old.action.is_text:
            assert new.observations == old.observations


def test_keep_last_m_tool_exchanges_keeps_the_last_m_calls_with_their_results(trajs):
    for traj in trajs:
        b = traj.n_steps
        exchanges = [(t, k, traj.steps[t - 1].action.calls[k], traj.steps[t - 1].observations[k])
                     for t in range(1, b + 1) for k in range(len(traj.steps[t - 1].action.calls))]
        for m in (1, 2, len(exchanges) + 1):
            edited, boundary, log = keep_last_m_tool_exchanges(traj, b, m=m)
            kept = [(c, o) for s in edited.steps[:boundary] for c, o in zip(s.action.calls, s.observations)]
            assert kept == [(c, o) for _, _, c, o in exchanges[-m:]]
            assert all(len(s.observations) == len(s.action.calls) for s in edited.steps if s.action.calls)
            gone = {(t, k) for t, k, _, _ in exchanges[:max(0, len(exchanges) - m)]}
            assert {(e.step, e.block) for e in log.edits if e.what == "tool_exchange"} == gone
            assert boundary == b - len(log.params["removed_steps"]) and log.params["m"] == m


def test_a_step_without_reasoning_whose_calls_all_go_is_removed(trajs):
    traj = _without_reasoning(max(trajs, key=lambda t: t.n_steps), {1, 2})
    edited, boundary, log = keep_last_m_tool_exchanges(traj, traj.n_steps, m=1)
    assert 1 in log.params["removed_steps"] and 2 in log.params["removed_steps"]
    assert edited.steps[0] != traj.steps[0] and boundary == traj.n_steps - len(log.params["removed_steps"])
    assert set(STEP_POLICIES) == {"sliding_window", "keep_last_m_tool_exchanges"}


def test_baseline_parameters_are_checked(trajs):
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="m must be an integer"):
            validate_condition("observation_masking", {"m": bad})
        with pytest.raises(ValueError, match="m must be an integer"):
            keep_last_m_tool_exchanges(trajs[0], 1, m=bad)


def test_the_baselines_render_and_are_accounted_by_interp_tokens(trajs, tokenizer):
    from interp.accounting.tokens import account
    from interp.data.render import render

    traj = max(trajs, key=lambda t: t.n_steps)
    edited, _ = apply_condition("observation_masking", traj, traj.n_steps, m=2)
    assert OBSERVATION_MASK in render(edited, traj.n_steps, tokenizer).text
    cut, boundary, _ = keep_last_m_tool_exchanges(traj, traj.n_steps, m=2)
    render(cut, boundary, tokenizer)
    rows, skipped = account([traj], ["full", "observation_masking:m=2", "keep_last_m_tool_exchanges:m=2"], tokenizer)
    assert not skipped
    by = {p: g.sort_values("request")["input_tokens"].tolist() for p, g in rows.groupby("policy")}
    units = {"observation_masking:m=2": lambda b: sum(bool(s.action.calls) for s in traj.steps[:b]),
             "keep_last_m_tool_exchanges:m=2": lambda b: sum(len(s.action.calls) for s in traj.steps[:b])}
    for policy, count in units.items():  # request k is rendered at boundary k - 1
        for k, (mine, full) in enumerate(zip(by[policy], by["full"]), start=1):
            assert (mine == full) if count(k - 1) <= 2 else (mine < full), (policy, k)
