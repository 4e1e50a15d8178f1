"""Protocol-valid deletion of history units at boundary b: the candidates of set-level harm (DRSR).

A **unit** is ``(kind, step, index)`` (steps 1-based, ``index`` None for a
whole step); :func:`history_units` lists the units of steps ``1..b`` of the
chosen kinds, :func:`delete_units` removes a set of them (a pure edit with an
:class:`~interp.data.conditions.EditLog`) and returns the edited trajectory and
its boundary. Later steps are kept as recorded.

| kind            | unit                          | what is deleted                                                  |
|-----------------|-------------------------------|------------------------------------------------------------------|
| reasoning       | ``("reasoning", t, k)``       | reasoning block k of step t                                      |
| observation     | ``("observation", t, k)``     | the text of observation k of step t. A tool result keeps its (now empty) message, so its call still has a result; the feedback turn of a text action is removed |
| tool_exchange   | ``("tool_exchange", t, k)``   | tool call k of step t together with its result (observation k). A step left with no call keeps its reasoning as an assistant turn with no tool call and no result (an empty text action, observation null) |
| step            | ``("step", t, None)``         | the whole step t (reasoning, action, observations); the boundary and the annotations of later steps move down by one, an annotation of step t is dropped |

Protocol invariants (tested on the demo set): no deletion leaves a tool result
without its call or a call without its result (``len(observations) ==
len(calls)`` for every tool-call step that had results), and the edited
trajectory passes the schema of the trajectory format and renders. A step left
with nothing (no reasoning block, no call or text, no observation) is removed
as a whole, exactly like a ``step`` unit. Deleting every reasoning block of a
step leaves it with empty reasoning, as ``delete_all_reasoning`` does: a valid
step without reasoning (the validator lists it as a note only). A step that
had no reasoning to begin with has no ``reasoning`` unit.

Units overlap when one deletion contains the other (a step and any unit of it;
an observation and the tool exchange of the same index); :func:`delete_units`
deletes their union, and set-level harm samples only sets of non-overlapping units.

Which sets remove a step whole is known without editing: :func:`step_shapes` records per step of the history
``[n_blocks, n_calls, n_observations, keeps]`` (``keeps``: a text action with text, which no unit deletes) and
:func:`empties_step` applies :func:`delete_units`' rule to those shapes (tested against it on the demo set), so
the set-risk gate refuses such sets offline (from a DRSR record) and online (from the trajectory) by one rule.
An observation whose text is empty (one emptied by an earlier deletion) has nothing to delete:
:func:`unit_is_empty` says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import cast

from interp.data.conditions import Edit, EditLog, TokenCounter
from interp.data.trajectory import Action, Step, Trajectory, join_blocks

Unit = tuple[str, int, "int | None"]  # (kind, step, index)
UNIT_KINDS = ("reasoning", "observation", "tool_exchange", "step")
# DRSR deletes protocol-valid history blocks of every kind: reasoning, observations, tool exchanges (the
# default of set-level harm, ``patching.harm``); whole steps are this toolkit's granularity addition.
DRSR_UNIT_KINDS = ("reasoning", "observation", "tool_exchange")


def drsr_compared(members: Iterable[Sequence[object]]) -> bool:
    """Whether a set of units enters the rows compared with DRSR's tables: every member one of DRSR's block
    kinds (``DRSR_UNIT_KINDS``); a set holding a whole step is the toolkit's granularity addition, reported apart."""
    return all(m[0] in DRSR_UNIT_KINDS for m in members)


def parse_unit_kinds(kinds: str | Iterable[str]) -> tuple[str, ...]:
    """Unit kinds from a comma list or an iterable, validated, duplicates dropped, in the order given."""
    items = [k.strip() for k in (kinds.split(",") if isinstance(kinds, str) else kinds) if k.strip()]
    unknown = [k for k in items if k not in UNIT_KINDS]
    if unknown or not items:
        raise ValueError(f"unknown unit kind(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(UNIT_KINDS)}")
    return tuple(dict.fromkeys(items))


def history_units(traj: Trajectory, after_step: int, kinds: Sequence[str] = ("reasoning",)) -> list[Unit]:
    """Every unit of the given kinds in steps ``1..after_step``, ordered by step, then kind (UNIT_KINDS order), then index."""
    kinds = parse_unit_kinds(kinds)
    if not 0 <= after_step <= traj.n_steps:
        raise ValueError(f"{traj.task_id}: boundary {after_step} out of range 0..{traj.n_steps}")
    units: list[Unit] = []
    for t in range(1, after_step + 1):
        step = traj.steps[t - 1]
        for kind in (k for k in UNIT_KINDS if k in kinds):
            if kind == "reasoning":
                units += [(kind, t, k) for k in range(len(step.blocks))]
            elif kind == "observation":
                units += [(kind, t, k) for k in range(len(step.observations))]
            elif kind == "tool_exchange":
                units += [(kind, t, k) for k in range(len(step.action.calls))]
            else:
                units.append((kind, t, None))
    return units


def units_overlap(a: Unit, b: Unit) -> bool:
    """True when two units share something deleted (the same unit, a step and a unit of it, an observation and its exchange)."""
    if a[1] != b[1]:
        return False
    if a == b or "step" in (a[0], b[0]):
        return True
    return {a[0], b[0]} == {"observation", "tool_exchange"} and a[2] == b[2]


def step_shapes(traj: Trajectory, after_step: int) -> list[list[int]]:
    """Per step 1..after_step: ``[n_blocks, n_calls, n_observations, keeps]`` (keeps 1: a non-empty text action)."""
    return [[len(s.blocks), len(s.action.calls), len(s.observations), int(s.action.is_text and bool(s.action.text))]
            for s in traj.steps[:after_step]]


def empties_step(shapes: Sequence[Sequence[int]], units: Iterable[Unit]) -> bool:
    """True when deleting ``units`` (non-overlapping, none a step) leaves some step with nothing: every block and
    every call of a tool-call step, or every block and observation of a text step whose text is empty."""
    by_step: dict[int, list[Unit]] = {}
    for u in units:
        by_step.setdefault(int(u[1]), []).append(u)
    for t, mine in by_step.items():
        n_blocks, n_calls, n_obs, keeps = shapes[t - 1]
        count = {k: sum(u[0] == k for u in mine) for k in ("reasoning", "tool_exchange", "observation")}
        if count["reasoning"] < n_blocks:
            continue
        if (n_calls and count["tool_exchange"] == n_calls) or (
                not n_calls and not keeps and count["observation"] == n_obs):
            return True
    return False


def unit_is_empty(traj: Trajectory, unit: Unit) -> bool:
    """True for an observation unit whose text is empty (nothing of it is rendered to delete)."""
    return unit[0] == "observation" and not traj.steps[unit[1] - 1].observations[unit[2] or 0]


def _check(traj: Trajectory, after_step: int, unit: Unit) -> None:
    kind, t, k = unit
    if kind not in UNIT_KINDS:
        raise ValueError(f"unknown unit kind {kind!r}; known: {', '.join(UNIT_KINDS)}")
    if not 1 <= t <= after_step:
        raise ValueError(f"{traj.task_id}: unit {unit} is not in the history 1..{after_step}")
    step = traj.steps[t - 1]
    n = {"reasoning": len(step.blocks), "observation": len(step.observations),
         "tool_exchange": len(step.action.calls)}.get(kind)
    if (n is None and k is not None) or (n is not None and not (isinstance(k, int) and 0 <= k < n)):
        raise ValueError(f"{traj.task_id}: no unit {unit} (step {t} has {n} {kind} units)")


def _count(counter: TokenCounter | None, text: str) -> int | None:
    return counter(text) if counter is not None else None


def _edit_step(t: int, step: Step, units: set[Unit], log: EditLog, counter: TokenCounter | None) -> Step | None:
    """Step t with its units deleted, or None when nothing is left of it."""
    # _check gave every reasoning, observation and tool_exchange unit an index (k is not None only narrows)
    blocks = {k for kind, _, k in units if kind == "reasoning" and k is not None}
    calls = {k for kind, _, k in units if kind == "tool_exchange" and k is not None}
    emptied = {k for kind, _, k in units if kind == "observation" and k is not None} - calls
    kept_blocks = []
    for k, blk in enumerate(step.blocks):
        if k in blocks:
            log.edits.append(Edit(t, k, "reasoning_block", "removed", len(blk), _count(counter, blk)))
        else:
            kept_blocks.append(blk)
    observations = step.observations
    action, new_obs = step.action, list(observations)
    if step.action.is_text:  # a feedback turn is not a tool result: removed whole
        for k in sorted(emptied):
            log.edits.append(Edit(t, k, "observation", "removed", len(observations[k]),
                                  _count(counter, observations[k])))
        new_obs = [o for k, o in enumerate(observations) if k not in emptied]
    else:
        for k in sorted(calls):
            call = step.action.calls[k]
            text = call.tool + str(dict(call.arguments)) + (observations[k] if k < len(observations) else "")
            log.edits.append(Edit(t, k, "tool_exchange", "removed", len(text), None))
        for k in sorted(emptied):
            log.edits.append(Edit(t, k, "observation", "emptied", len(observations[k]),
                                  _count(counter, observations[k])))
        kept_calls = tuple(c for k, c in enumerate(step.action.calls) if k not in calls)
        new_obs = ["" if k in emptied else o for k, o in enumerate(observations) if k not in calls]
        action = replace(step.action, calls=kept_calls) if kept_calls else Action(text="")
    if isinstance(step.observation, tuple):
        observation: str | tuple[str, ...] | None = tuple(new_obs) if new_obs or not action.is_text else None
    else:
        observation = new_obs[0] if new_obs else None
    edited = replace(step, reasoning=join_blocks(kept_blocks) if blocks else step.reasoning,
                     action=action, observation=observation)
    if not edited.blocks and action.is_text and not action.text and not edited.observations:
        log.notes.append(f"step {t}: nothing left after the deletion; removed as a whole")
        return None
    return edited


def delete_units(traj: Trajectory, after_step: int, units: Iterable[Unit],
                 counter: TokenCounter | None = None) -> tuple[Trajectory, int, EditLog]:
    """Delete ``units`` (their union) from the history at ``after_step``; return (trajectory, its boundary, edit log)."""
    unique = cast("set[Unit]", {tuple(u) for u in units})  # units read from JSON are lists
    for u in sorted(unique, key=lambda u: (u[1], UNIT_KINDS.index(u[0]) if u[0] in UNIT_KINDS else -1, u[2] or 0)):
        _check(traj, after_step, u)
    log = EditLog("delete_units", after_step, params={"units": sorted([list(u) for u in unique], key=str)})
    steps: list[Step] = []
    removed: list[int] = []
    for t, step in enumerate(traj.steps, start=1):
        mine = {u for u in unique if u[1] == t}
        if ("step", t, None) in mine:
            text = step.reasoning + "".join(step.observations) + str(step.action.to_json())
            log.edits.append(Edit(t, None, "step", "removed", len(text), None))
            removed.append(t)
            continue
        edited = _edit_step(t, step, mine, log, counter) if mine else step
        if edited is None:
            removed.append(t)
        else:
            steps.append(edited)
    if not removed:
        return replace(traj, steps=tuple(steps)), after_step, log
    annotations = tuple(replace(a, after_step=a.after_step - sum(r < a.after_step for r in removed))
                        for a in traj.annotations if a.after_step not in removed)
    return replace(traj, steps=tuple(steps), annotations=annotations), after_step - len(removed), log
