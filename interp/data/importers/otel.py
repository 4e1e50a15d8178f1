"""OpenTelemetry GenAI and OpenInference spans: one trajectory per trace (agent invocation).

Agent frameworks instrumented with OpenTelemetry write one span per model call
and per tool execution. The spans of a file are read whole (:mod:`.session`:
the first span claims a JSON Lines file or a JSON array) in any of the
shapes exporters write:

* OTLP JSON (the collector's file exporter, ``/v1/traces`` bodies): objects
  ``{"resourceSpans": [{"scopeSpans": [{"spans": [...]}]}]}``, attributes as
  ``[{"key", "value": {"stringValue" | "intValue" | ...}}]``; one such object
  in a ``.json`` file, or one per line;
* the OpenTelemetry SDK's span JSON (``ReadableSpan.to_json``, the console
  exporter, Phoenix): ``{name, context: {trace_id, span_id}, parent_id,
  attributes: {...}, events}``; one such span per line, or a trace object
  ``{"spans": [...], "final_output": ...}`` (any-agent's ``AgentTrace`` JSON);
* flat span lines ``{traceId, spanId, parentSpanId, name, attributes: {...}}``
  (file exporters of agent CLIs), or a JSON array of flat spans with
  ``trace_id``/``span_id``/``parent_span_id`` (veadk's tracing dump).

Spans are grouped by trace id, each trace one run (a trace with several agent
invocations, ``invoke_agent`` or OpenInference ``AGENT`` spans, is one run per
invocation with model calls or tools under it: the spans under it, task id
``TRACE/SPAN``; the workflow spans around them are counted), ordered by start
time.
What is mapped (``docs/reference/importers.md`` lists it with what is dropped):

* a model-call span (OpenInference ``openinference.span.kind: LLM``; OTel
  ``gen_ai.operation.name`` ``chat``/``text_completion``/``generate_content``
  (any-agent's ``call_llm``), or any span holding prompt messages): its input
  messages extend the chat (the messages earlier calls already showed are
  skipped; a call with none recorded continues it), its output messages are
  one assistant turn: one step. Messages are read from every
  convention: OTel ``gen_ai.input.messages``/``gen_ai.output.messages`` (parts
  ``text``, ``tool_call``, ``tool_call_response``, ``reasoning``) and
  ``gen_ai.system_instructions``; the older flattened
  ``gen_ai.prompt.N.*``/``gen_ai.completion.N.*`` (OpenLLMetry) and the
  deprecated JSON ``gen_ai.prompt``/``gen_ai.completion``; span events
  ``gen_ai.{system,user,assistant,tool}.message`` and ``gen_ai.choice``;
  OpenInference ``llm.input_messages.N.message.*``/``llm.output_messages.N.message.*``
  (``content`` or ``contents.M.message_content.*``, ``tool_calls.M.tool_call.*``,
  ``tool_call_id``); any-agent's output ``gen_ai.output`` (calls
  ``[{"tool.name", "tool.args"}]`` or the answer's text). ``system`` messages
  are the system prompt, the first ``user`` messages the task,
  ``reasoning``/``thinking`` parts the reasoning; a tool message repeating a
  result the chat holds (by id, or with no id by its tool) is counted;
* a tool span (``openinference.span.kind: TOOL``, ``gen_ai.operation.name:
  execute_tool``): the result of the open call with its id
  (``gen_ai.tool.call.id``, OpenInference's ``tool_call.id``), else of the first open call of
  its tool, else a step of its own; arguments from
  ``gen_ai.tool.call.arguments``, ``gen_ai.tool.args`` (any-agent),
  ``gcp.vertex.agent.tool_call_args`` (Google ADK) or ``input.value``, the
  result from ``gen_ai.tool.call.result``, ``gen_ai.output``,
  ``gcp.vertex.agent.tool_response`` or ``output.value``; arguments unlike
  the answered call's are counted (the call's kept); an ``ERROR`` status
  marks it ``is_error``;
* declared tools: OpenInference ``llm.tools.N.tool.json_schema``, OTel
  ``gen_ai.tool.definitions``, and a tool span's ``tool.name`` with
  ``tool.description``/``tool.parameters`` (or the ``gen_ai.tool.*`` ones);
* the trace id is the task id; models, the service name and the root span's
  name go to ``metadata``.

Every attribute that does not reach the trajectory is counted by its name
(indices as ``N``): the documented ones (token counts, request parameters,
ids, the raw ``input.value``/``output.value`` of a model call) by name, any
other as ``(unknown)`` (a problem under ``--strict`` when it holds text).
Spans of other kinds (agent, chain, workflow) are structure: counted by kind.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from interp.data.importers.common import (
    PART_JOIN, ChatSteps, RunContext, RunProblem, expect, holds_text, join_reasoning, parse_arguments, tool_spec,
)
from interp.data.importers.session import Entry, LineProblem, entries_of

FORMAT = "otel"
DEFAULT_DOMAIN = "agent"
LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "call_llm"})  # call_llm: any-agent
TOOL_OPERATION = "execute_tool"
REASONING_PARTS = frozenset({"reasoning", "thinking", "reasoningContent"})
BEDROCK_PARTS = ("toolUse", "toolResult", "text", "reasoningContent")  # untyped parts keyed by their kind
ERROR_CODES = frozenset({"2", "error", "status_code_error", "statuscode.error"})  # a span status, lower-cased
# attributes a span's mapping documents dropping (exact names, or prefixes ending in "."): the
# gen_ai.prompt./gen_ai.completion. ones are a second copy of messages read from another convention (veadk
# writes both), the gcp.vertex.agent. ones Google ADK's raw request/response JSON and its ids
KNOWN = ("gen_ai.usage.", "llm.token_count.", "gen_ai.request.", "gen_ai.response.", "gen_ai.openai.",
         "llm.invocation_parameters", "llm.model_name", "llm.provider", "llm.system", "gen_ai.system",
         "gen_ai.provider.name", "gen_ai.operation.name", "openinference.span.kind", "input.mime_type",
         "output.mime_type", "input.value", "output.value", "input", "output", "gen_ai.conversation.id",
         "session.id", "user.id", "gen_ai.agent.", "gen_ai.tool.type", "llm.is_streaming", "llm.headers",
         "llm.request.type", "metadata", "tag.tags", "gen_ai.output.type", "server.address", "server.port",
         "gen_ai.prompt.", "gen_ai.completion.", "gcp.vertex.agent.llm_request", "gcp.vertex.agent.llm_response",
         "gcp.vertex.agent.tool_call_args", "gcp.vertex.agent.tool_response", "gcp.vertex.agent.event_id",
         "gcp.vertex.agent.invocation_id", "gcp.vertex.agent.session_id")
CALL_ID_KEYS = ("gen_ai.tool.call.id", "tool_call.id", "tool.call_id", "tool.call.id")  # a tool span's call id
# a tool span's arguments and result, first found (gen_ai.tool.args/gen_ai.output: any-agent; gcp.vertex.agent.*:
# Google ADK, the tool's own return value, where output.value wraps it in the function response)
ARGS_KEYS = ("gen_ai.tool.call.arguments", "gen_ai.tool.args", "gcp.vertex.agent.tool_call_args", "input.value",
             "input")
RESULT_KEYS = ("gen_ai.tool.call.result", "gen_ai.output", "gcp.vertex.agent.tool_response", "output.value",
               "output")
INDEX = re.compile(r"\.\d+(?=\.|$)")


@dataclass
class Span:
    """One span in the shape every exporter's span is read into."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start: float  # seconds (ordering only)
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    error: bool
    line: int
    service: str = ""
    used: set[str] = field(default_factory=set)  # attribute names the mapping read
    dropped: list[str] = field(default_factory=list)  # message parts with no text the mapping keeps


def _is_span(value: Any) -> bool:
    if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
        return False
    context = value.get("context")
    ids = context if isinstance(context, Mapping) else value
    return (("trace_id" in ids or "traceId" in ids) and ("span_id" in ids or "spanId" in ids)
            and isinstance(value.get("attributes"), (Mapping, list)))


def claims_line(value: object) -> bool:
    """Whether a JSON Lines file (or JSON array) starting with ``value`` holds spans (OTLP JSON or span JSON)."""
    return _span_container(value) or _is_span(value)


def _span_container(value: object) -> bool:
    """Whether ``value`` is one object holding a file's spans: OTLP JSON (``resourceSpans``) or a trace object
    ``{"spans": [...], ...}`` (any-agent's ``AgentTrace``)."""
    if not isinstance(value, Mapping):
        return False
    spans = value.get("spans")
    return isinstance(value.get("resourceSpans"), list) or (
        isinstance(spans, list) and bool(spans) and _is_span(spans[0]))


def looks_like(record: object) -> bool:
    """Sniff (``interp import auto``): spans gathered for this format, or one object holding a file's spans."""
    return entries_of(record, FORMAT) is not None or _span_container(record)


def convert_all(record: object, ctx: RunContext) -> list[dict[str, Any] | RunProblem]:
    """Every trace of a span file as a trajectory record, or the problem of a trace that cannot be converted."""
    entries = entries_of(record, FORMAT)
    if entries is None:
        if not _span_container(record):
            raise RunProblem("(record)", "not OpenTelemetry spans: expected OTLP JSON (resourceSpans), a trace "
                                         "object with spans, or span objects with a trace id, span id, name and "
                                         "attributes")
        entries = [Entry(ctx.line, record)]
    latest: dict[tuple[str, str], Span] = {}
    for span in (s for e in entries for s in _spans(e, ctx)):
        if (span.trace_id, span.span_id) in latest:  # printed when started and when ended: the last is whole
            ctx.drop("span records repeated (the last kept)")
            span.line = latest[(span.trace_id, span.span_id)].line  # reported where the span first appears
        latest[(span.trace_id, span.span_id)] = span
    groups: dict[tuple[str, str], list[Span]] = {}
    for s in latest.values():
        groups.setdefault((s.trace_id, _agent_of(s, latest)), []).append(s)
    for trace_id, agent in list(groups):  # an agent span with no model call or tool under it is structure
        if agent and all(_kind(m) not in ("llm", "tool") for m in groups[(trace_id, agent)]):
            groups.setdefault((trace_id, ""), []).extend(groups.pop((trace_id, agent)))
    runs: list[dict[str, Any] | RunProblem] = []
    for (trace_id, agent), members in groups.items():
        members.sort(key=lambda s: (s.start, s.line))
        agents = {a for t, a in groups if t == trace_id and a}  # the trace's agent invocations with a run
        if not agent and agents and all(_kind(m) not in ("llm", "tool") for m in members):
            for m in members:  # the workflow around the agents: structure, counted
                ctx.drop(f"{_kind(m)} spans")
                _count_unused(m, _kind(m), ctx)
            continue
        run_id = f"{trace_id}/{agent}" if agent and len(agents) > 1 else trace_id
        try:
            runs.append(_trace(run_id, members, ctx))
        except LineProblem as exc:
            runs.append(exc)
    return runs


def _agent_of(span: Span, spans: Mapping[tuple[str, str], Span]) -> str:
    """The span id of the nearest agent invocation at or above ``span`` (``""`` when none): a trace with several
    agent invocations is one run per invocation, each agent's model calls one conversation."""
    seen: set[str] = set()
    node: Span | None = span
    while node is not None and node.span_id not in seen:
        seen.add(node.span_id)
        if _kind(node) in ("agent", "invoke_agent"):
            return node.span_id
        node = spans.get((node.trace_id, node.parent_id))
    return ""


# --- reading spans -------------------------------------------------------------------------------------------

def _spans(entry: Entry, ctx: RunContext) -> list[Span]:
    """The spans of one line (an OTLP JSON object or a trace object holds many)."""
    value = entry.value
    if isinstance(value, Mapping) and isinstance(value.get("spans"), list) and "resourceSpans" not in value:
        for key, item in value.items():  # any-agent's final_output: the last model call's output, read there
            if key != "spans" and item not in (None, "", [], {}):
                ctx.drop(f"trace object fields.{key}")
        return [_span(sp, entry.line, f"spans[{k}]", {}) for k, sp in enumerate(value["spans"])]
    if isinstance(value, Mapping) and isinstance(value.get("resourceSpans"), list):
        out = []
        for i, rs in enumerate(value["resourceSpans"]):
            at = f"resourceSpans[{i}]"
            _expect(rs, dict, entry.line, at, "a resource spans object")
            resource = _otlp_attributes(rs.get("resource", {}).get("attributes", []), entry.line, f"{at}.resource")
            for j, ss in enumerate(rs.get("scopeSpans", rs.get("instrumentationLibrarySpans", [])) or []):
                _expect(ss, dict, entry.line, f"{at}.scopeSpans[{j}]", "a scope spans object")
                for k, sp in enumerate(ss.get("spans") or []):
                    out.append(_span(sp, entry.line, f"{at}.scopeSpans[{j}].spans[{k}]", resource))
        return out
    return [_span(value, entry.line, "(span)", {})]


def _expect(value: Any, kind: type, line: int, where: str, what: str) -> Any:
    try:
        return expect(value, kind, where, what)
    except RunProblem as exc:
        raise LineProblem(line, exc.where, exc.message) from None


def _span(raw: Any, line: int, where: str, resource: Mapping[str, Any]) -> Span:
    _expect(raw, dict, line, where, "a span object")
    context = raw.get("context") if isinstance(raw.get("context"), Mapping) else raw
    trace_id = context.get("trace_id", context.get("traceId"))
    span_id = context.get("span_id", context.get("spanId"))
    if not isinstance(trace_id, (str, int)) or not isinstance(span_id, (str, int)):
        raise LineProblem(line, f"{where}.traceId", "a span needs a trace id and a span id (strings)")
    parent = next((raw[k] for k in ("parent_id", "parentSpanId", "parent_span_id", "parent")
                   if raw.get(k) is not None), None)
    if isinstance(parent, Mapping):  # logfire's exporter, any-agent's "parent": a span context
        parent = parent.get("span_id")
    attrs_raw = raw.get("attributes", {})
    attributes = (_otlp_attributes(attrs_raw, line, f"{where}.attributes") if isinstance(attrs_raw, list)
                  else dict(_expect(attrs_raw, dict, line, f"{where}.attributes", "an attributes object")))
    events = []
    for i, ev in enumerate(raw.get("events") or []):
        _expect(ev, dict, line, f"{where}.events[{i}]", "an event object")
        ea = ev.get("attributes", {})
        events.append((str(ev.get("name", "")),
                       _otlp_attributes(ea, line, f"{where}.events[{i}].attributes") if isinstance(ea, list)
                       else dict(ea) if isinstance(ea, Mapping) else {}))
    status = raw.get("status") if isinstance(raw.get("status"), Mapping) else {}
    code = status.get("code", status.get("status_code"))
    error = any(str(c).lower() in ERROR_CODES for c in (code, raw.get("status_code")) if c is not None)
    own_resource = raw.get("resource")
    service = resource.get("service.name")
    if isinstance(own_resource, Mapping) and isinstance(own_resource.get("attributes"), Mapping):
        service = own_resource["attributes"].get("service.name", service)
    return Span(str(trace_id), str(span_id), str(parent or ""), str(raw.get("name", "")), _start(raw), attributes,
                events, bool(error), line, service if isinstance(service, str) else "")


def _start(raw: Mapping[str, Any]) -> float:
    """A span's start in seconds, from any exporter's field (0 when absent: file order decides)."""
    value = raw.get("startTimeUnixNano", raw.get("start_time", raw.get("startTime")))
    if isinstance(value, list) and len(value) == 2:  # [seconds, nanoseconds] (the JS SDK's HrTime)
        return float(value[0]) + float(value[1]) / 1e9
    if isinstance(value, (int, float)):
        return float(value) / 1e9 if value > 1e12 else float(value)
    if isinstance(value, str):
        if value.isdigit():
            return int(value) / 1e9
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0
    return 0.0


def _otlp_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as plain JSON."""
    if not isinstance(value, Mapping):
        return value
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [_otlp_value(v) for v in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return {kv.get("key"): _otlp_value(kv.get("value")) for kv in value["kvlistValue"].get("values", [])}
    return None


def _otlp_attributes(items: Any, line: int, where: str) -> dict[str, Any]:
    if isinstance(items, Mapping):
        return dict(items)
    _expect(items, list, line, where, "a list of key-value attributes")
    out = {}
    for i, kv in enumerate(items):
        if not isinstance(kv, Mapping) or not isinstance(kv.get("key"), str):
            raise LineProblem(line, f"{where}[{i}]", "expected an attribute {key, value}")
        out[kv["key"]] = _otlp_value(kv.get("value"))
    return out


# --- messages ------------------------------------------------------------------------------------------------

@dataclass
class Message:
    """A chat message of any convention: role, text, reasoning, calls ``[(id, name, arguments)]``, answered id."""

    role: str
    text: str = ""
    reasoning: str = ""
    calls: list[tuple[str | None, str, Any]] = field(default_factory=list)
    call_id: str | None = None
    name: str | None = None  # a tool message's tool (OpenInference `message.name`): matches a result given twice


def _json(value: Any, span: Span, key: str) -> Any:
    """An attribute that holds JSON as a string (or already parsed)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise LineProblem(span.line, f"{span.name}.attributes.{key}", f"invalid JSON: {exc.msg}") from None


def _nested(span: Span, prefix: str) -> list[Any]:
    """The flattened list attribute ``prefix.N.rest`` as ``[{rest: value}, ...]`` (marking those read); a
    value already given as a list (older Phoenix exports) is taken as is."""
    if isinstance(span.attributes.get(prefix), list):
        span.used.add(prefix)
        return list(span.attributes[prefix])
    items: dict[int, dict[str, Any]] = {}
    for key, value in span.attributes.items():
        if key.startswith(prefix + "."):
            index, _, rest = key[len(prefix) + 1:].partition(".")
            if index.isdigit():
                items.setdefault(int(index), {})[rest] = value
                span.used.add(key)
    return [items[i] for i in sorted(items)]


def _parts_message(raw: Any, span: Span, where: str) -> Message:
    """A message of the OTel GenAI JSON conventions (``{role, parts}`` or ``{role, content, tool_calls}``)."""
    if not isinstance(raw, Mapping):
        raise LineProblem(span.line, where, "expected a message object")
    msg = Message(str(raw.get("role", "assistant")))
    texts, thoughts = [], []
    parts = raw.get("parts")
    if parts is None:  # the event / older JSON shape
        content = raw.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            parts = content
        for call in raw.get("tool_calls") or []:
            fn = call.get("function", call) if isinstance(call, Mapping) else {}
            msg.calls.append((call.get("id"), str(fn.get("name", "")), fn.get("arguments")))
        if isinstance(raw.get("id"), str) and msg.role == "tool":
            msg.call_id = raw["id"]
        if isinstance(raw.get("tool_call_id"), str):
            msg.call_id = raw["tool_call_id"]
    if isinstance(raw.get("name"), str) and msg.role == "tool":
        msg.name = raw["name"]
    for j, part in enumerate(parts or []):
        if not isinstance(part, Mapping):
            raise LineProblem(span.line, f"{where}.parts[{j}]", "expected a part object")
        kind = part.get("type", next((k for k in BEDROCK_PARTS if k in part), None))
        if kind == "toolUse":  # Bedrock Converse content (Strands agents): {"toolUse": {toolUseId, name, input}}
            use = part["toolUse"] if isinstance(part["toolUse"], Mapping) else {}
            msg.calls.append((use.get("toolUseId"), str(use.get("name", "")), use.get("input")))
        elif kind == "toolResult":
            res = part["toolResult"] if isinstance(part["toolResult"], Mapping) else {}
            msg.call_id = res.get("toolUseId") if isinstance(res.get("toolUseId"), str) else None
            body = res.get("content")
            texts.append(PART_JOIN.join(str(c.get("text", json.dumps(c, ensure_ascii=False))) if isinstance(c, Mapping)
                                        else str(c) for c in body) if isinstance(body, list) else str(body or ""))
        elif kind == "text":
            texts.append(str(part.get("content", part.get("text", ""))))
        elif kind in REASONING_PARTS:
            inner = part.get("reasoningContent")  # Bedrock: {"reasoningContent": {"reasoningText": {"text"}}}
            text = (inner.get("reasoningText", {}).get("text") if isinstance(inner, Mapping)
                    else part.get("content", part.get("text", part.get("thinking"))))
            thoughts.append(text if isinstance(text, str) else "")
        elif kind == "tool_call":
            msg.calls.append((part.get("id"), str(part.get("name", "")), part.get("arguments")))
        elif kind == "tool_call_response":
            msg.call_id = part.get("id") if isinstance(part.get("id"), str) else None
            response = part.get("response", part.get("result"))
            texts.append(response if isinstance(response, str) else json.dumps(response, ensure_ascii=False))
        else:
            span.dropped.append(f"{kind or 'untyped'} message parts")
    msg.text, msg.reasoning = PART_JOIN.join(texts), join_reasoning(thoughts)
    return msg


def _oi_message(raw: Mapping[str, Any], span: Span, where: str) -> Message:
    """An OpenInference message ``{message.role, message.content | message.contents..., message.tool_calls...}``."""
    flat = _flatten(raw)
    msg = Message(str(flat.get("message.role", "assistant")))
    texts, thoughts = [], []
    if isinstance(flat.get("message.content"), str):
        texts.append(flat["message.content"])
    contents: dict[int, dict[str, Any]] = {}
    calls: dict[int, dict[str, Any]] = {}
    for key, value in flat.items():
        for head, target in (("message.contents.", contents), ("message.tool_calls.", calls)):
            if key.startswith(head):
                index, _, rest = key[len(head):].partition(".")
                if index.isdigit():
                    target.setdefault(int(index), {})[rest] = value
    for i in sorted(contents):
        c = contents[i]
        kind = c.get("message_content.type", "text")
        text = c.get("message_content.text")
        if kind in REASONING_PARTS and isinstance(text, str):
            thoughts.append(text)
        elif isinstance(text, str):
            texts.append(text)
        else:
            span.dropped.append(f"{kind} message contents")
    for i in sorted(calls):
        c = calls[i]
        msg.calls.append((c.get("tool_call.id"), str(c.get("tool_call.function.name", "")),
                          c.get("tool_call.function.arguments")))
    if isinstance(flat.get("message.tool_call_id"), str):
        msg.call_id = flat["message.tool_call_id"]
    if isinstance(flat.get("message.name"), str):
        msg.name = flat["message.name"]
    msg.text, msg.reasoning = PART_JOIN.join(texts), join_reasoning(thoughts)
    return msg


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested object as dotted keys (list items by index), so both OpenInference shapes read the same."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        out = {}
        for i, v in enumerate(value):
            out.update(_flatten(v, f"{prefix}{i}."))
        return out
    return {prefix[:-1]: value}


def _flat_message(raw: Mapping[str, Any]) -> Message:
    """A message of the flattened OpenLLMetry convention ``gen_ai.prompt.N.{role, content, tool_calls.M.*}``."""
    msg = Message(str(raw.get("role", "assistant")))
    msg.text = raw["content"] if isinstance(raw.get("content"), str) else ""
    calls: dict[int, dict[str, Any]] = {}
    for key, value in raw.items():
        if key.startswith("tool_calls."):
            index, _, rest = key[len("tool_calls."):].partition(".")
            if index.isdigit():
                calls.setdefault(int(index), {})[rest] = value
    msg.calls = [(calls[i].get("id"), str(calls[i].get("name", "")), calls[i].get("arguments"))
                 for i in sorted(calls)]
    if isinstance(raw.get("tool_call_id"), str):
        msg.call_id = raw["tool_call_id"]
    if isinstance(raw.get("reasoning"), str):
        msg.reasoning = raw["reasoning"]
    return msg


def _messages(span: Span, side: str) -> list[Message]:
    """A model-call span's input (``side="input"``) or output messages, from whichever convention it uses."""
    a, found = span.attributes, list[Message]()
    where = f"{span.name}.attributes"
    if side == "input" and a.get("gen_ai.system_instructions") is not None:
        span.used.add("gen_ai.system_instructions")
        value = _json(a["gen_ai.system_instructions"], span, "gen_ai.system_instructions")
        parts = value if isinstance(value, list) else [{"type": "text", "content": str(value)}]
        found.append(_parts_message({"role": "system", "parts": parts}, span, f"{where}.gen_ai.system_instructions"))
    key = f"gen_ai.{side}.messages"
    if a.get(key) is not None:
        span.used.add(key)
        value = _json(a[key], span, key)
        _expect(value, list, span.line, f"{where}.{key}", "a list of messages")
        return found + [_parts_message(m, span, f"{where}.{key}[{i}]") for i, m in enumerate(value)]
    oi = _nested(span, f"llm.{side}_messages")
    if oi:
        return found + [_oi_message(m, span, f"{where}.llm.{side}_messages.{i}") for i, m in enumerate(oi)]
    old = "gen_ai.prompt" if side == "input" else "gen_ai.completion"
    flat = _nested(span, old)
    if flat:
        return found + [_flat_message(m) for m in flat]
    if a.get(old) is not None:  # the deprecated JSON string
        span.used.add(old)
        value = _json(a[old], span, old)
        if isinstance(value, list):
            return found + [_parts_message(m, span, f"{where}.{old}[{i}]") for i, m in enumerate(value)]
        if isinstance(value, Mapping) and isinstance(value.get("text"), str):
            return found + [Message("assistant", value["text"])]
        return found + [Message("user" if side == "input" else "assistant", str(value))]
    if side == "output" and isinstance(a.get("gen_ai.output"), str):
        return found + [_any_agent_output(span)]
    return found + _event_messages(span, side)


def _any_agent_output(span: Span) -> Message:
    """any-agent's model output ``gen_ai.output``: with ``gen_ai.output.type: json``, a list of calls
    ``[{"tool.name", "tool.args"}]`` (no ids: its tool spans answer them by name), else the answer's text."""
    raw, kind = span.attributes["gen_ai.output"], span.attributes.get("gen_ai.output.type")
    span.used |= {"gen_ai.output", "gen_ai.output.type"}
    value = _json(raw, span, "gen_ai.output") if kind == "json" else None
    if isinstance(value, list) and value and all(isinstance(c, Mapping) and "tool.name" in c for c in value):
        for c in value:
            span.dropped += [f"any-agent output call fields.{k}" for k in c if k not in ("tool.name", "tool.args")]
        return Message("assistant", calls=[(None, str(c["tool.name"]), c.get("tool.args")) for c in value])
    return Message("assistant", raw)


EVENT_USED = frozenset({"content", "tool_calls", "id", "role", "message"})
EVENT_ROLES = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
               "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}


def _event_messages(span: Span, side: str) -> list[Message]:
    """Messages written as span events (the OTel GenAI event convention)."""
    out = []
    for i, (name, attrs) in enumerate(span.events):
        if (side == "input" and name in EVENT_ROLES) or (side == "output" and name == "gen_ai.choice"):
            span.dropped += [f"span event attributes.{k} ({name})" for k, v in attrs.items()
                             if k not in EVENT_USED and v not in (None, "", [], {})]
        if side == "input" and name in EVENT_ROLES:
            body = dict(attrs)
            body.setdefault("role", EVENT_ROLES[name])
            for k in ("tool_calls", "content"):
                if isinstance(body.get(k), str) and body[k][:1] in "[{":
                    body[k] = _json(body[k], span, f"events[{i}].{k}")
            out.append(_parts_message(body, span, f"{span.name}.events[{i}]"))
        elif side == "output" and name == "gen_ai.choice":
            message = _json(attrs.get("message", attrs), span, f"events[{i}].message")
            choice = dict(message) if isinstance(message, Mapping) else {
                "content": message if isinstance(message, list) else str(message)}  # a content list (Bedrock)
            out.append(_parts_message({"role": "assistant", **choice}, span, f"{span.name}.events[{i}]"))
    return out


# --- one trace -----------------------------------------------------------------------------------------------

def _kind(span: Span) -> str:
    a = span.attributes
    oi = str(a.get("openinference.span.kind", "")).upper()
    op = a.get("gen_ai.operation.name")
    if oi == "TOOL" or op == TOOL_OPERATION:
        return "tool"
    if oi == "LLM" or op in LLM_OPERATIONS or any(k.startswith(("gen_ai.input.messages", "gen_ai.prompt",
                                                                   "llm.input_messages")) for k in a):
        return "llm"
    return oi.lower() or str(op or "other")


@dataclass
class _Trace:
    chat: ChatSteps
    system: list[str] = field(default_factory=list)
    shown: int = 0  # input messages of earlier model calls already in the chat
    last_input: list[Message] = field(default_factory=list)
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    models: list[str] = field(default_factory=list)
    content: bool = False  # whether any span held a message or a tool result


def _trace(trace_id: str, spans: list[Span], ctx: RunContext) -> dict[str, Any]:
    t = _Trace(ChatSteps(ctx))
    for span in spans:
        kind = _kind(span)
        if kind == "llm":
            _model_call(span, t, ctx)
        elif kind == "tool":
            _tool_span(span, t, ctx)
        else:
            ctx.drop(f"{kind} spans")
        _declared_tools(span, t)
        span.used |= {"openinference.span.kind", "gen_ai.operation.name"}  # read for the span's kind
        model_key = next((k for k in ("llm.model_name", "gen_ai.response.model", "gen_ai.request.model")
                          if isinstance(span.attributes.get(k), str)), None)
        if kind == "llm" and model_key is not None:
            span.used.add(model_key)
            if span.attributes[model_key] not in t.models:
                t.models.append(span.attributes[model_key])
        _count_unused(span, kind, ctx)
        for name, _ in span.events:
            if name not in EVENT_ROLES and name != "gen_ai.choice":
                ctx.drop(f"span events {name or 'unnamed'}")
    first = spans[0]
    try:
        body = t.chat.trajectory("(trace)")
    except RunProblem as exc:
        message = exc.message if t.content else (
            "no prompt or completion in any span (the instrumentation recorded no message content: turn on its "
            "content capture, e.g. OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT or the framework's "
            "sensitive-data option)")
        raise LineProblem(min(s.line for s in spans), f"trace {trace_id}", message) from None
    root = next((s for s in spans if not s.parent_id), first)
    meta: dict[str, Any] = {"trace_id": trace_id, "root_span": root.name}
    if root.service:
        meta["service"] = root.service
    if t.models:
        meta["models"] = t.models
    return {"task_id": ctx.task_id({"id": trace_id}), "domain": ctx.domain or DEFAULT_DOMAIN,
            "system_prompt": "\n\n".join(t.system), "tools": list(t.tools.values()), **body, "outcome": {},
            "metadata": meta}


def _model_call(span: Span, t: _Trace, ctx: RunContext) -> None:
    """One model call: the input messages the chat has not seen, then the output turn."""
    inputs = _messages(span, "input")
    outputs = _messages(span, "output")
    t.content = t.content or bool(inputs or outputs)
    for part in span.dropped:
        ctx.drop(part)
    if inputs:  # any-agent records the input of a run's first call only: the others continue the chat
        start = _common_prefix(t.last_input, inputs)
        if start < t.shown:
            ctx.drop("model calls whose input rewrites the earlier chat (read from the first message that differs)")
        for i, msg in enumerate(inputs[start:], start=start):
            _feed(msg, t, span, f"{span.name}.input[{i}]")
    for i, msg in enumerate(outputs):
        _feed(msg, t, span, f"{span.name}.output[{i}]")
    t.last_input = (inputs or t.last_input) + outputs
    t.shown = len(t.last_input)


def _common_prefix(before: list[Message], now: list[Message]) -> int:
    """How many leading messages of ``now`` the chat already holds (same role and text as ``before``)."""
    n = 0
    while n < min(len(before), len(now)) and (before[n].role, before[n].text) == (now[n].role, now[n].text):
        n += 1
    return n


def _feed(msg: Message, t: _Trace, span: Span, where: str) -> None:
    """One message into the chat."""
    try:
        if msg.role == "system":
            if msg.text not in t.system:
                t.system.append(msg.text)
        elif msg.role in ("user", "human"):
            t.chat.user_text(msg.text)
        elif msg.role in ("tool", "function", "ipython"):
            if _answered(msg, t):  # the tool span already gave this result
                t.chat.ctx.drop("tool results given again in a later call's input (the first kept)")
                return
            t.chat.tool_result(msg.call_id, msg.text, where)
        else:
            calls = [(cid if isinstance(cid, str) else None,
                      {"tool": name, "arguments": parse_arguments(args, f"{where}.tool_calls")})
                     for cid, name, args in msg.calls]
            t.chat.assistant(msg.reasoning, msg.text, calls, where)
    except RunProblem as exc:
        raise LineProblem(span.line, exc.where, exc.message) from None


def _answered(msg: Message, t: _Trace) -> bool:
    """Whether a tool message repeats a result the chat holds: the call with its id has one, or (a message with
    no id, as veadk's OpenInference messages are) the latest step has no open call and its call of the
    message's tool has one."""
    if msg.call_id is not None:
        return any(c.id == msg.call_id and c.result is not None for s in t.chat.steps for c in s.calls)
    calls = t.chat.steps[-1].calls if t.chat.steps else []
    return bool(calls) and all(c.result is not None for c in calls) and (
        msg.name is None or any(c.call.get("tool") == msg.name for c in calls))


def _tool_span(span: Span, t: _Trace, ctx: RunContext) -> None:
    """A tool execution: the result of the open call it answers, or a step of its own."""
    a = span.attributes
    name = next((a[k] for k in ("gen_ai.tool.name", "tool.name") if isinstance(a.get(k), str)), span.name)
    call_id = next((a[k] for k in CALL_ID_KEYS if isinstance(a.get(k), str)), None)
    args_key = next((k for k in ARGS_KEYS if a.get(k) is not None), None)
    result_key = next((k for k in RESULT_KEYS if a.get(k) is not None), None)
    span.used |= {"gen_ai.tool.name", "tool.name", *CALL_ID_KEYS}
    if args_key:
        span.used.add(args_key)
    if result_key:
        span.used.add(result_key)
    raw = a.get(result_key) if result_key else None
    t.content = t.content or raw is not None
    result = raw if isinstance(raw, str) else "" if raw is None else json.dumps(raw, ensure_ascii=False)
    where = f"{span.name}.attributes"
    open_calls = [c for c in (t.chat.steps[-1].calls if t.chat.steps else []) if c.result is None]
    match = next((c for c in open_calls if call_id is not None and c.id == call_id), None)
    match = match or next((c for c in open_calls if c.call.get("tool") == name), None)
    if match is None:
        if not t.chat.task:
            ctx.drop("tool spans before the task")
            return
        try:
            args = parse_arguments(a.get(args_key) if args_key else None, f"{where}.{args_key}")
        except RunProblem as exc:
            raise LineProblem(span.line, exc.where, exc.message) from None
        t.chat.assistant("", "", [(call_id, {"tool": name, "arguments": args})], where)
        match = t.chat.steps[-1].calls[0]
    elif args_key and not _same_arguments(a[args_key], match.call.get("arguments")):
        ctx.drop("tool span arguments unlike the model's call (the call's kept)")  # llama_index via any-agent
    match.result, match.is_error = result, span.error  # the call it answers (calls with no id: by tool name)


def _same_arguments(raw: Any, kept: Any) -> bool:
    """Whether a tool span's arguments (a JSON string or an object) are the call's."""
    try:
        return parse_arguments(raw, "") == kept
    except RunProblem:
        return False


def _declared_tools(span: Span, t: _Trace) -> None:
    """Tools the span declares (to the model, or as the tool it runs)."""
    a = span.attributes
    for i, item in enumerate(_nested(span, "llm.tools")):
        schema = _json(item.get("tool.json_schema"), span, f"llm.tools.{i}.tool.json_schema")
        fn = schema.get("function", schema) if isinstance(schema, Mapping) else {}
        if isinstance(fn.get("name"), str):
            t.tools.setdefault(fn["name"], tool_spec(fn["name"], fn.get("description"), fn.get("parameters"), ""))
    if a.get("gen_ai.tool.definitions") is not None:
        span.used.add("gen_ai.tool.definitions")
        for item in _json(a["gen_ai.tool.definitions"], span, "gen_ai.tool.definitions") or []:
            fn = item.get("function", item) if isinstance(item, Mapping) else {}
            if isinstance(fn.get("name"), str):
                t.tools.setdefault(fn["name"], tool_spec(fn["name"], fn.get("description"),
                                                         fn.get("parameters"), ""))
    name = a.get("tool.name", a.get("gen_ai.tool.name"))
    if _kind(span) == "tool" and isinstance(name, str):
        params = a.get("tool.parameters", a.get("gen_ai.tool.parameters"))
        params = _json(params, span, "tool.parameters") if params is not None else None
        t.tools.setdefault(name, tool_spec(name, a.get("tool.description", a.get("gen_ai.tool.description")),
                                           params, ""))
        span.used |= {"tool.parameters", "gen_ai.tool.parameters", "tool.description", "gen_ai.tool.description"}


def _count_unused(span: Span, kind: str, ctx: RunContext) -> None:
    """Count every attribute the mapping did not read, by name (indices as ``N``)."""
    for key, value in span.attributes.items():
        if key in span.used or value is None or value == "" or value == [] or value == {}:
            continue
        name = INDEX.sub(".N", key)
        path = f"{kind} span attributes.{name}"
        if any(key == k or (k.endswith(".") and key.startswith(k)) for k in KNOWN):
            ctx.drop(path)
        else:
            ctx.drop(f"{path} (unknown)")
            if holds_text(value) and kind in ("llm", "tool"):
                ctx.dropped_text[path] += 1
