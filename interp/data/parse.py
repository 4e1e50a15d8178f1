"""Read a generated assistant turn back into reasoning and an action.

The models write the format ``interp.data.render`` shows them::

    <think>
    reasoning
    </think>

    <tool_call>
    {"name": "read_file", "arguments": {"path": "a.py"}}
    </tool_call>

(the native Qwen-style template and the fallback convention agree on it).
Qwen3.5's own XML body, ``<function=NAME><parameter=KEY>VALUE</parameter></function>``,
is read too. A JSON body is decoded before its close tag is looked for, so a
``</tool_call>`` inside a string argument does not cut it. Tolerated: a
missing ``</think>`` (reasoning runs to the first ``<tool_call>`` or the end),
a ``</think>`` without ``<think>`` (the template opened it), a missing
``</tool_call>`` (the body runs to the next ``<tool_call>`` or the end),
trailing text after the JSON object, and ``arguments`` given as a JSON string.

:func:`parse_turn` never raises: a turn is ``ok`` (at least one tool call
read), ``text`` (no tool-call markup, non-empty text: a plain-text action) or
``failure`` (tool-call markup none of which could be read, or no action at
all, e.g. output cut off inside the reasoning); ``error`` says why.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from interp.data.trajectory import ToolCall

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_XML_FUNCTION = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|$)", re.S)
_XML_PARAMETER = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?(?:</parameter>|(?=<parameter=)|$)", re.S)


@dataclass(frozen=True)
class ParsedTurn:
    """A generated turn: ``status`` is ``ok``, ``text`` or ``failure`` (see the module docstring)."""

    status: str
    reasoning: str | None
    calls: tuple[ToolCall, ...] = ()
    text: str = ""
    error: str | None = None
    bad_calls: list[str] = field(default_factory=list)  # bodies of <tool_call> regions that could not be read

    @property
    def parse_failure(self) -> bool:
        """True when no action could be read from the turn."""
        return self.status == "failure"

    def to_json(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"status": self.status, "reasoning": self.reasoning, "calls": [c.to_json() for c in self.calls],
                "text": self.text, "error": self.error, "bad_calls": self.bad_calls}


def split_reasoning(text: str) -> tuple[str | None, str]:
    """``(reasoning, rest)``: the ``<think>`` part (tolerating a missing tag) and what follows it."""
    open_at, close_at = text.find(THINK_OPEN), text.find(THINK_CLOSE)
    if close_at >= 0 and (open_at < 0 or open_at > close_at):  # the template opened the think block
        return text[:close_at].strip(), text[close_at + len(THINK_CLOSE):]
    if open_at < 0:
        return None, text
    start = open_at + len(THINK_OPEN)
    if close_at >= 0:
        return text[start:close_at].strip(), text[close_at + len(THINK_CLOSE):]
    call_at = text.find(CALL_OPEN, start)
    end = call_at if call_at >= 0 else len(text)
    return text[start:end].strip(), text[end:]


def _region_end(text: str, pos: int) -> tuple[int, int]:
    """``(body_end, resume)``: the body ends at the next ``</tool_call>`` unless a ``<tool_call>`` comes first."""
    nxt = text.find(CALL_OPEN, pos)
    close = text.find(CALL_CLOSE, pos)
    if close >= 0 and (nxt < 0 or close < nxt):
        return close, close + len(CALL_CLOSE)
    end = nxt if nxt >= 0 else len(text)
    return end, end


def read_calls(text: str) -> tuple[list[ToolCall], list[str], str]:
    """``(calls, unreadable bodies, text outside the tool-call regions)`` of the text after the reasoning.

    A JSON body is decoded first, so a ``</tool_call>`` inside a string argument
    cannot cut it; other bodies run to the close tag (or the next open tag, or the end).
    """
    calls: list[ToolCall] = []
    bad: list[str] = []
    outside: list[str] = []
    pos = 0
    while (start := text.find(CALL_OPEN, pos)) >= 0:
        outside.append(text[pos:start])
        body_start = start + len(CALL_OPEN)
        brace = len(text[body_start:]) - len(text[body_start:].lstrip())
        call = None
        if text.startswith("{", body_start + brace):
            try:
                obj, stop = json.JSONDecoder().raw_decode(text, body_start + brace)
                call = _json_call(obj)
                _, pos = _region_end(text, stop)  # text after the object is ignored
            except json.JSONDecodeError:
                pass
        if call is None:
            body_end, pos = _region_end(text, body_start)
            body = text[body_start:body_end]
            call = parse_call(body)
            if call is None:
                bad.append(body)
        if call is not None:
            calls.append(call)
    outside.append(text[pos:])
    return calls, bad, "".join(outside).replace(CALL_CLOSE, "")


def _json_call(obj: Any) -> ToolCall | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"].strip():
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    return ToolCall(obj["name"].strip(), args) if isinstance(args, dict) else None


def parse_call(body: str) -> ToolCall | None:
    """One tool-call body (JSON ``{"name", "arguments"}`` or Qwen3.5 XML) as a ToolCall; None when unreadable."""
    body = body.strip()
    xml = _XML_FUNCTION.search(body)
    if xml:
        args = {m.group(1): _xml_value(m.group(2)) for m in _XML_PARAMETER.finditer(xml.group(2))}
        return ToolCall(xml.group(1), args)
    start = body.find("{")
    if start < 0:
        return None
    try:
        obj, _ = json.JSONDecoder().raw_decode(body[start:])  # text after the object is ignored
    except json.JSONDecodeError:
        return None
    return _json_call(obj)


def _xml_value(raw: str) -> Any:
    raw = raw.strip()
    try:
        return json.loads(raw)  # numbers, booleans, lists and objects are written as JSON
    except json.JSONDecodeError:
        return raw


def parse_turn(text: str) -> ParsedTurn:
    """Parse one generated assistant turn (special tokens already cut off); never raises."""
    reasoning, rest = split_reasoning(text)
    calls, bad, outside = read_calls(rest)
    outside = outside.strip()
    if calls:
        return ParsedTurn("ok", reasoning, tuple(calls), outside, bad_calls=bad)
    if bad:
        return ParsedTurn("failure", reasoning, (), outside, f"{len(bad)} <tool_call> region(s), none readable "
                          "as {\"name\": ..., \"arguments\": {...}}", bad)
    if outside:
        return ParsedTurn("text", reasoning, (), outside)
    if reasoning is not None:
        return ParsedTurn("failure", reasoning, (), "", "no action after the reasoning (output cut off?)")
    return ParsedTurn("failure", None, (), "", "empty output")
