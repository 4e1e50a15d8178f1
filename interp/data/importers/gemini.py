"""Gemini CLI chat recordings (``~/.gemini/tmp/PROJECT_HASH/chats/session-*.json``): one file, one run.

A recording is one JSON object ``{sessionId, projectHash, startTime,
lastUpdated, messages: [...]}``. What is mapped (``docs/reference/importers.md`` lists it
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

The API-history form (the Gemini API's ``contents``: ``{role: user | model,
parts}``) is read too: a bare list (``/chat save`` checkpoints) or a request
``{contents, systemInstruction, tools}``, bare or under ``request`` (the
CLI's logged API request, with ``model``). Each ``model`` turn is a step:
``thought: true`` text parts the reasoning, other text parts the text,
``functionCall`` parts (``id``, ``name``, ``args``) the calls, their
``thoughtSignature`` counted; the next ``user`` turn's ``functionResponse``
parts answer them (by ``id``, else in order), read as above; ``systemInstruction``
is the system prompt and ``tools[].functionDeclarations`` (``parameters`` or
``parametersJsonSchema``) the tools; ``generationConfig`` and the request's
other fields are counted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from interp.data.importers.common import (
    PART_JOIN, ChatSteps, RunContext, RunProblem, expect, field_pattern, join_reasoning, parse_arguments, tool_spec,
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
API_ROLES = ("user", "model")
REQUEST_USED = frozenset({"contents", "systemInstruction", "tools", "session_id"})
WRAPPER_USED = frozenset({"request", "model"})
PART_KNOWN = frozenset({"thoughtSignature", "thought_signature"})  # opaque, counted


def looks_like(record: object) -> bool:
    """Sniff (``interp import auto``): an object with ``sessionId``, ``projectHash`` and a ``messages`` list, or
    the API-history form (:func:`_contents`)."""
    return (isinstance(record, Mapping) and "sessionId" in record and "projectHash" in record
            and isinstance(record.get("messages"), list)) or _contents(record) is not None


def _contents(record: object) -> tuple[str, list[Any], Mapping[str, Any]] | None:
    """``(path, contents, request)`` of the Gemini API-history form: a list of ``{role: user | model, parts}``
    (a ``/chat save`` checkpoint), or a request ``{contents, systemInstruction, tools}``, bare or under
    ``request`` (the CLI's logged API request); None for any other record."""
    request: Any = record
    prefix = ""
    if isinstance(record, Mapping) and isinstance(record.get("request"), Mapping):
        request, prefix = record["request"], "request."
    contents = request.get("contents") if isinstance(request, Mapping) else request
    if not isinstance(contents, list) or not contents or not all(
            isinstance(c, Mapping) and c.get("role") in API_ROLES and isinstance(c.get("parts"), list)
            for c in contents):
        return None
    return (f"{prefix}contents" if isinstance(request, Mapping) else "(record)", contents,
            request if isinstance(request, Mapping) else {})


def convert(record: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """One chat recording, or one API history, as a trajectory record (see the module docstring)."""
    api = _contents(record)
    if api is not None:
        return _api_history(record, *api, ctx)
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


def _api_history(record: object, at: str, contents: list[Any], request: Mapping[str, Any],
                 ctx: RunContext) -> dict[str, Any]:
    """The API-history form: ``model`` turns are steps (``thought`` parts the reasoning, ``text`` parts the
    text, ``functionCall`` parts the calls), ``functionResponse`` parts of the next ``user`` turn their results
    (by ``id``, else in order), other ``user`` text the task or a reply; ``systemInstruction`` the system prompt,
    ``tools[].functionDeclarations`` the tools; the logged request's ``model`` goes to ``metadata``."""
    prefix = at.rsplit("contents", 1)[0]
    if isinstance(record, Mapping):
        ctx.unmapped(record, "(record)", WRAPPER_USED if prefix else REQUEST_USED, frozenset(record))
        if prefix:
            ctx.unmapped(request, "request", REQUEST_USED, frozenset(request))
    chat = ChatSteps(ctx)
    for i, content in enumerate(contents):
        where = f"{at}[{i}]"
        ctx.unmapped(content, f"{at}[]", {"role", "parts"}, set())
        if content["role"] == "model":
            _model_turn(chat, content["parts"], where, ctx)
        else:
            texts = []
            for j, part in enumerate(content["parts"]):
                pat = f"{where}.parts[{j}]"
                expect(part, dict, pat, "a part object")
                if isinstance(part.get("functionResponse"), Mapping):
                    output, failed = _result([part], pat, ctx)
                    chat.tool_result(part["functionResponse"].get("id"), output, pat, is_error=failed)
                else:
                    texts.append(_text([part], f"{pat}", ctx))
            if any(t for t in texts):
                chat.user_text(PART_JOIN.join(t for t in texts if t))
    system = request.get("systemInstruction")
    system_text = _text(system.get("parts"), f"{prefix}systemInstruction.parts", ctx) \
        if isinstance(system, Mapping) else _text(system, f"{prefix}systemInstruction", ctx)
    tools = []
    for k, group in enumerate(expect(request.get("tools") or [], list, f"{prefix}tools", "a list of tool groups")):
        for m, decl in enumerate(expect(group, dict, f"{prefix}tools[{k}]", "a tool group object")
                                 .get("functionDeclarations") or []):
            dat = f"{prefix}tools[{k}].functionDeclarations[{m}]"
            expect(decl, dict, dat, "a function declaration object")
            tools.append(tool_spec(decl.get("name"), decl.get("description"),
                                   decl.get("parameters", decl.get("parametersJsonSchema")), dat))
    sid = request.get("session_id")
    model = record.get("model") if isinstance(record, Mapping) else None
    meta = {"models": [model]} if isinstance(model, str) and model else {}
    return {"task_id": ctx.task_id({"id": sid} if isinstance(sid, str) and sid else {}),
            "domain": ctx.domain or DEFAULT_DOMAIN, "system_prompt": system_text, "tools": tools,
            **chat.trajectory(at), "outcome": {}, **({"metadata": meta} if meta else {})}


def _model_turn(chat: ChatSteps, parts: list[Any], where: str, ctx: RunContext) -> None:
    """A ``model`` turn of the API history as one step."""
    thoughts: list[str] = []
    texts: list[str] = []
    calls: list[tuple[str | None, dict[str, Any]]] = []
    for j, part in enumerate(parts):
        at = f"{where}.parts[{j}]"
        expect(part, dict, at, "a part object")
        call = part.get("functionCall")
        if isinstance(call, Mapping):
            ctx.unmapped(part, f"{field_pattern(where)}.parts[]", {"functionCall"}, PART_KNOWN)
            ctx.unmapped(call, f"{field_pattern(where)}.parts[].functionCall", {"id", "name", "args"}, set())
            name = expect(call.get("name"), str, f"{at}.functionCall.name", "the tool name as a string")
            call_id = call.get("id") if isinstance(call.get("id"), str) else None
            calls.append((call_id, {"tool": name, "arguments": parse_arguments(call.get("args"),
                                                                             f"{at}.functionCall.args")}))
        elif isinstance(part.get("text"), str):
            ctx.unmapped(part, f"{field_pattern(where)}.parts[]", {"text", "thought"}, PART_KNOWN)
            (thoughts if part.get("thought") is True else texts).append(part["text"])
        else:
            ctx.drop(f"{next(iter(part), 'empty')} content parts")
    chat.assistant(join_reasoning(thoughts), PART_JOIN.join(texts), calls, where)
