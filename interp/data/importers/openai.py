"""OpenAI-style chat runs: ``system``/``user``/``assistant`` messages with ``tool_calls`` and ``tool`` results.

A run is an object ``{"messages": [...], "tools": [...]?, ...}`` or a bare list
of messages. What is mapped (``docs/reference/importers.md`` lists it with what is dropped):

* ``system`` and ``developer`` messages before the first assistant turn: the
  system prompt (joined with ``"\\n\\n"``); later ones are dropped and counted;
* ``user`` text before the first assistant turn: the task; later user text
  is the reply to a text action (its observation), see :class:`ChatSteps`;
* each ``assistant`` message: one step. Reasoning from the provider field
  (``reasoning_content``, ``reasoning``, ``reasoning_details`` or
  ``thinking_blocks``, also in ``raw_data``; see :func:`provider_reasoning`)
  and ``<think>`` sections of its text; ``tool_calls``
  (``function.arguments`` as a JSON string or an object; the legacy
  ``function_call`` too) become the action, one call or a parallel
  ``{"calls": [...]}``; with no call its text (or ``refusal``) is a text action;
* ``tool`` messages (and legacy ``function`` ones) answer the calls by
  ``tool_call_id`` (or ``id``, as tau2-bench writes it); ``error: true`` marks
  the step ``is_error``; results of calls the simulated user made are dropped;
* ``tools`` (``{"type": "function", "function": {...}}`` or plain
  ``{name, description, parameters}``): the declared tools;
* an ``exit`` message (mini-swe-agent 2.x ends every run with one): its
  content (the submission) is the final answer when the run ends on a tool
  call; the message is counted;
* every field of a message and of a tool call that is not mapped is counted
  by path (``messages[].tool_calls[].index``), an unknown one holding text is
  a problem under ``--strict``;
* ``task_id``/``instance_id``/``id``, ``domain``, ``reward``/``success``
  (or ``outcome``) of the run; its other top-level fields go to ``metadata``.
"""

from __future__ import annotations

from typing import Any

from interp.data.importers.common import (
    REASONING_JOIN, ChatSteps, RunContext, RunProblem, expect, field_pattern, join_reasoning, metadata_of, outcome_of,
    parse_arguments, provider_reasoning, split_think, text_of, tool_spec,
)

FORMAT = "openai"
DEFAULT_DOMAIN = "unknown"
USED = {"messages", "tools", "task_id", "instance_id", "id", "domain", "reward", "success", "outcome"}
MESSAGE_USED = frozenset({"role", "content", "tool_calls", "function_call", "refusal", "tool_call_id", "error"})
# per-message fields the format documents dropping (counted by path); any other field is "(unknown)"
KNOWN_DROPPED = frozenset({"name", "id", "timestamp", "created", "annotations", "audio", "index", "finish_reason",
                           "usage", "cost", "model", "logprobs", "turn_idx", "raw_data", "requestor",
                           "reasoning_content", "reasoning", "reasoning_details", "thinking_blocks",
                           "provider_specific_fields",
                           "extra"})  # mini-swe-agent: the raw response, raw output, return code, timestamps


# tool-call fields: the call object (``{id, type, function}``, or flat ``{id, name, arguments}`` as tau2-bench
# writes it) and its function; ``requestor`` (tau2-bench: who made the call) and the stream ``index`` are counted
CALL_USED = frozenset({"id", "type", "function"})
FUNCTION_USED = frozenset({"name", "arguments", "id", "type"})
CALL_KNOWN = frozenset({"index", "requestor"})
EXIT_ROLE = "exit"  # mini-swe-agent 2.x: the agent loop's last message (its exit status and submission)


def looks_like(record: object) -> bool:
    """Sniff (``interp import auto``): a message list with ``tool_calls``, ``tool`` roles or string contents."""
    messages = record.get("messages") if isinstance(record, dict) else record
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return False
    return all("role" in m for m in messages)


def convert(record: object, ctx: RunContext) -> dict[str, Any]:
    """One OpenAI-style chat run as a trajectory record (see the module docstring)."""
    messages = record.get("messages") if isinstance(record, dict) else record
    base = "messages" if isinstance(record, dict) else "(record)"
    system, chat = convert_messages(messages, base, ctx)
    out = {"task_id": ctx.task_id(record), "domain": ctx.domain_of(record, DEFAULT_DOMAIN),
           "system_prompt": REASONING_JOIN.join(system),
           "tools": tools_of(record.get("tools") if isinstance(record, dict) else None),
           **chat.trajectory(base), "outcome": outcome_of(record)}
    meta = metadata_of(record, USED)
    return {**out, "metadata": meta} if meta else out


def convert_messages(messages: Any,  # Any: the parsed JSON messages, checked to be a list at run time
                     base: str, ctx: RunContext,
                     known: frozenset[str] = KNOWN_DROPPED) -> tuple[list[str], ChatSteps]:
    """``(system texts, steps)`` of an OpenAI-style message list at input path ``base``; every message field
    not mapped is counted (``known``: the ones the format documents dropping)."""
    expect(messages, list, base, "a list of chat messages")
    system: list[str] = []
    chat = ChatSteps(ctx)
    for i, msg in enumerate(messages):
        where = f"{base}[{i}]" if base != "(record)" else f"[{i}]"
        expect(msg, dict, where, "a message object")
        role, used = msg.get("role"), set(MESSAGE_USED)
        if role in ("system", "developer"):
            if chat.steps:
                ctx.drop("system messages after the first assistant turn")
            else:
                system.append(text_of(msg.get("content"), f"{where}.content", ctx))
        elif role == "user":
            if msg.get("tool_calls"):
                ctx.drop(f"{field_pattern(where)}.tool_calls (calls of the simulated user)")
            chat.user_text(text_of(msg.get("content"), f"{where}.content", ctx))
        elif role == "assistant":
            used |= _assistant(chat, msg, where, ctx)
        elif role in ("tool", "function"):
            _tool(chat, msg, where, ctx)
            used |= {"id"} if "tool_call_id" not in msg else set()  # tau2-bench: the result's id is the call's
        elif role == EXIT_ROLE:
            used |= _exit(chat, msg, where, ctx)
        else:
            raise RunProblem(f"{where}.role", f"unknown role {role!r}; expected system, developer, user, "
                                              f"assistant, tool, function or exit")
        ctx.unmapped(msg, where, used, known)
    return system, chat


def _exit(chat: ChatSteps, msg: dict[str, Any], where: str, ctx: RunContext) -> set[str]:
    """mini-swe-agent's ``exit`` message: its content (the submission) is the final answer when the run ends
    with a tool call; its ``extra`` (exit status, submission) is counted. The fields it read."""
    content = text_of(msg.get("content"), f"{where}.content", ctx)
    if content.strip():
        chat.final_text = content
    ctx.drop(f"{field_pattern(where)} (role exit: the agent loop's end; its content is the final answer)")
    return {"content"}


def _tool(chat: ChatSteps, msg: dict[str, Any], where: str, ctx: RunContext) -> None:
    """A tool result: answers a call of the agent (a result for the simulated user's own call is dropped)."""
    if msg.get("requestor") == "user":
        ctx.drop(f"{field_pattern(where)} (tool results of the simulated user)")
        return
    if msg.get("content") is None:
        ctx.null(f"{where}.content")
    result = text_of(msg.get("content"), f"{where}.content", ctx)
    call_id = msg.get("tool_call_id", msg.get("id"))
    chat.tool_result(call_id, result, where, is_error=msg.get("error") is True)


def _assistant(chat: ChatSteps, msg: dict[str, Any], where: str, ctx: RunContext) -> set[str]:
    """Add one assistant turn; the message fields it read."""
    text = text_of(msg.get("content"), f"{where}.content", ctx)
    if not text and isinstance(msg.get("refusal"), str):
        text = msg["refusal"]
    thought, text = split_think(text)
    own, read = provider_reasoning(msg, where, ctx)
    calls = []
    raw_calls = msg.get("tool_calls") or ([msg["function_call"]] if msg.get("function_call") else [])
    field = "tool_calls" if msg.get("tool_calls") else "function_call"
    expect(raw_calls, list, f"{where}.{field}", "a list of tool calls")
    for j, call in enumerate(raw_calls):
        at = f"{where}.{field}[{j}]" if field == "tool_calls" else f"{where}.{field}"
        expect(call, dict, at, "a tool call object")
        fn = call.get("function", call) if field == "tool_calls" else call
        fn_at = f"{at}.function" if fn is not call else at
        expect(fn, dict, fn_at, "a function object")
        name = expect(fn.get("name"), str, f"{fn_at}.name", "the tool name as a string")
        if fn is not call:
            ctx.unmapped(call, at, CALL_USED, CALL_KNOWN)
        ctx.unmapped(fn, fn_at, FUNCTION_USED, CALL_KNOWN)
        calls.append((call.get("id"), {"tool": name, "arguments": parse_arguments(fn.get("arguments"),
                                                                                   f"{fn_at}.arguments")}))
    if not calls and msg.get("content") is None and not isinstance(msg.get("refusal"), str):
        ctx.null(f"{where}.content")
    if isinstance(msg.get("raw_data"), dict) and "thinking_blocks" in read:
        read.add("raw_data")  # the provider response is dropped once its thinking is read
        ctx.drop(f"{field_pattern(where)}.raw_data (provider response; its thinking_blocks kept)")
    chat.assistant(join_reasoning([own, thought]), text, calls, where)
    return read


def tools_of(raw: list[Any] | None, base: str = "tools") -> list[dict[str, Any]]:
    """Declared tools at input path ``base``: ``{"type": "function", "function": {...}}`` or flat ``{name, ...}``."""
    if raw is None:
        return []
    expect(raw, list, base, "a list of tool declarations")
    out = []
    for i, tool in enumerate(raw):
        expect(tool, dict, f"{base}[{i}]", "a tool object")
        fn = tool.get("function", tool)
        where = f"{base}[{i}].function" if "function" in tool else f"{base}[{i}]"
        expect(fn, dict, where, "a function object")
        out.append(tool_spec(fn.get("name"), fn.get("description"), fn.get("parameters"), where))
    return out
