"""Real exported multi-span traces with message content (``interp import auto``), field by field.

Two producers (tests/importers/samples/otel/SOURCES.md):

* any-agent (Mozilla AI) 1.9.1.dev, its ``AgentTrace`` JSON (``{"spans": [...],
  "final_output"}``, each span the SDK's span JSON) of one task run by
  mistral-small through four framework backends (LangChain, Google ADK,
  LlamaIndex, TinyAgent): ``call_llm`` spans with any-agent's own output
  attribute ``gen_ai.output`` (calls ``[{"tool.name", "tool.args"}]`` with no
  ids, or text) and ``execute_tool`` spans;
* veadk (Volcengine's agent kit on Google ADK), its tracing dump (a JSON
  array of flat spans) of a two-turn session on doubao-seed-1.6: two traces,
  each ``invocation`` > ``agent_run`` > ``call_llm``/``execute_tool``, every
  model call in three conventions at once (OpenInference
  ``llm.*_messages``, flattened ``gen_ai.prompt.N``/``gen_ai.completion.N``,
  ADK's raw ``gcp.vertex.agent.llm_request``/``llm_response``).

The importer reads the OpenInference messages of the veadk spans; the
independent reading below reads ADK's raw request and response JSON instead
(the Gemini ``contents``/``parts`` the model was sent), and the any-agent
spans with plain ``json.loads``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from interp.data.importers.registry import import_runs
from interp.data.trajectory import load_trajectories, validate_file

from ._support import REAL

pytestmark = pytest.mark.unit

ANY_AGENT = sorted((REAL / "otel" / "any-agent").glob("*_trace.json"))
VEADK = REAL / "otel" / "veadk" / "chat_robot_two_turns.json"


def imported(source: Path, tmp_path: Path) -> tuple[Any, list[Any]]:
    """Import with no code under ``--strict``, then ``validate --strict`` (no problem, unknown field or
    undeclared tool)."""
    out = tmp_path / "t.jsonl"
    report = import_runs("auto", source, out, strict=True)
    assert report.written and not report.problems, report.problems
    strict = validate_file(out, strict=True)
    assert not strict.problems and not strict.unknown_fields and not strict.warnings
    return report, load_trajectories(out)


def steps_of(traj: Any) -> list[tuple]:
    """``(reasoning, action, observation)`` per step, the action its text or its ``[(tool, arguments)]``."""
    return [(s.reasoning, s.action.text if s.action.is_text else [(c.tool, dict(c.arguments)) for c in s.action.calls],
             s.observation) for s in traj.steps]


def arguments(raw: Any) -> Any:
    return json.loads(raw) if isinstance(raw, str) else raw


# ---- any-agent: AgentTrace JSON


def read_any_agent(doc: dict[str, Any]) -> tuple[str, str, list[tuple]]:
    """``(system prompt, task, [(reasoning, action, observation)])``: the first call's input messages, each
    call's output (calls, else text) and each tool span's output for the call it ran."""
    spans = sorted(doc["spans"], key=lambda s: s["start_time"])
    first = next(s["attributes"] for s in spans if "gen_ai.input.messages" in s["attributes"])
    messages = json.loads(first["gen_ai.input.messages"])
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    task = "\n\n".join(m["content"] for m in messages if m["role"] == "user")
    steps: list[list[Any]] = []
    for span in spans:
        a = span["attributes"]
        if a["gen_ai.operation.name"] == "call_llm":
            out = json.loads(a["gen_ai.output"]) if a["gen_ai.output.type"] == "json" else None
            if isinstance(out, list):
                (call,) = out  # one call per turn in these runs
                steps.append(["", [(call["tool.name"], arguments(call["tool.args"]))], None])
            else:
                steps.append(["", a["gen_ai.output"], None])
        elif a["gen_ai.operation.name"] == "execute_tool":
            assert steps[-1][1][0][0] == a["gen_ai.tool.name"] and steps[-1][2] is None
            steps[-1][2] = a["gen_ai.output"]
    return system, task, [tuple(s) for s in steps]


@pytest.mark.parametrize("source", ANY_AGENT, ids=lambda p: p.name)
def test_any_agent_traces_equal_an_independent_reading(source, tmp_path):
    doc = json.loads(source.read_text(encoding="utf-8"))
    report, (traj,) = imported(source, tmp_path)
    system, task, expected = read_any_agent(doc)
    assert report.formats == {"otel": 1}
    assert (traj.system_prompt, traj.task, steps_of(traj)) == (system, task, expected)
    last = expected[-1][1]
    assert traj.final_answer == (last if isinstance(last, str) else None)
    root = next(s for s in doc["spans"] if s["parent"]["span_id"] is None)
    assert traj.task_id == str(root["context"]["trace_id"])
    assert traj.extra["metadata"]["root_span"] == root["name"] == "invoke_agent [any_agent]"
    assert traj.extra["metadata"]["models"] == [root["attributes"]["gen_ai.request.model"]]
    tools = {s["attributes"]["gen_ai.tool.name"] for s in doc["spans"] if "gen_ai.tool.name" in s["attributes"]}
    assert {t["name"] for t in traj.tools} == tools  # declared by the tool spans
    n_llm = sum(1 for s in doc["spans"] if s["attributes"]["gen_ai.operation.name"] == "call_llm")
    assert report.dropped["trace object fields.final_output"] == 1
    assert report.dropped["llm span attributes.gen_ai.usage.input_cost"] == n_llm  # counted, by name
    assert report.dropped["invoke_agent spans"] == 1
    # a call with no input recorded continues the chat: no call counted as rewriting it
    assert report.dropped["model calls whose input rewrites the earlier chat (read from the first message that "
                          "differs)"] == 0
    calls = [s[1][0] for s in expected if isinstance(s[1], list)]
    tool_args = [arguments(s["attributes"]["gen_ai.tool.args"]) for s in sorted(doc["spans"],
                 key=lambda s: s["start_time"]) if s["attributes"]["gen_ai.operation.name"] == "execute_tool"]
    unlike = sum(1 for (_, args), ran in zip(calls, tool_args, strict=True) if args != ran)
    assert report.dropped["tool span arguments unlike the model's call (the call's kept)"] == unlike


def test_llama_index_runs_keep_the_models_empty_arguments_and_count_the_tools_own(tmp_path):
    """Through LlamaIndex the model's calls carry ``"{}"`` while the tool spans hold the arguments the tools
    ran with: the call (what the model wrote) is the action, and each differing tool span is counted."""
    source = REAL / "otel" / "any-agent" / "LLAMA_INDEX_trace.json"
    doc = json.loads(source.read_text(encoding="utf-8"))
    ran = [json.loads(s["attributes"]["gen_ai.tool.args"]) for s in sorted(doc["spans"], key=lambda s: s["start_time"])
           if s["attributes"]["gen_ai.operation.name"] == "execute_tool"]
    report, (traj,) = imported(source, tmp_path)
    assert [a for _, a in (c for s in steps_of(traj) if isinstance(s[1], list) for c in s[1])] == [{}, {}, {}]
    assert all(args != {} for args in ran) and len(ran) == 3
    assert report.dropped["tool span arguments unlike the model's call (the call's kept)"] == 3


def test_a_bad_output_in_a_trace_object_names_the_file_line_and_field(tmp_path):
    """A real any-agent trace with one call's ``gen_ai.output`` cut short: that run is refused, naming the
    file, the line the trace object starts on, the span and the attribute."""
    doc = json.loads((REAL / "otel" / "any-agent" / "TINYAGENT_trace.json").read_text(encoding="utf-8"))
    first = next(s for s in doc["spans"] if s["attributes"]["gen_ai.operation.name"] == "call_llm")
    first["attributes"]["gen_ai.output"] = first["attributes"]["gen_ai.output"][:20]
    source = tmp_path / "cut.json"
    source.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    report = import_runs("auto", source, tmp_path / "out.jsonl", strict=False)
    (problem,) = report.problems
    assert problem.startswith(f"{source}:1: {first['name']}.attributes.gen_ai.output: invalid JSON")
    assert not report.written and report.skipped == 1


# ---- veadk: the tracing dump, read through ADK's raw request and response


def read_adk(spans: list[dict[str, Any]]) -> tuple[str, str, list[tuple]]:
    """``(system prompt, task, steps)`` of one trace from ADK's ``gcp.vertex.agent.llm_request`` (the history
    the first call was sent, and every call's function responses) and ``llm_response`` (each call's turn)."""
    calls = [s["attributes"] for s in sorted(spans, key=lambda s: s["start_time"]) if s["name"] == "call_llm"]
    requests = [json.loads(a["gcp.vertex.agent.llm_request"]) for a in calls]
    results = {p["function_response"]["id"]: json.dumps(p["function_response"]["response"], ensure_ascii=False)
               for r in requests for turn in r["contents"] for p in turn["parts"] if "function_response" in p}
    turns = requests[0]["contents"] + [json.loads(a["gcp.vertex.agent.llm_response"])["content"] for a in calls]
    task, steps = "", list[tuple[str, Any, Any]]()
    for turn in turns:
        texts = [p["text"] for p in turn["parts"] if p.get("text")]
        fcalls = [p["function_call"] for p in turn["parts"] if p.get("function_call")]
        if turn["role"] == "user" and texts:
            if not task:
                task = "\n".join(texts)
            else:
                steps[-1] = (*steps[-1][:2], "\n".join(texts))  # the user's reply to a text turn
        elif turn["role"] == "model" and fcalls:
            (fc,) = fcalls
            steps.append(("", [(fc["name"], fc["args"])], results[fc["id"]]))
        elif turn["role"] == "model":
            steps.append(("", "\n".join(texts), None))
    return requests[0]["config"]["system_instruction"], task, steps


def test_veadk_traces_equal_an_independent_reading_of_adks_raw_requests(tmp_path):
    spans = json.loads(VEADK.read_text(encoding="utf-8"))
    traces: dict[int, list[dict[str, Any]]] = {}
    for s in spans:
        traces.setdefault(s["trace_id"], []).append(s)
    report, trajs = imported(VEADK, tmp_path)
    assert report.formats == {"otel": 2} and len(traces) == 2
    for (trace_id, members), traj in zip(traces.items(), trajs, strict=True):
        assert traj.task_id == str(trace_id)  # one agent invocation per trace: the trace is the run
        assert (traj.system_prompt, traj.task, steps_of(traj)) == read_adk(members)
        assert traj.final_answer == traj.steps[-1].action.text
        assert traj.extra["metadata"]["models"] == ["openai/doubao-seed-1.6-250615"]
        assert traj.extra["metadata"]["root_span"] == "agent_run [chat_robot]"  # the run: the agent invocation
        assert [t["name"] for t in traj.tools] == ["get_city_weather"]  # llm.tools.0.tool.json_schema
    n_llm = sum(1 for s in spans if s["name"] == "call_llm")
    for key in ("gcp.vertex.agent.llm_request", "gcp.vertex.agent.llm_response", "gen_ai.prompt.N.content",
                "gen_ai.completion.N.content", "input.value", "output.value"):
        assert report.dropped[f"llm span attributes.{key}"] == n_llm, key  # the other copies: counted
    assert report.dropped["tool span attributes.output.value"] == 2  # the function response around the result
    # each trace's second call repeats the tool message the tool span answered (no id: matched by its tool)
    assert report.dropped["tool results given again in a later call's input (the first kept)"] == 2
    assert report.dropped["agent spans"] == 2 and report.dropped["chain spans"] == 2
    assert not any(k.endswith("(unknown)") for k in report.dropped if report.dropped[k])


def test_the_second_turns_trace_carries_the_first_turn_as_its_history(tmp_path):
    """veadk's second trace sends the whole session: the first question is its task, the first answer a text
    step whose observation is the user's next question."""
    _, (first, second) = imported(VEADK, tmp_path)
    assert second.task == first.task == "How is the weather like in Xi'an?"
    assert second.steps[1].action.text == first.final_answer
    assert second.steps[1].observation == "How is the weather like in BeiJing?"
    assert steps_of(second)[2][1] == [("get_city_weather", {"city": "Beijing"})]


def test_the_real_traces_are_three_files_from_two_producers():
    sources = (REAL / "otel" / "SOURCES.md").read_text(encoding="utf-8")
    files = [*ANY_AGENT, VEADK]
    assert len(files) >= 3 and all(f.is_file() for f in files)
    assert all(f"`{f.parent.name}/{f.name}`" in sources for f in files)
