"""Scoring a generated turn against a state's rubric, and whether it re-acquires a hidden observation.

The turn is parsed (``interp.data.parse``) and scored against the rubric:

=================  ===================================================================
check              passes when
=================  ===================================================================
next_tool          some call's tool is in the expected set
args_match         (one check per pattern) the pattern is found in the arguments text
                   of a call whose tool is expected (any call when no tool is given)
args_not_match     (one per pattern) the pattern is found in no call's arguments text
no_repeat          (one per rule) no call has the rule's tool and, when given, matches
                   its ``args`` pattern
writes_code        the turn writes code or a file (``interp.data.actions.writes_code``)
                   exactly when the marker says so
=================  ===================================================================

``score`` = mean of the rubric's checks (0..1). A turn from which no action can
be read is scored 0 with ``parse_failure`` true, never dropped. The
*arguments text* of a call is one ``key: value`` line per leaf argument
(nested keys dotted, list items ``key[i]``, non-strings as JSON); patterns are
Python regexes applied with ``re.search`` (use ``(?i)``, ``(?m)``, ``(?s)`` inline).

*Re-acquisition*: the turn re-runs a command or re-reads a file whose output
``hide_observation`` / ``hide_stderr`` removed (the calls of step ``hide_step``,
default b). A call of the turn matches a hidden call when it has the same tool
and either equivalent arguments (the same leaves, whitespace collapsed, empty
values dropped) or the same *target*: the first of ``TARGET_KEYS``
(``command``, ``cmd``, ``path``, ``file``, ``file_path``, ``filename``,
``url``) the hidden call has, with the same value (whitespace collapsed), so
re-reading the file with another line range, or re-running the command with
another timeout, counts. It is computed under every condition, so ``full``
(nothing removed) gives the base rate to compare the hiding conditions with.
"""

from __future__ import annotations

from typing import Any

from interp.continuations.states import Rubric
from interp.data.actions import argument_leaves, writes_code
from interp.data.parse import ParsedTurn
from interp.data.trajectory import Action, Step, ToolCall


def arguments_text(call: ToolCall) -> str:
    """The text rubric patterns are matched against: one ``key: value`` line per leaf argument."""
    return "\n".join(f"{key}: {value}" for key, value in argument_leaves(dict(call.arguments)))


def score_turn(turn: ParsedTurn, rubric: Rubric) -> tuple[float, list[dict[str, Any]]]:
    """``(score, checks)`` of a parsed turn; an unparseable turn scores 0 with no checks run."""
    if turn.parse_failure:
        return 0.0, []
    calls = list(turn.calls)
    texts = [arguments_text(c) for c in calls]
    expected = [t for c, t in zip(calls, texts) if not rubric.next_tool or c.tool in rubric.next_tool]
    checks: list[dict[str, Any]] = []
    if rubric.next_tool:
        checks.append({"check": "next_tool", "expected": list(rubric.next_tool),
                       "got": [c.tool for c in calls], "passed": bool(expected)})
    for pat in rubric.args_match:
        checks.append({"check": "args_match", "pattern": pat.pattern, "passed": any(pat.search(t) for t in expected)})
    for pat in rubric.args_not_match:
        checks.append({"check": "args_not_match", "pattern": pat.pattern,
                       "passed": not any(pat.search(t) for t in texts)})
    for rule in rubric.no_repeat:
        repeated = any(c.tool == rule.tool and (rule.args is None or rule.args.search(t)) for c, t in zip(calls, texts))
        checks.append({"check": "no_repeat", "tool": rule.tool, "pattern": rule.args.pattern if rule.args else None,
                       "passed": not repeated})
    if rubric.writes_code is not None:
        wrote = writes_code(Step("", Action(calls=tuple(calls)), None)) if calls else False
        checks.append({"check": "writes_code", "expected": rubric.writes_code, "passed": wrote == rubric.writes_code})
    return sum(c["passed"] for c in checks) / len(checks), checks


def _canonical(call: ToolCall) -> tuple[str, frozenset[tuple[str, str]]]:
    leaves = ((k, " ".join(v.split())) for k, v in argument_leaves(dict(call.arguments)))
    return call.tool, frozenset((k, v) for k, v in leaves if v not in ("", '""', "[]", "{}"))


def equivalent_calls(a: ToolCall, b: ToolCall) -> bool:
    """Same tool and the same arguments up to whitespace, key order and empty values."""
    return _canonical(a) == _canonical(b)


TARGET_KEYS = ("command", "cmd", "path", "file", "file_path", "filename", "url")


def same_target(a: ToolCall, hidden: ToolCall) -> bool:
    """Same tool, and the same value of the first ``TARGET_KEYS`` argument ``hidden`` has (False when it has none)."""
    key = next((k for k in TARGET_KEYS if k in hidden.arguments), None)
    if a.tool != hidden.tool or key is None or key not in a.arguments:
        return False
    norm = [" ".join(str(c.arguments[key]).split()) for c in (a, hidden)]
    return norm[0] == norm[1] != ""


def reacquires(turn: ParsedTurn, hidden: Action) -> bool | None:
    """True when the turn re-runs or re-reads a call of ``hidden`` (module docstring; None when it has no tool call)."""
    if hidden.is_text or not hidden.calls:
        return None
    return any(equivalent_calls(c, h) or same_target(c, h) for c in turn.calls for h in hidden.calls)
