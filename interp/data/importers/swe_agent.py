"""SWE-agent trajectory files (``.traj``): the ``trajectory`` list of thought / action / observation.

A ``.traj`` file is one JSON object: ``trajectory`` (one entry per step:
``response``, ``thought``, ``action``, ``observation``, ``state``, ``query``,
``execution_time``, ...), ``history`` (the chat messages sent to the model) and
``info`` (``exit_status``, ``submission``, ``model_stats``, ...). What is mapped
(``docs/reference/importers.md`` lists it with what is dropped):

* each ``trajectory`` entry: one step; ``thought`` is the reasoning verbatim
  (empty when the model wrote none);
* the step's assistant message in ``history`` is found by content, not by
  count: the first not yet paired assistant message after the previous
  step's whose ``action`` and ``thought`` are the step's. A step with no
  such message (a final summary SWE-agent writes as a step of its own, a
  ``submit`` whose message it never writes) loses only its own structure;
  every other step keeps its message;
* the action of a function-calling run is the structured tool call of that
  message (tool name and arguments as written: ``str_replace_editor
  {command, path, old_str, ...}``); of an XML-calling run (SWE-agent 1.0
  with ``xml_function_calling``, SWE-agent-LM) the
  ``<function=NAME><parameter=KEY>VALUE</parameter></function>`` block of
  the step's ``response``, one newline after the opening and before the
  closing parameter tag dropped as SWE-agent's own parser does; where there
  is neither, ``action``, the command line the agent ran (SWE-agent's own
  commands such as ``open`` or ``edit`` are shell functions too), becomes
  ``{"tool": "bash", "arguments": {"command": action}}`` verbatim, counted;
  a thought with a blank action (a final summary) is a text action holding
  the thought; ``observation`` is the observation (non-string JSON as its
  JSON text);
* the provider reasoning of the step's message (``thinking_blocks``,
  ``reasoning_content``, ...; :func:`provider_reasoning`) is the step's
  reasoning, the thought then its ``assistant_text`` (as in the chat formats);
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
documentation is in the system prompt); ``interp validate --strict`` notes it.
Every field of a step, of a history message and of a tool call that does not
reach the output is counted by path (``trajectory[].response``,
``history[].agent``); an unknown one holding text is a problem under
``--strict``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from interp.data.importers.common import (
    REASONING_JOIN, REASONING_KEYS, RunContext, RunProblem, call_action, expect, metadata_of, object_at,
    parse_arguments, provider_reasoning, text_of,
)

FORMAT = "swe-agent"
DEFAULT_DOMAIN = "code"
TOOL = "bash"
USED = {"trajectory", "history", "task_id", "instance_id", "id", "domain"}
HARNESS = re.compile(r"\s*Exit(?:ed)? due to\b")  # the thought SWE-agent writes for a step it ends itself
STEP_USED = frozenset({"thought", "action", "observation"})
# documented as dropped (counted): the raw model output, environment state, the query and per-step messages
# (they repeat the history), timing and extra info
STEP_KNOWN = frozenset({"response", "state", "query", "execution_time", "extra_info", "messages"})
# history message fields: the role and text (repeating the steps), SWE-agent's bookkeeping, provider fields
TURN_USED = frozenset({"role", "content", "thought", "action", "tool_calls", "is_demo", "message_type"})
TURN_KNOWN = frozenset({"agent", "tool_call_ids", "cache_control", "provider_specific_fields", "name"})
CALL_USED = frozenset({"id", "type", "function"})
CALL_KNOWN = frozenset({"index"})
FUNCTION = re.compile(r"<function=([^>]+)>(.*?)</function>", re.DOTALL)  # SWE-agent 1.0 XML calls
PARAMETER = re.compile(r"<parameter=([^>]+)>(.*?)</parameter>", re.DOTALL)


def looks_like(record: object) -> bool:
    """Sniff (``interp import auto``): an object whose ``trajectory`` is a list of steps with ``action``."""
    steps = record.get("trajectory") if isinstance(record, dict) else None
    return isinstance(steps, list) and bool(steps) and all(isinstance(s, dict) and "action" in s for s in steps)


def convert(record: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """One SWE-agent run as a trajectory record (see the module docstring)."""
    expect(record, dict, "(record)", "a .traj object with a 'trajectory' list")
    entries = expect(record.get("trajectory"), list, "trajectory", "a list of steps")
    if not entries:
        raise RunProblem("trajectory", "no steps: a trajectory needs at least one")
    for i, entry in enumerate(entries):
        expect(entry, dict, f"trajectory[{i}]", "a step object")
    turns = _history_turns(record.get("history"), ctx)
    paired = _pair(entries, [m for _, m in turns])
    unpaired = len(turns) - len({k for k in paired if k is not None})
    if unpaired:
        ctx.drop("history[] (assistant message of no step: its calls and reasoning are not in the output)", unpaired)
    steps = []
    for i, entry in enumerate(entries):
        k = paired[i]
        turn = turns[k] if k is not None else None
        step = _step(entry, f"trajectory[{i}]", turn, ctx)
        if step is not None:
            steps.append(step)
    if not steps:
        raise RunProblem("trajectory", "no step of the model: every step is a harness message")
    history, where = record.get("history"), "history"
    if not history:
        history, where = entries[0].get("query"), "trajectory[0].query"
    system, task = _prompt(expect(history, list, where, "a list of chat messages (the task is read from it)"),
                           where, ctx)
    submission = object_at(record, "info").get("submission")
    out: dict[str, Any] = {"task_id": ctx.task_id(record), "domain": ctx.domain_of(record, DEFAULT_DOMAIN),
           "system_prompt": system, "tools": [], "task": task, "steps": steps,
           "final_answer": submission if isinstance(submission, str) else None, "outcome": {}}
    meta = metadata_of(record, USED)
    return {**out, "metadata": meta} if meta else out


def _step(entry: dict[str, Any], where: str, turn: tuple[int, dict[str, Any]] | None,
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
    calls, thinking, used = None, "", set(STEP_USED)
    if turn is not None:
        calls = _turn_calls(turn[1], f"history[{turn[0]}]", ctx)
        thinking, _ = provider_reasoning(turn[1], f"history[{turn[0]}]", ctx)
    if calls is None and command.strip() and isinstance(entry.get("response"), str):
        calls = _xml_call(entry["response"], f"{where}.response")
        used |= {"response"} if calls else set()
    ctx.unmapped(entry, where, used, STEP_KNOWN)
    extra: dict[str, Any] = {}
    if calls:
        action = call_action(calls)
    elif command.strip():
        if turn is None or not turn[1].get("tool_calls"):
            ctx.drop("trajectory[].action (no structured call: the command line kept as a bash call)")
        action = {"tool": TOOL, "arguments": {"command": command}}
    else:  # a thought with no command: what the model wrote is its text (a final summary)
        if not reasoning.strip():
            ctx.drop("trajectory[].action (blank, with a blank thought: an empty text action)")
        action, reasoning = {"text": reasoning}, ""
    if thinking.strip():
        if reasoning.strip() and ("tool" in action or "calls" in action):
            extra["assistant_text"] = reasoning
        reasoning = thinking
    return {"reasoning": reasoning, "action": action, "observation": obs, **extra}


def _history_turns(history: Any, ctx: RunContext) -> list[tuple[int, dict[str, Any]]]:
    """``(index, message)`` of the model's assistant messages in ``history`` (demonstrations skipped); every
    field of every history message that does not reach the output is counted."""
    if not isinstance(history, list):
        return []
    turns = []
    for i, msg in enumerate(history):
        if not isinstance(msg, dict):
            continue
        demo = msg.get("is_demo") or msg.get("message_type") == "demonstration"
        read = set(REASONING_KEYS) if msg.get("role") == "assistant" and not demo else set()
        ctx.unmapped(msg, f"history[{i}]", TURN_USED | read, TURN_KNOWN)
        if demo:
            ctx.drop("history[] (demonstration messages)")
        elif msg.get("role") == "assistant":
            turns.append((i, msg))
    return turns


def _pair(entries: list[dict[str, Any]], turns: list[dict[str, Any]]) -> list[int | None]:
    """The index in ``turns`` of each step's assistant message, paired by content (``action`` and ``thought``
    as written), in order: each step takes the first unpaired message after the previous pair that matches
    it; a step with none gets None. Messages without ``action`` (older histories) pair by position when there
    are as many as steps."""
    if turns and not any("action" in t for t in turns):
        return list(range(len(entries))) if len(turns) == len(entries) else [None] * len(entries)
    out: list[int | None] = []
    nxt = 0
    for entry in entries:
        k = next((k for k in range(nxt, len(turns)) if _same(entry, turns[k])), None)
        out.append(k)
        nxt = k + 1 if k is not None else nxt
    return out


def _same(entry: dict[str, Any], turn: dict[str, Any]) -> bool:
    """Whether a history message is the one a step was made from: the same action and thought."""
    if turn.get("action") != entry.get("action"):
        return False
    return "thought" not in turn or "thought" not in entry or turn["thought"] == entry["thought"]


def _turn_calls(msg: dict[str, Any], where: str, ctx: RunContext) -> list[dict[str, Any]] | None:
    """The structured tool calls of one assistant message (None when it has none)."""
    calls = []
    for j, call in enumerate(msg.get("tool_calls") or []):
        at = f"{where}.tool_calls[{j}]"
        expect(call, dict, at, "a tool call object")
        fn = expect(call.get("function", call), dict, at, "a function object")
        if fn is not call:
            ctx.unmapped(call, at, CALL_USED, CALL_KNOWN)
            ctx.unmapped(fn, f"{at}.function", {"name", "arguments"}, set())
        name = expect(fn.get("name"), str, f"{at}.function.name", "the tool name as a string")
        calls.append({"tool": name, "arguments": parse_arguments(fn.get("arguments"), f"{at}.function.arguments")})
    return calls or None


def _xml_call(response: str, where: str) -> list[dict[str, Any]] | None:
    """The ``<function=NAME>`` call of an XML-calling response, its parameters as written (one newline after
    the opening and before the closing tag dropped), or None when the response holds none."""
    match = FUNCTION.search(response)
    if match is None:
        return None
    args = {key.strip(): re.sub(r"^\n|\n$", "", value) for key, value in PARAMETER.findall(match.group(2))}
    name = match.group(1).strip()
    if not name:
        raise RunProblem(where, "a <function=...> call with no tool name")
    return [{"tool": name, "arguments": args}]


def _prompt(history: list[Any], where: str, ctx: RunContext) -> tuple[str, str]:
    """``(system prompt, task)`` from the chat before the first assistant message."""
    system: list[str] = []
    task: list[str] = []
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
