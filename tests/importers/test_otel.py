"""OpenTelemetry GenAI and OpenInference spans (``interp import otel``/``auto``).

The span attributes are real public ones: the fixtures of Arize's
``openinference-genai`` converter (tests/importers/samples/otel/, sources in
its SOURCES.md): one chat span of an OpenAI tool-calling exchange written in
the OTel GenAI convention, the same span in the deprecated ``gen_ai.prompt``
convention and in OpenInference's, and an ``execute_tool`` span. Those files
are single spans' attribute maps, not exported traces, so each test wraps
them in the envelope an exporter writes (OTLP JSON, the SDK's span JSON,
flat span lines) and says which. Expected steps come from an independent
reading of the raw attributes below (json.loads of the message attributes),
or are written out by hand for the hand-made spans of the older conventions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from interp.data.importers.registry import import_runs
from interp.data.trajectory import validate_file

from ._support import REAL

pytestmark = pytest.mark.unit

FIXTURES = REAL / "otel" / "arize-openinference-genai"
MAF = REAL / "otel" / "microsoft-agent-framework" / "traces.jsonl"  # a real console-exporter file (SOURCES.md)


def attrs(name: str) -> dict[str, Any]:
    """One fixture's attribute map, as published."""
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


def otlp_value(v: Any) -> dict[str, Any]:
    """A JSON value as an OTLP ``AnyValue`` (what the collector's file exporter writes)."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, list):
        return {"arrayValue": {"values": [otlp_value(x) for x in v]}}
    return {"stringValue": v}


def otlp(spans: list[tuple[str, str, str, int, dict[str, Any]]]) -> dict[str, Any]:
    """An OTLP JSON export of ``(trace_id, span_id, name, start_ns, attributes)`` spans."""
    return {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "weather-agent"}}]},
        "scopeSpans": [{"scope": {"name": "test"}, "spans": [
            {"traceId": t, "spanId": s, "name": n, "kind": 3, "startTimeUnixNano": str(start),
             "endTimeUnixNano": str(start + 1), "status": {"code": 1},
             "attributes": [{"key": k, "value": otlp_value(v)} for k, v in a.items()]}
            for t, s, n, start, a in spans]}]}]}


def imported(tmp_path: Path, name: str, content: str, strict: bool = True, fmt: str = "auto"):
    source = tmp_path / name
    source.write_text(content, encoding="utf-8")
    out = tmp_path / "out.jsonl"
    report = import_runs(fmt, source, out, strict=strict)
    return report, ([json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()] if report.written else [])


# ---- the independent reading of the GenAI attributes


def read_genai_chat(a: dict[str, Any]) -> tuple[str, list[tuple]]:
    """``(task, [(reasoning, action, observation)])`` of a GenAI chat span's message attributes."""
    inputs = json.loads(a["gen_ai.input.messages"])
    outputs = json.loads(a["gen_ai.output.messages"])
    task = "\n".join(p["content"] for p in inputs[0]["parts"] if p["type"] == "text")
    results = {p["id"]: p["response"] for m in inputs for p in m["parts"] if p["type"] == "tool_call_response"}
    steps = []
    for m in inputs[1:] + outputs:
        if m["role"] != "assistant":
            continue
        text = "\n".join(p["content"] for p in m["parts"] if p["type"] == "text")
        calls = [p for p in m["parts"] if p["type"] == "tool_call"]
        if calls:
            (c,) = calls
            steps.append((text, {"tool": c["name"], "arguments": c["arguments"]}, results[c["id"]]))
        else:
            steps.append(("", {"text": text}, None))
    return task, steps


def read_tool_span(a: dict[str, Any]) -> tuple:
    return ("", {"tool": a["gen_ai.tool.name"], "arguments": json.loads(a["input"])}, a["output"])


def steps_of(traj) -> list[tuple]:
    return [(s["reasoning"], s["action"], s["observation"]) for s in traj["steps"]]


# ---- the conventions


def test_an_otlp_json_trace_of_genai_spans_equals_an_independent_reading(tmp_path):
    """A chat span then its ``execute_tool`` span (a call the model made in an earlier turn), in one OTLP JSON
    export: the chat's history and answer are steps, the tool span is a step of its own (no open call)."""
    chat, tool = attrs("otel_genai_client_span_tool_calls"), attrs("otel_genai_tool_execution_span")
    doc = otlp([("t1", "a", "chat gpt-4", 10, chat), ("t1", "b", "execute_tool get_weather", 20, tool)])
    report, (traj,) = imported(tmp_path, "trace.json", json.dumps(doc))
    task, expected = read_genai_chat(chat)
    assert report.formats["otel"] == 1 and not report.problems
    assert traj["task"] == task and traj["task_id"] == "t1"
    assert steps_of(traj) == expected + [read_tool_span(tool)]
    assert [t["name"] for t in traj["tools"]] == [tool["gen_ai.tool.name"]]  # declared by the tool span
    assert traj["tools"][0]["description"] == tool["gen_ai.tool.description"]
    assert traj["metadata"]["models"] == [chat["gen_ai.response.model"]]
    assert traj["metadata"]["service"] == "weather-agent"
    assert report.dropped["llm span attributes.gen_ai.usage.input_tokens"] == 1  # counted, by name
    assert not any("(unknown)" in k for k in report.dropped)
    assert not validate_file(tmp_path / "out.jsonl", strict=True).problems


def test_the_tool_span_answers_the_open_call_it_names(tmp_path):
    """The first turn of the same exchange (the model's call, no result yet) then the tool span with that call's
    id: the span's result is that call's observation, not a step of its own."""
    chat, tool = attrs("otel_genai_client_span_tool_calls"), attrs("otel_genai_tool_execution_span")
    inputs = json.loads(chat["gen_ai.input.messages"])
    first = {**chat, "gen_ai.input.messages": json.dumps(inputs[:1]),
             "gen_ai.output.messages": json.dumps(inputs[1:2])}  # the user's question -> the assistant's call
    doc = otlp([("t1", "a", "chat", 10, first), ("t1", "b", "execute_tool", 20, tool)])
    _, (traj,) = imported(tmp_path, "trace.json", json.dumps(doc))
    (step,) = traj["steps"]
    assert step["action"] == {"tool": "get_weather", "arguments": {"location": "Paris"}}
    assert step["observation"] == tool["output"]  # matched by gen_ai.tool.call.id "1234"


def test_openinference_attributes_read_as_the_same_chat(tmp_path):
    """Arize publishes its OpenInference span as the conversion of the GenAI one: both read to the same steps
    (here in the SDK's span JSON, one span per line)."""
    oi, genai = attrs("openinference_client_span_tool_calls"), attrs("otel_genai_client_span_tool_calls")
    line: dict[str, Any] = {"name": "ChatCompletion", "context": {"trace_id": "0x5b8a", "span_id": "0x01"},
                            "parent_id": None,
            "start_time": "2025-10-14T09:00:00Z", "status": {"status_code": "OK"}, "attributes": oi, "events": []}
    report, (traj,) = imported(tmp_path, "spans.jsonl", json.dumps(line) + "\n")
    task, expected = read_genai_chat(genai)
    assert (traj["task"], steps_of(traj)) == (task, expected)
    assert traj["final_answer"] == json.loads(oi["output.value"])["text"]
    assert report.dropped["llm span attributes.llm.token_count.total"] == 1


def test_the_deprecated_json_prompt_and_completion_read_as_the_same_chat(tmp_path):
    old, genai = attrs("otel_genai_deprecated_client_span_tool_calls"), attrs("otel_genai_client_span_tool_calls")
    lines = [{"type": "span", "traceId": "c0ffee", "spanId": "01", "name": "chat gpt-4", "startTime": [1760432400, 0],
              "attributes": old}]  # flat span lines, as agent CLIs' file exporters write them
    _, (traj,) = imported(tmp_path, "spans.json", json.dumps(lines))
    assert (traj["task"], steps_of(traj)) == read_genai_chat(genai)


def test_flattened_openllmetry_messages_and_repeated_history(tmp_path):
    """The older flattened ``gen_ai.prompt.N.*`` convention (hand-made spans): the second model call repeats the
    first one's messages, which are read once; the tool result comes from the prompt's tool message."""
    first = {"gen_ai.system": "openai", "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "Be brief.",
             "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": "2+2?",
             "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "I'll compute it.",
             "gen_ai.completion.0.tool_calls.0.id": "c1", "gen_ai.completion.0.tool_calls.0.name": "calc",
             "gen_ai.completion.0.tool_calls.0.arguments": '{"expr": "2+2"}'}
    second = {k: v for k, v in first.items() if k.startswith("gen_ai.prompt") or k == "gen_ai.system"}
    second |= {"gen_ai.prompt.2.role": "assistant", "gen_ai.prompt.2.content": "I'll compute it.",
               "gen_ai.prompt.2.tool_calls.0.id": "c1", "gen_ai.prompt.2.tool_calls.0.name": "calc",
               "gen_ai.prompt.2.tool_calls.0.arguments": '{"expr": "2+2"}',
               "gen_ai.prompt.3.role": "tool", "gen_ai.prompt.3.content": "4", "gen_ai.prompt.3.tool_call_id": "c1",
               "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "4."}
    doc = otlp([("t", "2", "openai.chat", 20, second), ("t", "1", "openai.chat", 10, first)])  # out of order
    _, (traj,) = imported(tmp_path, "trace.json", json.dumps(doc))
    assert traj["system_prompt"] == "Be brief." and traj["task"] == "2+2?"
    assert steps_of(traj) == [("I'll compute it.", {"tool": "calc", "arguments": {"expr": "2+2"}}, "4"),
                              ("", {"text": "4."}, None)]


def test_span_events_with_bedrock_content_as_strands_writes_them(tmp_path):
    """The event convention (``gen_ai.user.message``, ``gen_ai.choice``) with Bedrock Converse content, the
    shape Strands agents write (hand-made after AWS's published example span)."""
    call = {"toolUse": {"toolUseId": "tu1", "name": "web_search", "input": {"query": "Beijing temples"}}}
    span = {"name": "chat", "context": {"trace_id": "0x68", "span_id": "0x4f"}, "parent_id": "0xbc",
            "start_time": "2025-07-29T09:09:33.427326Z", "status": {"status_code": "OK"},
            "attributes": {"gen_ai.system": "strands-agents", "gen_ai.operation.name": "chat"},
            "events": [{"name": "gen_ai.user.message",
                        "attributes": {"content": json.dumps([{"text": "Find temples in Beijing."}])}},
                       {"name": "gen_ai.choice", "attributes": {
                           "finish_reason": "tool_use",
                           "message": json.dumps([{"text": "I'll search."}, call])}}]}
    tool = {"name": "execute_tool web_search", "context": {"trace_id": "0x68", "span_id": "0x50"},
            "parent_id": "0xbc", "start_time": "2025-07-29T09:09:35Z", "status": {"status_code": "OK"},
            "attributes": {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "web_search",
                           "gen_ai.tool.call.id": "tu1", "gen_ai.tool.call.result": "Temple of Heaven"}}
    text = "\n".join(json.dumps(s) for s in (span, tool)) + "\n"
    report, (traj,) = imported(tmp_path, "strands.jsonl", text)
    assert traj["task"] == "Find temples in Beijing."
    assert steps_of(traj) == [("I'll search.", {"tool": "web_search", "arguments": {"query": "Beijing temples"}},
                               "Temple of Heaven")]
    assert report.dropped["span events gen_ai.choice"] == 0  # read, not dropped
    assert report.dropped["span event attributes.finish_reason (gen_ai.choice)"] == 1


# ---- runs, drops and errors


def test_each_trace_of_a_file_is_one_run(tmp_path):
    chat = attrs("otel_genai_client_span_tool_calls")
    doc = otlp([("t1", "a", "chat", 10, chat), ("t2", "b", "chat", 20, chat)])
    report, trajs = imported(tmp_path, "two.json", json.dumps(doc))
    assert [t["task_id"] for t in trajs] == ["t1", "t2"] and report.converted == 2


def test_an_unknown_attribute_holding_text_is_reported_and_refused_under_strict(tmp_path):
    chat = {**attrs("otel_genai_client_span_tool_calls"), "my.prompt_note": "the planner's hidden note"}
    doc = json.dumps(otlp([("t1", "a", "chat", 10, chat)]))
    report, _ = imported(tmp_path, "trace.json", doc, strict=False)
    assert report.dropped["llm span attributes.my.prompt_note (unknown)"] == 1 and report.written
    report, _ = imported(tmp_path, "trace.json", doc, strict=True)
    assert not report.written and "llm span attributes.my.prompt_note" in report.problems[0]


def test_a_bad_span_names_its_file_line_and_field(tmp_path):
    good = {"name": "chat", "context": {"trace_id": "1", "span_id": "a"}, "attributes": {}}
    bad = {"name": "chat", "context": {"trace_id": "1", "span_id": "b"},
           "attributes": {"gen_ai.input.messages": "[{not json"}}
    report, _ = imported(tmp_path, "s.jsonl", json.dumps(good) + "\n" + json.dumps(bad) + "\n", strict=False)
    (problem,) = report.problems
    assert problem.startswith(f"{tmp_path / 's.jsonl'}:2: chat.attributes.gen_ai.input.messages: invalid JSON")


def test_span_files_are_claimed_whole_and_other_json_lines_are_not(tmp_path):
    chat = attrs("otel_genai_client_span_tool_calls")
    lines = [json.dumps(otlp([("t1", "a", "chat", 10, chat)])), json.dumps(otlp([("t1", "b", "x", 5, {})]))]
    report, (traj,) = imported(tmp_path, "collector.jsonl", "\n".join(lines) + "\n")  # the file exporter's lines
    assert report.formats == {"otel": 1} and report.dropped["x spans"] == 0 and report.dropped["other spans"] == 1
    chat_line = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
    report, _ = imported(tmp_path, "chats.jsonl", chat_line + "\n", strict=False)
    assert "otel" not in report.formats


# ---- a real exported file: Microsoft Agent Framework, console exporter, message content not recorded


def independent_spans(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line, span)`` of a file of indented JSON values one after another, read here with raw_decode."""
    text, decoder, pos = path.read_text(encoding="utf-8"), json.JSONDecoder(), 0
    out: list[tuple[int, dict[str, Any]]] = []
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            return out
        line = text.count("\n", 0, pos) + 1
        value, pos = decoder.raw_decode(text, pos)
        out.append((line, value))


def test_a_real_trace_without_message_content_is_refused_with_the_reason(tmp_path):
    """The framework's console exporter prints each span when it starts and again when it ends, as indented
    JSON; its chat spans hold no prompt or completion (content capture off). Every trace is refused, naming
    the trace's first line and why, and the repeated prints are counted."""
    spans = independent_spans(MAF)
    first_line: dict[str, int] = {}
    for line, span in spans:  # its chat spans are siblings of invoke_agent, not under it: one run per trace
        first_line.setdefault(span["context"]["trace_id"], line)
    distinct = {(s["context"]["trace_id"], s["context"]["span_id"]) for _, s in spans}
    out = tmp_path / "out.jsonl"
    report = import_runs("auto", MAF, out)
    assert not report.written and report.skipped == len(first_line) == 2
    assert sorted(report.problems) == sorted(
        f"{MAF}:{line}: trace {run}: no prompt or completion in any span (the instrumentation recorded no message "
        "content: turn on its content capture, e.g. OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT or the "
        "framework's sensitive-data option)" for run, line in first_line.items())
    assert report.dropped["span records repeated (the last kept)"] == len(spans) - len(distinct)
    agents = {s["context"]["span_id"] for _, s in spans
              if s["attributes"].get("gen_ai.operation.name") == "invoke_agent"}
    assert report.dropped["invoke_agent spans"] == len(agents) == 2


def test_each_agent_invocation_of_a_trace_is_a_run_of_its_own(tmp_path):
    """Two ``invoke_agent`` spans in one trace (a workflow of two agents, as the Microsoft Agent Framework file
    shapes it), each with its own chat: one run per invocation, each with the chat under it."""
    chat = attrs("otel_genai_client_span_tool_calls")
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather"}
    lines = [{"name": n, "context": {"trace_id": "0x7", "span_id": sid}, "parent_id": parent,
              "start_time": f"2026-03-01T20:47:1{k}Z", "attributes": a}
             for k, (n, sid, parent, a) in enumerate([("invoke_agent A", "0xa", None, agent),
                                                      ("chat", "0xa1", "0xa", chat),
                                                      ("invoke_agent B", "0xb", None, agent),
                                                      ("chat", "0xb1", "0xb", chat)])]
    report, trajs = imported(tmp_path, "two_agents.jsonl", "".join(json.dumps(x) + "\n" for x in lines))
    task, expected = read_genai_chat(chat)
    assert [t["task_id"] for t in trajs] == ["0x7/0xa", "0x7/0xb"]
    assert all((t["task"], steps_of(t)) == (task, expected) for t in trajs)  # neither chat read into the other
    assert report.dropped["invoke_agent spans"] == 2
