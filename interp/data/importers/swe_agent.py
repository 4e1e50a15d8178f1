"""SWE-agent trajectory files (``.traj``): the ``trajectory`` list of thought / action / observation.

A ``.traj`` file is one JSON object: ``trajectory`` (one entry per step:
``response``, ``thought``, ``action``, ``observation``, ``state``, ``query``,
``execution_time``, ...), ``history`` (the chat messages sent to the model) and
``info`` (``exit_status``, ``submission``, ``model_stats``, ...). What is mapped
(``data/README.md`` lists it with what is dropped):

* each ``trajectory`` entry: one step; ``thought`` is the reasoning verbatim
  (empty when the model wrote none); the action of a function-calling run is
  the structured tool call the model wrote, read from the assistant message of
  ``history`` that belongs to the step (tool name and arguments as written:
  ``str_replace_editor {command, path, old_str, ...}``); where there is none,
  ``action``, the command line the agent ran (SWE-agent's own commands such
  as ``open`` or ``edit`` are shell functions too), becomes
  ``{"tool": "bash", "arguments": {"command": action}}`` verbatim; a thought
  with a blank action (a final summary) is a text action holding the thought;
  ``observation`` is the observation (non-string JSON as its JSON text);
* harness steps (an ``exit_*`` action, or a blank action whose thought is
  "Exit due to ..." after a cost, step or format limit) are not the model's:
  dropped and counted;
* the system prompt and task: the ``system`` message and the ``user`` messages
  before the first ``assistant`` one in ``history`` (demonstrations skipped),
  or in the first step's ``query`` when there is no history;
* ``info.submission`` (the patch): the final answer;
* the task id: the run's ``instance_id``/``task_id``/``id``, else the file name
  without ``.traj``; the domain defaults to ``code``; ``info`` and the other
  top-level fields go to ``metadata``.

No tools are declared (a ``.traj`` file has no tool schemas; the command
documentation is in the system prompt).
"""

from __future__ import annotations

import json
import re
from typing import Any

from interp.data.importers.common import (
    REASONING_JOIN, RunContext, RunProblem, call_action, expect, metadata_of, parse_arguments, text_of,
)

FORMAT = "swe-agent"
DEFAULT_DOMAIN = "code"
TOOL = "bash"
USED = {"trajectory", "history", "task_id", "instance_id", "id", "domain"}
HARNESS = re.compile(r"\s*Exit(?:ed)? due to\b")  # the thought SWE-agent writes for a step it ends itself


def looks_like(record: Any) -> bool:
    """Sniff (``interp import auto``): an object whose ``trajectory`` is a list of steps with ``action``."""
    steps = record.get("trajectory") if isinstance(record, dict) else None
    return isinstance(steps, list) and bool(steps) and all(isinstance(s, dict) and "action" in s for s in steps)


def convert(record: Any, ctx: RunContext) -> dict[str, Any]:
    """One SWE-agent run as a trajectory record (see the module docstring)."""
    expect(record, dict, "(record)", "a .traj object with a 'trajectory' list")
    entries = expect(record.get("trajectory"), list, "trajectory", "a list of steps")
    if not entries:
        raise RunProblem("trajectory", "no steps: a trajectory needs at least one")
    calls = _history_calls(record.get("history"), [e.get("action") if isinstance(e, dict) else None for e in entries],
                           ctx)
    steps = []
    for i, entry in enumerate(entries):
        step = _step(expect(entry, dict, f"trajectory[{i}]", "a step object"), f"trajectory[{i}]", calls[i], ctx)
        if step is not None:
            steps.append(step)
    if not steps:
        raise RunProblem("trajectory", "no step of the model: every step is a harness message")
    history, where = record.get("history"), "history"
    if not history:
        history, where = entries[0].get("query"), "trajectory[0].query"
    system, task = _prompt(expect(history, list, where, "a list of chat messages (the task is read from it)"),
                           where, ctx)
    info = record.get("info") if isinstance(record.get("info"), dict) else {}
    submission = info.get("submission")
    out = {"task_id": ctx.task_id(record), "domain": ctx.domain_of(record, DEFAULT_DOMAIN),
           "system_prompt": system, "tools": [], "task": task, "steps": steps,
           "final_answer": submission if isinstance(submission, str) else None, "outcome": {}}
    meta = metadata_of(record, USED)
    return {**out, "metadata": meta} if meta else out


def _step(entry: dict[str, Any], where: str, calls: list[dict[str, Any]] | None,
          ctx: RunContext) -> dict[str, Any] | None:
    """One step, or None for a harness step (dropped and counted)."""
    thought = entry.get("thought")
    reasoning = "" if thought is None else expect(thought, str, f"{where}.thought", "a string")
    command = expect(entry.get("action"), str, f"{where}.action", "the command as a string")
    if command.strip().startswith("exit_") or (not command.strip() and HARNESS.match(reasoning)):
        ctx.drop(f"trajectory[] (harness step: {command.strip() or reasoning.strip()[:40]})")
        return None
    obs = entry.get("observation")
    if obs is not None and not isinstance(obs, str):
        obs = json.dumps(obs, ensure_ascii=False)
    if calls:
        action = call_action(calls)
    elif command.strip():
        action = {"tool": TOOL, "arguments": {"command": command}}
    else:  # a thought with no command: what the model wrote is its text (a final summary)
        if not reasoning.strip():
            ctx.drop("trajectory[].action (blank, with a blank thought: an empty text action)")
        action, reasoning = {"text": reasoning}, ""
    return {"reasoning": reasoning, "action": action, "observation": obs}


def _history_calls(history: Any, actions: list[Any], ctx: RunContext) -> list[list[dict[str, Any]] | None]:
    """The structured tool calls of each step, from the model's assistant messages in ``history``.

    The assistant messages that are not demonstrations belong to the steps in
    order. SWE-agent does not write the last step's message when that step
    ends the run (``submit``): fewer messages than steps pair with the first
    steps when each message's ``action`` is its step's action, and the steps
    left keep their command lines (counted). Otherwise, when the numbers
    differ (a history cut or rewritten), no call is taken from it and every
    step keeps its command line (counted).
    """
    n_steps = len(actions)
    none: list[list[dict[str, Any]] | None] = [None] * n_steps
    if not isinstance(history, list):
        return none
    turns = [(i, m) for i, m in enumerate(history) if isinstance(m, dict) and m.get("role") == "assistant"
             and not (m.get("is_demo") or m.get("message_type") == "demonstration")]
    if not any(m.get("tool_calls") for _, m in turns):
        return none
    if len(turns) < n_steps and all("action" in m and m["action"] == actions[k] for k, (_, m) in enumerate(turns)):
        ctx.drop("trajectory[].action (no assistant message in history: command line kept)", n_steps - len(turns))
    elif len(turns) != n_steps:
        ctx.drop("history[].tool_calls (not one assistant message per step: command lines kept)")
        return none
    out: list[list[dict[str, Any]] | None] = []
    for i, msg in turns:
        calls = []
        for j, call in enumerate(msg.get("tool_calls") or []):
            at = f"history[{i}].tool_calls[{j}]"
            fn = expect(expect(call, dict, at, "a tool call object").get("function", call), dict, at,
                        "a function object")
            name = expect(fn.get("name"), str, f"{at}.function.name", "the tool name as a string")
            calls.append({"tool": name, "arguments": parse_arguments(fn.get("arguments"), f"{at}.function.arguments")})
        out.append(calls or None)
    return out + none[len(out):]


def _prompt(history: list[Any], where: str, ctx: RunContext) -> tuple[str, str]:
    """``(system prompt, task)`` from the chat before the first assistant message."""
    system, task = [], []
    for i, msg in enumerate(history):
        at = f"{where}[{i}]"
        expect(msg, dict, at, "a message object")
        if msg.get("is_demo") or msg.get("message_type") == "demonstration":
            continue
        if msg.get("role") == "assistant":
            break
        text = text_of(msg.get("content"), f"{at}.content", ctx)
        (system if msg.get("role") == "system" else task).append(text)
    if not any(t.strip() for t in task):
        raise RunProblem(where, "no user message before the first assistant message (the task)")
    return REASONING_JOIN.join(system), REASONING_JOIN.join(t for t in task if t.strip())
