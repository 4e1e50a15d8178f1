"""Anthropic-style message runs: content blocks ``thinking``, ``redacted_thinking``, ``text``, ``tool_use``, ``tool_result``.

A run is an object ``{"system": ..., "messages": [...], "tools": [...]?, ...}``
(the request body of the Messages API with the assistant turns in it) or a
bare list of messages. What is mapped (``docs/reference/importers.md`` lists it with what
is dropped):

* ``system`` (a string or a list of text blocks): the system prompt;
* ``user`` text before the first assistant turn: the task; later user text is
  the reply to a text action (its observation), see :class:`ChatSteps`;
* each ``assistant`` message: one step. ``thinking`` blocks are the reasoning
  (several joined with ``"\\n\\n"``); ``redacted_thinking`` blocks hold only
  encrypted data: they are dropped, counted, and the step gets
  ``redacted_thinking: N``; ``tool_use`` blocks (``input`` object) are the
  action, one call or a parallel ``{"calls": [...]}``; with no call the text
  blocks are a text action;
* ``tool_result`` blocks in user messages answer the calls by ``tool_use_id``;
  ``content`` a string or a list of blocks (text kept); ``is_error: true``
  marks the step ``is_error`` (true, or one flag per parallel call);
* ``tools`` (``{name, description, input_schema}``): the declared tools;
* ``task_id``/``instance_id``/``id``, ``domain``, ``reward``/``success``
  (or ``outcome``) of the run; its other top-level fields go to ``metadata``.
"""

from __future__ import annotations

from typing import Any

from interp.data.importers.common import (
    PART_JOIN, ChatSteps, RunContext, RunProblem, expect, join_reasoning, metadata_of, outcome_of,
    parse_arguments, text_of, tool_spec,
)

FORMAT = "anthropic"
DEFAULT_DOMAIN = "unknown"
USED = {"system", "messages", "tools", "task_id", "instance_id", "id", "domain", "reward", "success", "outcome"}
BLOCK_TYPES = {"thinking", "redacted_thinking", "tool_use", "tool_result"}
MESSAGE_USED = frozenset({"role", "content"})
KNOWN_DROPPED = frozenset({"id", "type", "model", "stop_reason", "stop_sequence", "usage", "timestamp", "name"})
# the fields each content block maps; any other is counted (the documented ones by path, the rest as unknown)
BLOCK_USED = {"text": frozenset({"type", "text"}), "thinking": frozenset({"type", "thinking"}),
              "redacted_thinking": frozenset({"type", "data"}), "tool_use": frozenset({"type", "id", "name", "input"}),
              "tool_result": frozenset({"type", "tool_use_id", "content", "is_error"})}
BLOCK_KNOWN = frozenset({"signature", "cache_control", "citations"})  # redacted data: counted as blocks


def looks_like(record: object) -> bool:
    """Sniff (``interp import auto``): a top-level ``system`` beside ``messages``, or Anthropic-only block types."""
    if isinstance(record, dict) and "system" in record and isinstance(record.get("messages"), list):
        return True
    messages = record.get("messages") if isinstance(record, dict) else record
    if not isinstance(messages, list):
        return False
    return any(isinstance(m, dict) and isinstance(m.get("content"), list)
               and any(isinstance(b, dict) and b.get("type") in BLOCK_TYPES for b in m["content"])
               for m in messages)


def convert(record: object, ctx: RunContext) -> dict[str, Any]:
    """One Anthropic-style run as a trajectory record (see the module docstring)."""
    base = "messages" if isinstance(record, dict) else "(record)"
    chat = convert_messages(record.get("messages") if isinstance(record, dict) else record, base, ctx)
    system = record.get("system", "") if isinstance(record, dict) else ""
    out = {"task_id": ctx.task_id(record), "domain": ctx.domain_of(record, DEFAULT_DOMAIN),
           "system_prompt": text_of(system, "system", ctx),
           "tools": tools_of(record.get("tools") if isinstance(record, dict) else None),
           **chat.trajectory(base), "outcome": outcome_of(record)}
    meta = metadata_of(record, USED)
    return {**out, "metadata": meta} if meta else out


def convert_messages(messages: Any,  # Any: the parsed JSON messages, checked to be a list at run time
                     base: str, ctx: RunContext) -> ChatSteps:
    """The steps of an Anthropic message list at input path ``base`` (each step's ``where``: its message's path)."""
    expect(messages, list, base, "a list of messages")
    chat = ChatSteps(ctx)
    for i, msg in enumerate(messages):
        where = f"{base}[{i}]" if base == "messages" else f"[{i}]"
        expect(msg, dict, where, "a message object")
        role, content = msg.get("role"), msg.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        expect(blocks, list, f"{where}.content", "a string or a list of content blocks")
        for j, block in enumerate(blocks):
            expect(block, dict, f"{where}.content[{j}]", "a content block object")
        ctx.unmapped(msg, where, MESSAGE_USED, KNOWN_DROPPED)
        if role == "user":
            _user(chat, blocks, f"{where}.content", ctx)
        elif role == "assistant":
            _assistant(chat, blocks, where, ctx)
        else:
            raise RunProblem(f"{where}.role", f"unknown role {role!r}; expected user or assistant (the system "
                                              f"prompt is the run's top-level 'system')")
    return chat


def _user(chat: ChatSteps, blocks: list[dict[str, Any]], where: str, ctx: RunContext) -> None:
    texts: list[str] = []
    for j, block in enumerate(blocks):
        at = f"{where}[{j}]"
        if block.get("type") == "tool_result":
            ctx.unmapped(block, at, BLOCK_USED["tool_result"], BLOCK_KNOWN)
            if block.get("content") is None:
                ctx.null(f"{at}.content")
            result = text_of(block.get("content"), f"{at}.content", ctx)
            chat.tool_result(expect(block.get("tool_use_id"), str, f"{at}.tool_use_id", "a string"), result, at,
                             is_error=block.get("is_error") is True)
        else:
            _text_block(block, at, texts, ctx)
    if texts:
        chat.user_text(PART_JOIN.join(texts))


def _assistant(chat: ChatSteps, blocks: list[dict[str, Any]], where: str, ctx: RunContext) -> None:
    thinking: list[str] = []
    texts: list[str] = []
    calls: list[tuple[str | None, dict[str, Any]]] = []
    redacted = 0
    for j, block in enumerate(blocks):
        at, kind = f"{where}.content[{j}]", block.get("type")
        if kind in BLOCK_USED:
            ctx.unmapped(block, at, BLOCK_USED[kind], BLOCK_KNOWN)
        if kind == "thinking":
            thinking.append(expect(block.get("thinking"), str, f"{at}.thinking", "a string"))
        elif kind == "redacted_thinking":
            redacted += 1
        elif kind == "tool_use":
            name = expect(block.get("name"), str, f"{at}.name", "the tool name as a string")
            calls.append((block.get("id"), {"tool": name, "arguments": parse_arguments(block.get("input"),
                                                                                       f"{at}.input")}))
        else:
            _text_block(block, at, texts, ctx)
    if redacted:
        ctx.drop("redacted_thinking blocks", redacted)
    chat.assistant(join_reasoning(thinking), PART_JOIN.join(texts), calls, where,
                   {"redacted_thinking": redacted} if redacted else None)


def _text_block(block: dict[str, Any], where: str, texts: list[str], ctx: RunContext) -> None:
    """A ``text`` block's text into ``texts``; any other block (image, document, server tool) dropped and counted."""
    if block.get("type") == "text":
        ctx.unmapped(block, where, BLOCK_USED["text"], BLOCK_KNOWN)
        texts.append(expect(block.get("text"), str, f"{where}.text", "a string"))
    else:
        ctx.drop(f"{block.get('type', 'untyped')} content parts")


def tools_of(raw: Any) -> list[dict[str, Any]]:  # Any: a request's tools field, any JSON
    """Declared tools ``{name, description, input_schema}``."""
    if raw is None:
        return []
    expect(raw, list, "tools", "a list of tool declarations")
    return [tool_spec(expect(t, dict, f"tools[{i}]", "a tool object").get("name"), t.get("description"),
                      t.get("input_schema"), f"tools[{i}]") for i, t in enumerate(raw)]
