"""Gemini CLI chat recordings (``~/.gemini/tmp/PROJECT_HASH/chats/session-*.json``): one file, one run.

A recording is one JSON object ``{sessionId, projectHash, startTime,
lastUpdated, messages: [...]}``. What is mapped (``data/README.md`` lists it
with what is dropped):

* ``user`` messages before the first ``gemini`` one: the task (``content`` a
  string or a list of parts, text parts joined); later ones the reply to a
  text action;
* each ``gemini`` message is one step: its ``thoughts`` (the thought summaries
  Gemini returns, ``{subject, description}``) are the reasoning, one block
  each (``subject`` and ``description`` on two lines); its ``toolCalls``
  (``name``, ``args``) the action, several in parallel; with no call its
  ``content`` is the text action (beside calls: the thought when there are no
  thoughts, else ``assistant_text``);
* a tool call's ``result`` (Gemini API ``functionResponse`` parts) is its
  observation: ``response.output`` (or ``response.error``, marking the step
  ``is_error``) when it is a string, else the response as JSON text; a call
  with ``status: "error"`` is an error too;
* ``sessionId`` is the task id; ``projectHash``, ``startTime``, ``kind`` and
  the models go to ``metadata``; ``info``, ``error`` and ``warning`` messages
  (the CLI's own notices) are counted by type.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from interp.data.importers.common import (
    PART_JOIN, ChatSteps, RunContext, RunProblem, expect, join_reasoning, parse_arguments,
)

FORMAT = "gemini"
DEFAULT_DOMAIN = "code"
USED = frozenset({"sessionId", "messages", "projectHash", "startTime", "kind"})
KNOWN = frozenset({"lastUpdated", "summary", "directories"})
MESSAGE_USED = frozenset({"type", "content", "thoughts", "toolCalls", "model"})  # model: metadata.models
MESSAGE_KNOWN = frozenset({"id", "timestamp", "tokens", "displayContent"})
CALL_USED = frozenset({"id", "name", "args", "result", "status"})
CALL_KNOWN = frozenset({"timestamp", "displayName", "description", "resultDisplay", "renderOutputAsMarkdown"})
NOTICES = ("info", "error", "warning")


def looks_like(record: object) -> bool:
    """Sniff (``interp import auto``): an object with ``sessionId``, ``projectHash`` and a ``messages`` list."""
    return (isinstance(record, Mapping) and "sessionId" in record and "projectHash" in record
            and isinstance(record.get("messages"), list))


def convert(record: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """One chat recording as a trajectory record (see the module docstring)."""
    expect(record, dict, "(record)", "a Gemini CLI chat recording object")
    messages = expect(record.get("messages"), list, "messages", "a list of messages")
    ctx.unmapped(record, "(record)", USED, KNOWN)
    chat, models = ChatSteps(ctx), []
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        expect(msg, dict, where, "a message object")
        kind = msg.get("type")
        ctx.unmapped(msg, "messages[]", MESSAGE_USED, MESSAGE_KNOWN)
        if kind == "user":
            chat.user_text(_text(msg.get("content"), f"{where}.content", ctx))
        elif kind == "gemini":
            if isinstance(msg.get("model"), str) and msg["model"] not in models:
                models.append(msg["model"])
            _gemini(chat, msg, where, ctx)
        elif kind in NOTICES:
            ctx.drop(f"{kind} messages")
        else:
            raise RunProblem(f"{where}.type", f"unknown message type {kind!r}; expected user, gemini, info, error "
                                              "or warning")
    meta = {k: record[k] for k in ("projectHash", "startTime", "kind") if record.get(k) is not None}
    sid = record.get("sessionId")
    return {"task_id": ctx.task_id({"id": sid} if isinstance(sid, str) and sid else {}),
            "domain": ctx.domain or DEFAULT_DOMAIN, "system_prompt": "", "tools": [],
            **chat.trajectory("messages"), "outcome": {}, "metadata": {**meta, **({"models": models} if models else {})}}


def _gemini(chat: ChatSteps, msg: dict[str, Any], where: str, ctx: RunContext) -> None:
    """One model turn: thoughts, text, tool calls, then the calls' results."""
    thoughts = []
    for j, thought in enumerate(msg.get("thoughts") or []):
        at = f"{where}.thoughts[{j}]"
        expect(thought, dict, at, "a thought object")
        ctx.unmapped(thought, "messages[].thoughts[]", {"subject", "description"}, {"timestamp"})
        subject = expect(thought.get("subject", ""), str, f"{at}.subject", "a string")
        description = expect(thought.get("description", ""), str, f"{at}.description", "a string")
        thoughts.append("\n".join(p for p in (subject, description) if p))
    calls, results = [], []
    for j, call in enumerate(msg.get("toolCalls") or []):
        at = f"{where}.toolCalls[{j}]"
        expect(call, dict, at, "a tool call object")
        ctx.unmapped(call, "messages[].toolCalls[]", CALL_USED, CALL_KNOWN)
        name = expect(call.get("name"), str, f"{at}.name", "the tool name as a string")
        call_id = call.get("id") if isinstance(call.get("id"), str) else None
        calls.append((call_id, {"tool": name, "arguments": parse_arguments(call.get("args"), f"{at}.args")}))
        if call.get("result") is not None:
            output, failed = _result(call.get("result"), f"{at}.result", ctx)
            results.append((call_id, output, failed or call.get("status") == "error", at))
    chat.assistant(join_reasoning(thoughts), _text(msg.get("content"), f"{where}.content", ctx), calls, where)
    for call_id, output, failed, at in results:
        chat.tool_result(call_id, output, at, is_error=failed)


def _text(content: Any, where: str, ctx: RunContext) -> str:
    """A message's text: a string, or the ``text`` of its parts (other parts dropped, counted)."""
    if content is None or isinstance(content, str):
        return content or ""
    parts = content if isinstance(content, list) else [content]
    texts = []
    for j, part in enumerate(parts):
        if isinstance(part, str):
            texts.append(part)
            continue
        expect(part, dict, f"{where}[{j}]", "a content part object")
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            ctx.drop(f"{next(iter(part), 'empty')} content parts")
    return PART_JOIN.join(texts)


def _result(result: Any, where: str, ctx: RunContext) -> tuple[str, bool]:
    """``(observation, is_error)`` of a tool call's ``functionResponse`` parts."""
    parts = result if isinstance(result, list) else [result]
    outputs, failed = [], False
    for j, part in enumerate(parts):
        at = f"{where}[{j}]"
        if isinstance(part, str):
            outputs.append(part)
            continue
        expect(part, dict, at, "a result part object")
        if isinstance(part.get("text"), str):
            outputs.append(part["text"])
            continue
        response = expect(part.get("functionResponse"), dict, f"{at}.functionResponse", "an object")
        body = response.get("response")
        ctx.unmapped(response, "messages[].toolCalls[].result[].functionResponse", {"response"}, {"id", "name"})
        if isinstance(body, Mapping) and isinstance(body.get("output"), str):
            outputs.append(body["output"])
        elif isinstance(body, Mapping) and isinstance(body.get("error"), str):
            outputs.append(body["error"])
            failed = True
        else:
            outputs.append(json.dumps(body, ensure_ascii=False))
    return PART_JOIN.join(outputs), failed
