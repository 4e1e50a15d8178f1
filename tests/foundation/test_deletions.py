"""Deletion of history units: every deleted history of the demo set is protocol-valid, validates and renders."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from interp.data.deletions import UNIT_KINDS, delete_units, history_units, parse_unit_kinds, units_overlap
from interp.data.render import render
from interp.data.trajectory import NO_REASONING, validate_file

pytestmark = pytest.mark.unit


def _deletions(trajs):
    """(trajectory, boundary, units) for every singleton of every kind, every kind at once, and seeded mixes."""
    rng = random.Random(0)
    for traj in trajs:
        b = traj.n_steps - 1  # the longest history that still has a recorded next step
        every = history_units(traj, b, UNIT_KINDS)
        for kind in UNIT_KINDS:
            units = history_units(traj, b, [kind])
            yield from ((traj, b, (u,)) for u in units)
            yield traj, b, tuple(units)
        for _ in range(6):
            yield traj, b, tuple(rng.sample(every, min(len(every), rng.randint(2, 6))))


def _protocol_problems(step) -> list[str]:
    if step.action.is_text:
        return [] if step.action.text or step.observation is None else ["feedback without an action"]
    if len(step.observations) != len(step.action.calls):
        return [f"{len(step.action.calls)} calls, {len(step.observations)} results"]
    return []


def test_every_deleted_history_of_the_demo_set_is_valid_and_renders(demo_trajectories, tokenizer, tmp_path):
    records, emptied, kinds = [], set(), Counter()
    for i, (traj, b, units) in enumerate(_deletions(demo_trajectories)):
        edited, b2, log = delete_units(traj, b, units)
        kinds.update(u[0] for u in units)
        gone = {u[1] for u in units if u[0] == "step"}
        assert b2 == b - len(gone) - sum("nothing left" in n for n in log.notes)
        assert edited.n_steps == traj.n_steps - (b - b2) and edited.steps[b2:] == traj.steps[b:]
        assert [p for s in edited.steps for p in _protocol_problems(s)] == [], (traj.task_id, units)
        nxt = render(edited, b2 + 1, tokenizer)  # the render harm teacher-forces (the prompt at b2 is its prefix)
        assert nxt.spans("action", step=b2 + 1), (traj.task_id, units)
        # a step keeps no reasoning exactly when every one of its blocks was deleted (and the step was kept)
        kept = [t for t in range(1, traj.n_steps + 1) if t not in gone and not (b2 < b and t <= b and
                any(f"step {t}:" in n for n in log.notes))]
        for new_t, t in enumerate(kept, start=1):
            blocks = {u[2] for u in units if u[0] == "reasoning" and u[1] == t}
            if blocks and blocks == set(range(len(traj.steps[t - 1].blocks))):
                emptied.add((i, new_t))
        record = edited.to_json() | {"task_id": f"{traj.task_id}#{i}"}
        records.append(json.dumps(record))
    path = tmp_path / "deleted.jsonl"
    path.write_text("\n".join(records) + "\n")
    report = validate_file(path, strict=True)
    assert set(kinds) == set(UNIT_KINDS)
    # Every deleted history is valid, even under strict; a step whose every reasoning block was deleted is a
    # valid step without reasoning, listed as a note exactly there (module docstring of interp.data.deletions).
    assert report.problems == [] and report.warnings == []
    assert report.n_trajectories == len(records)
    noted = set()
    for note in report.notes:
        _, line, where, message = note.split(":", 3)
        assert message.strip() == NO_REASONING, note
        noted.add((int(line) - 1, int(where.strip().removeprefix("steps[").split("]")[0]) + 1))
    assert noted == emptied and emptied


def test_tool_exchange_keeps_calls_and_results_paired(demo_trajectories):
    traj = next(t for t in demo_trajectories if any(s.action.parallel for s in t.steps[:-1]))
    t = next(i for i, s in enumerate(traj.steps[:-1], start=1) if s.action.parallel)
    step = traj.steps[t - 1]
    edited, b2, log = delete_units(traj, traj.n_steps - 1, [("tool_exchange", t, 0)])
    new = edited.steps[t - 1]
    assert b2 == traj.n_steps - 1 and new.action.calls == step.action.calls[1:]
    assert list(new.observations) == step.observations[1:] and new.reasoning == step.reasoning
    edited, _, _ = delete_units(traj, traj.n_steps - 1, [("tool_exchange", t, k) for k in range(len(step.action.calls))])
    new = edited.steps[t - 1]
    assert new.action.is_text and new.action.text == "" and new.observation is None and new.blocks == step.blocks
    assert [e.what for e in log.edits] == ["tool_exchange"]


def test_observation_of_a_tool_call_is_emptied_not_orphaned(demo_trajectories):
    traj = demo_trajectories[0]
    edited, b2, log = delete_units(traj, 2, [("observation", 1, 0)])
    assert b2 == 2 and edited.steps[0].observation == "" and edited.steps[0].action == traj.steps[0].action
    assert log.edits[0].op == "emptied" and log.edits[0].chars == len(traj.steps[0].observation)


def test_step_deletion_shifts_the_boundary_and_annotations(demo_trajectories):
    traj = next(t for t in demo_trajectories if t.annotations)
    b = traj.n_steps - 1
    edited, b2, _ = delete_units(traj, b, [("step", 1, None), ("reasoning", 1, 0)])
    assert b2 == b - 1 and edited.steps == traj.steps[1:]
    assert [a.after_step for a in edited.annotations] == [a.after_step - 1 for a in traj.annotations
                                                          if a.after_step != 1]
    # nothing left of a step: removed like a step unit
    step = traj.steps[0]
    units = [("reasoning", 1, k) for k in range(len(step.blocks))] + [
        ("tool_exchange", 1, k) for k in range(len(step.action.calls))]
    edited2, b3, log = delete_units(traj, b, units)
    assert b3 == b - 1 and edited2.steps == traj.steps[1:] and any("nothing left" in n for n in log.notes)


def test_units_overlap_and_kinds_are_checked(demo_trajectories):
    assert units_overlap(("step", 2, None), ("reasoning", 2, 1))
    assert units_overlap(("observation", 2, 1), ("tool_exchange", 2, 1))
    assert not units_overlap(("observation", 2, 0), ("tool_exchange", 2, 1))
    assert not units_overlap(("reasoning", 2, 0), ("reasoning", 3, 0))
    assert parse_unit_kinds("reasoning, step,reasoning") == ("reasoning", "step")
    with pytest.raises(ValueError, match="unknown unit kind"):
        parse_unit_kinds("reasoning,blocks")
    traj = demo_trajectories[0]
    with pytest.raises(ValueError, match="not in the history"):
        delete_units(traj, 2, [("reasoning", 3, 0)])
    with pytest.raises(ValueError, match="no unit"):
        delete_units(traj, 2, [("reasoning", 1, 9)])
