"""SWE-agent trajectory files (``.traj``): the ``trajectory`` list of thought / action / observation.

A ``.traj`` file is one JSON object: ``trajectory`` (one entry per step:
``response``, ``thought``, ``action``, ``observation``, ``state``, ``query``,
``execution_time``, ...), ``history`` (the chat messages sent to the model) and
``info`` (``exit_status``, ``submission``, ``model_stats``, ...). What is mapped
(``data/README.md`` lists it with what is dropped):

* each ``trajectory`` entry: one step; ``thought`` is the reasoning verbatim
  (empty when the model wrote none); ``action``, the command line the agent
  ran (SWE-agent's own commands such as ``open`` or ``edit`` are shell
  functions too), becomes ``{"tool": "bash", "arguments": {"command": action}}``
  verbatim; a blank action is an empty text action; ``observation`` is the
  observation (non-string JSON as its JSON text);
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
from typing import Any

from interp.data.importers.common import (
    REASONING_JOIN, RunContext, RunProblem, expect, metadata_of, text_of,
)

FORMAT = "swe-agent"
DEFAULT_DOMAIN = "code"
TOOL = "bash"
USED = {"trajectory", "history", "task_id", "instance_id", "id", "domain"}


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
    steps = [_step(expect(e, dict, f"trajectory[{i}]", "a step object"), f"trajectory[{i}]")
             for i, e in enumerate(entries)]
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


def _step(entry: dict[str, Any], where: str) -> dict[str, Any]:
    thought = entry.get("thought")
    reasoning = "" if thought is None else expect(thought, str, f"{where}.thought", "a string")
    command = expect(entry.get("action"), str, f"{where}.action", "the command as a string")
    obs = entry.get("observation")
    if obs is not None and not isinstance(obs, str):
        obs = json.dumps(obs, ensure_ascii=False)
    action = {"tool": TOOL, "arguments": {"command": command}} if command.strip() else {"text": ""}
    return {"reasoning": reasoning, "action": action, "observation": obs}


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
