"""Codex CLI rollout files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``): one rollout file, one run.

The file is read whole (:mod:`.session`). Each line is ``{"timestamp", "type",
"payload"}``. What is mapped (``docs/reference/importers.md`` lists it with what is dropped):

* ``session_meta``: the system prompt (``instructions``, or
  ``base_instructions.text`` in later versions), the session ``id`` (the task
  id), and ``cli_version``, ``originator``, ``source``, ``model_provider``,
  ``cwd``, ``git`` to ``metadata``; ``turn_context`` lines give the models
  (``metadata.models``), the rest of them is counted;
* ``response_item`` lines are the conversation (the Responses API items the
  model saw): ``developer`` / ``system`` messages before the first assistant
  turn extend the system prompt; ``user`` messages before it are the task
  (Codex's ``<environment_context>`` and AGENTS.md messages included, verbatim:
  the model saw them); later user text is the reply to a text action;
* an assistant turn is the run of items between two results: ``reasoning``
  items (their ``content`` text when present, else their ``summary`` texts;
  ``encrypted_content`` is counted), ``message`` items of role ``assistant``
  (the text action, or beside calls the thought / ``assistant_text``) and the
  calls: ``function_call`` (``name``, JSON ``arguments``), ``custom_tool_call``
  (``name``, its free-form ``input`` as ``{"input": ...}``), ``local_shell_call``
  (tool ``local_shell``, its ``action`` object as the arguments) and
  ``web_search_call`` (tool ``web_search``, its ``action``; no result is
  written); several calls of one turn are one parallel action;
* ``function_call_output`` / ``custom_tool_call_output`` (by ``call_id``) are
  the observations, their ``output`` verbatim (the JSON text
  ``{"output": ..., "metadata": ...}`` of Codex 0.5x included);
* ``event_msg`` lines (the UI's copy of the same turn: ``agent_reasoning``,
  ``token_count``, ``user_message`` ...), ``ghost_snapshot`` items and
  ``compacted`` lines are counted, by type. No tool declarations are written
  to the file, so ``tools`` is empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from interp.data.importers.common import (
    PART_JOIN, REASONING_JOIN, ChatSteps, RunContext, RunProblem, expect, join_reasoning, parse_arguments, text_of,
)
from interp.data.importers.session import Entry, LineProblem, entries_of

FORMAT = "codex"
DEFAULT_DOMAIN = "code"
LINE_TYPES = ("session_meta", "turn_context", "response_item", "event_msg", "compacted")
LINE_USED = frozenset({"type", "payload", "timestamp"})
META_KEPT = ("id", "cli_version", "originator", "source", "model_provider", "cwd", "git", "model")
META_USED = frozenset({*META_KEPT, "instructions", "base_instructions"})
META_KNOWN = frozenset({"timestamp", "thread_source", "forked_from_id", "parent_thread_id", "agent_nickname",
                        "agent_role", "dynamic_tools", "memory_mode"})
CALLS = ("function_call", "custom_tool_call", "local_shell_call", "web_search_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output")
ITEM_USED = {"message": frozenset({"type", "role", "content"}),
             "reasoning": frozenset({"type", "summary", "content"}),
             "function_call": frozenset({"type", "name", "arguments", "call_id"}),
             "custom_tool_call": frozenset({"type", "name", "input", "call_id"}),
             "local_shell_call": frozenset({"type", "action", "call_id"}),
             "web_search_call": frozenset({"type", "action"}),
             "function_call_output": frozenset({"type", "call_id", "output"}),
             "custom_tool_call_output": frozenset({"type", "call_id", "output"})}
# item fields the format documents dropping (counted by path); any other is "(unknown)"
ITEM_KNOWN = frozenset({"id", "status", "encrypted_content", "phase", "end_turn", "namespace"})
COUNTED_ITEMS = frozenset({"ghost_snapshot", "compaction", "compaction_summary"})


def claims_line(value: object) -> bool:
    """Whether a JSON Lines file starting with ``value`` is a Codex rollout (``{"type", "payload"}`` lines)."""
    return (isinstance(value, Mapping) and value.get("type") in LINE_TYPES and isinstance(value.get("payload"), Mapping)
            and set(value) <= LINE_USED)


def looks_like(record: object) -> bool:
    """Sniff (``interp import auto``): a rollout file gathered for this format."""
    return entries_of(record, FORMAT) is not None


@dataclass
class _Turn:
    """The assistant items since the last result: reasoning pieces, text pieces, calls; where it starts."""

    line: int
    reasoning: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    calls: list[tuple[str | None, dict[str, Any]]] = field(default_factory=list)


@dataclass
class _Rollout:
    """What is read besides the steps: system prompt pieces and metadata."""

    system: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    models: list[str] = field(default_factory=list)


def convert(record: object, ctx: RunContext) -> dict[str, Any]:
    """One rollout file as a trajectory record (see the module docstring)."""
    entries = entries_of(record, FORMAT)
    if entries is None:
        raise RunProblem("(record)", "not a Codex CLI rollout: expected JSON Lines of {timestamp, type, payload} "
                                     "with session_meta / response_item lines (a rollout-*.jsonl file)")
    chat, rollout = ChatSteps(ctx), _Rollout()
    turn: _Turn | None = None
    for e in entries:
        value = e.value
        if not isinstance(value, Mapping):
            raise LineProblem(e.line, "(line)", "expected a rollout line object {timestamp, type, payload}")
        kind = value.get("type")
        ctx.unmapped(value, "(line)", LINE_USED, frozenset())
        try:
            payload = expect(value.get("payload"), dict, f"{kind}.payload", "an object")
            if kind == "response_item":
                turn = _item(chat, rollout, turn, payload, e.line, ctx)
            elif kind == "session_meta":
                _meta(rollout, payload, ctx)
            elif kind == "turn_context":
                model = payload.get("model")
                if isinstance(model, str) and model not in rollout.models:
                    rollout.models.append(model)
                ctx.drop("turn_context lines")
            elif kind in ("event_msg", "compacted"):
                ctx.drop(f"{kind} lines" + (f" ({payload.get('type')})" if kind == "event_msg" else ""))
            else:
                ctx.unmapped({str(kind): payload}, "(line type)", set(), set())
        except RunProblem as exc:
            raise exc if isinstance(exc, LineProblem) else LineProblem(e.line, exc.where, exc.message) from None
    if turn is not None:
        _flush(chat, turn)
    try:
        steps = chat.trajectory("(file)")
    except RunProblem as exc:
        where, _, line = exc.where.partition(STEP_AT)
        raise LineProblem(int(line) if line else entries[0].line, where or "response_item", exc.message) from None
    meta = {**rollout.meta, **({"models": rollout.models} if rollout.models else {})}
    sid = meta.get("id")
    return {"task_id": ctx.task_id({"id": sid} if isinstance(sid, str) and sid else {}),
            "domain": ctx.domain or DEFAULT_DOMAIN, "system_prompt": REASONING_JOIN.join(rollout.system),
            "tools": [], **steps, "outcome": {}, "metadata": meta}


STEP_AT = "response_item@"  # a step's location for ChatSteps: the line of the turn's first item follows


def convert_items(items: Any,  # Any: the parsed JSON input items, checked to be a list at run time
                  base: str, ctx: RunContext) -> tuple[list[str], ChatSteps]:
    """``(system texts, steps)`` of a list of Responses API items at input path ``base`` (a request's ``input``,
    mapped as a rollout's ``response_item`` lines); each step's ``where`` is ``STEP_AT`` + the index of the turn's
    first item. An item without a ``type`` but with a ``role`` is a ``message`` (the API's short form)."""
    expect(items, list, base, "a list of input items")
    chat, rollout = ChatSteps(ctx), _Rollout()
    turn: _Turn | None = None
    for i, item in enumerate(items):
        expect(item, dict, f"{base}[{i}]", "an input item object")
        if "type" not in item and "role" in item:
            item = {"type": "message", **item}
        turn = _item(chat, rollout, turn, item, i, ctx)
    if turn is not None:
        _flush(chat, turn)
    return rollout.system, chat


def _meta(rollout: _Rollout, payload: dict[str, Any], ctx: RunContext) -> None:
    """``session_meta``: instructions first in the system prompt; the session's identity to metadata."""
    instructions = payload.get("instructions")
    base = payload.get("base_instructions")
    if isinstance(base, Mapping) and isinstance(base.get("text"), str):
        instructions = instructions or base["text"]
    if isinstance(instructions, str) and instructions.strip():
        rollout.system.insert(0, instructions)
    rollout.meta.update({k: payload[k] for k in META_KEPT if payload.get(k) is not None})
    ctx.unmapped(payload, "session_meta.payload", META_USED, META_KNOWN)


def _item(chat: ChatSteps, rollout: _Rollout, turn: _Turn | None, item: dict[str, Any], line: int,
          ctx: RunContext) -> _Turn | None:
    """One ``response_item``; returns the open assistant turn (None once a result or user text closed it)."""
    kind = str(item.get("type"))
    at = f"response_item[{kind}]"
    if kind in ITEM_USED:
        ctx.unmapped(item, at, ITEM_USED[kind], ITEM_KNOWN)
    if kind == "reasoning":
        if turn is not None and (turn.texts or turn.calls):
            _flush(chat, turn)
            turn = None
        turn = turn or _Turn(line)
        turn.reasoning.append(reasoning_text(item, at, ctx))
    elif kind == "message" and item.get("role") == "assistant":
        turn = turn or _Turn(line)
        turn.texts.append(text_of(item.get("content"), f"{at}.content", ctx))
    elif kind in CALLS:
        turn = turn or _Turn(line)
        turn.calls.append((item.get("call_id") if isinstance(item.get("call_id"), str) else None, _call(item, at)))
    elif kind in OUTPUTS:
        if turn is not None:
            _flush(chat, turn)
            turn = None
        output = item.get("output")
        if output is None:
            ctx.null(f"{at}.output")
        elif not isinstance(output, str):  # a list of content items (images, text) in later versions
            output = text_of(output, f"{at}.output", ctx)
        chat.tool_result(expect(item.get("call_id"), str, f"{at}.call_id", "a string"), output or "", at)
    elif kind == "message":
        if turn is not None:
            _flush(chat, turn)
            turn = None
        role = item.get("role")
        text = text_of(item.get("content"), f"{at}.content", ctx)
        if role in ("developer", "system") and not chat.steps:
            rollout.system.append(text)
        elif role == "user":
            chat.user_text(text)
        elif role in ("developer", "system"):
            ctx.drop(f"{at}.role={role} messages after the first assistant turn")
        else:
            raise RunProblem(f"{at}.role", f"unknown role {role!r}; expected user, assistant, developer or system")
    elif kind in COUNTED_ITEMS:
        ctx.drop(f"{at} items")
    else:
        ctx.unmapped({kind: item}, "response_item", set(), set())
    return turn


def reasoning_text(item: dict[str, Any], at: str, ctx: RunContext) -> str:
    """A reasoning item's text: its ``content`` parts when present (raw reasoning), else its summary parts
    (``encrypted_content`` is counted by :meth:`RunContext.unmapped`)."""
    pieces = {}
    for key in ("content", "summary"):
        parts = item.get(key)
        if parts is None or parts == []:
            continue
        expect(parts, list, f"{at}.{key}", "a list of reasoning parts")
        pieces[key] = [expect(expect(p, dict, f"{at}.{key}[{i}]", "a reasoning part object").get("text"), str,
                              f"{at}.{key}[{i}].text", "a string") for i, p in enumerate(parts)]
    if "content" in pieces and "summary" in pieces:
        ctx.drop(f"{at}.summary (the content text is kept)")
    return join_reasoning(pieces.get("content", pieces.get("summary", [])))


def _call(item: dict[str, Any], at: str) -> dict[str, Any]:
    """``{"tool", "arguments"}`` of a call item."""
    kind = item["type"]
    if kind == "function_call":
        return {"tool": expect(item.get("name"), str, f"{at}.name", "the tool name as a string"),
                "arguments": parse_arguments(item.get("arguments"), f"{at}.arguments")}
    if kind == "custom_tool_call":
        return {"tool": expect(item.get("name"), str, f"{at}.name", "the tool name as a string"),
                "arguments": {"input": expect(item.get("input"), str, f"{at}.input", "a string")}}
    action = item.get("action")
    arguments = dict(expect(action, dict, f"{at}.action", "an object")) if action is not None else {}
    return {"tool": "local_shell" if kind == "local_shell_call" else "web_search", "arguments": arguments}


def _flush(chat: ChatSteps, turn: _Turn) -> None:
    """The turn as one step (its results follow)."""
    chat.assistant(join_reasoning(turn.reasoning), PART_JOIN.join(turn.texts), turn.calls, f"{STEP_AT}{turn.line}")
