"""States of controlled continuations: which trajectory, which boundary, and the rubric for the next action.

A *state* (one line of a states file, format in ``docs/reference/data-formats.md``) names a
trajectory, a boundary b, optionally the step whose observation
``hide_observation`` hides (``hide_step``, default b), and a rubric for the
next action (checks in :mod:`interp.continuations.scoring`). ``load_states``
reads a states file and reports every problem as ``FILE:LINE: field:
message`` before anything runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interp.data.jsonl import InputError, read_lines
from interp.data.trajectory import Trajectory


STATE_FIELDS = frozenset({"state_id", "task_id", "after_step", "hide_step", "note", "rubric"})


RUBRIC_FIELDS = frozenset({"next_tool", "args_match", "args_not_match", "no_repeat", "writes_code"})


class StatesError(InputError):
    """Invalid states input; ``problems`` holds one ``FILE:LINE: field: message`` per issue."""

    kind = "states input"


@dataclass(frozen=True)
class RepeatRule:
    """An action that must not be repeated: ``tool``, optionally only when ``args`` matches."""

    tool: str
    args: re.Pattern[str] | None = None


@dataclass(frozen=True)
class Rubric:
    """What the next action of a state should look like (see the module docstring)."""

    next_tool: tuple[str, ...] = ()
    args_match: tuple[re.Pattern[str], ...] = ()
    args_not_match: tuple[re.Pattern[str], ...] = ()
    no_repeat: tuple[RepeatRule, ...] = ()
    writes_code: bool | None = None

    @property
    def n_checks(self) -> int:
        """Number of checks the score averages."""
        return (bool(self.next_tool) + len(self.args_match) + len(self.args_not_match) + len(self.no_repeat)
                + (self.writes_code is not None))


@dataclass(frozen=True)
class State:
    """A fixed state: trajectory ``task_id`` at boundary ``after_step``, with its rubric."""

    state_id: str
    task_id: str
    after_step: int
    rubric: Rubric
    hide_step: int | None = None
    note: str = ""

    @property
    def hidden_step(self) -> int:
        """The step whose observation ``hide_observation`` hides."""
        return self.hide_step or self.after_step


def _regex(value: Any, where: str, problems: list[str]) -> re.Pattern[str] | None:
    if not isinstance(value, str):
        problems.append(f"{where}: expected a regex string, got {json.dumps(value)[:60]}")
        return None
    try:
        return re.compile(value)
    except re.error as exc:
        problems.append(f"{where}: bad regex {value!r}: {exc}")
        return None


def _parse_rubric(raw: Any, tools: set[str], where: str, problems: list[str]) -> Rubric | None:
    if not isinstance(raw, dict):
        problems.append(f"{where}: expected an object, got {json.dumps(raw)[:60]}")
        return None
    n0 = len(problems)
    for key in sorted(set(raw) - RUBRIC_FIELDS):
        problems.append(f"{where}.{key}: unknown rubric field (known: {', '.join(sorted(RUBRIC_FIELDS))})")
    next_tool = raw.get("next_tool", [])
    next_tool = [next_tool] if isinstance(next_tool, str) else next_tool
    if not isinstance(next_tool, list) or not all(isinstance(t, str) for t in next_tool):
        problems.append(f"{where}.next_tool: expected a tool name or a list of tool names")
        next_tool = []
    for i, tool in enumerate(next_tool):
        if tools and tool not in tools:
            problems.append(f"{where}.next_tool[{i}]: tool {tool!r} is not declared in the trajectory's tools "
                            f"({', '.join(sorted(tools))})")
    patterns = {}
    for key in ("args_match", "args_not_match"):
        values = raw.get(key, [])
        if not isinstance(values, list):
            problems.append(f"{where}.{key}: expected a list of regex strings")
            values = []
        patterns[key] = tuple(_regex(v, f"{where}.{key}[{i}]", problems) for i, v in enumerate(values))
    rules = []
    no_repeat = raw.get("no_repeat", [])
    if not isinstance(no_repeat, list):
        problems.append(f"{where}.no_repeat: expected a list of {{\"tool\": ..., \"args\": regex}} objects")
        no_repeat = []
    for i, rule in enumerate(no_repeat):
        w = f"{where}.no_repeat[{i}]"
        if not isinstance(rule, dict) or not isinstance(rule.get("tool"), str) or set(rule) - {"tool", "args"}:
            problems.append(f"{w}: expected {{\"tool\": name, \"args\": optional regex}}, got {json.dumps(rule)[:60]}")
            continue
        if tools and rule["tool"] not in tools:
            problems.append(f"{w}.tool: tool {rule['tool']!r} is not declared in the trajectory's tools")
        rules.append(RepeatRule(rule["tool"], _regex(rule["args"], f"{w}.args", problems) if "args" in rule else None))
    marker = raw.get("writes_code")
    if marker is not None and not isinstance(marker, bool):
        problems.append(f"{where}.writes_code: expected true or false, got {json.dumps(marker)[:40]}")
    if len(problems) > n0:
        return None
    # no problem was added, so every pattern compiled (the filters only narrow the type)
    args_match, args_not_match = ([p for p in patterns[key] if p is not None]
                                  for key in ("args_match", "args_not_match"))
    rubric = Rubric(tuple(next_tool), tuple(args_match), tuple(args_not_match), tuple(rules), marker)
    if rubric.n_checks == 0:
        problems.append(f"{where}: the rubric has no checks (give next_tool, args_match, args_not_match, "
                        "no_repeat or writes_code)")
        return None
    return rubric


def load_states(path: str | Path, trajectories: Sequence[Trajectory]) -> list[State]:
    """Load and validate a states file against its trajectories; every problem as ``FILE:LINE: field: message``."""
    path = Path(path)
    if not path.exists():
        raise StatesError([f"{path}: file not found"])
    by_id = {t.task_id: t for t in trajectories}
    states: list[State] = []
    problems: list[str] = []
    first_line: dict[str, int] = {}
    for entry in read_lines(path):
        lineno, raw = entry.number, entry.value
        found: list[str] = []
        if entry.problem:
            problems.append(f"{entry.at(path)}: {entry.problem}")
            continue
        if not isinstance(raw, dict):
            problems.append(f"{entry.at(path)}: (record): expected a JSON object")
            continue
        for key in sorted(set(raw) - STATE_FIELDS):
            found.append(f"{key}: unknown field (known: {', '.join(sorted(STATE_FIELDS))})")
        for key in ("task_id", "after_step", "rubric"):
            if key not in raw:
                found.append(f"{key}: missing")
        task_id = raw.get("task_id")
        traj = by_id.get(task_id) if isinstance(task_id, str) else None
        if "task_id" in raw and traj is None:
            found.append(f"task_id: unknown task {raw['task_id']!r} (not in the trajectory file)")
        b = raw.get("after_step")
        if "after_step" in raw and (not isinstance(b, int) or isinstance(b, bool)):
            found.append(f"after_step: expected an integer, got {json.dumps(b)}")
        elif traj is not None and isinstance(b, int) and not 1 <= b <= traj.n_steps:
            found.append(f"after_step: boundary {b} out of range 1..{traj.n_steps} for {traj.task_id}")
        hide = raw.get("hide_step")
        if hide is not None and (not isinstance(hide, int) or isinstance(hide, bool) or not isinstance(b, int)
                                 or not 1 <= hide <= b):
            found.append(f"hide_step: {json.dumps(hide)} is not a step of the history 1..{b}")
        tools = {t["name"] for t in traj.tools} if traj is not None else set()
        rubric = _parse_rubric(raw["rubric"], tools, "rubric", found) if "rubric" in raw else None
        state_id = raw.get("state_id", f"{raw.get('task_id')}@{b}")
        if not isinstance(state_id, str) or not state_id:
            found.append("state_id: expected a non-empty string")
        elif state_id in first_line:
            found.append(f"state_id: duplicate {state_id!r} (first on line {first_line[state_id]})")
        else:
            first_line[state_id] = lineno
        if found:
            problems.extend(f"{path}:{lineno}: {msg}" for msg in found)
            continue
        assert isinstance(b, int) and rubric is not None  # no problem found: both were present and valid
        states.append(State(state_id, raw["task_id"], b, rubric, hide, raw.get("note", "")))
    if problems:
        raise StatesError(problems)
    if not states:
        raise StatesError([f"{path}: no states"])
    return states
