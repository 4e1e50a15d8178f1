"""The finishing and export shapes real producers write (issue #47), each on a real excerpt imported with no code.

Claude Code sessions whose ``parentUuid`` chain is absent (exported or hand-made
sessions) or broken (a parent the file lacks, a cycle) are read in file order
and the break is counted; OpenHands' SWE-bench ``output.jsonl`` rows (one
instance with its ``history``); Gemini CLI's API-history form; tau2-bench
submissions without ``info``; a directory mixing formats. Where no public file
has the shape, a real file is re-shaped into it and the test says how.
"""

from __future__ import annotations

import json

import pytest

from ._support import REAL
from .test_sessions import (
    CC_NEW, CC_THINK, actual, gemini_reference, imported, openhands_reference, raw, run, write,
)

pytestmark = pytest.mark.unit


# ---- Claude Code without a chain, or with a broken one -------------------------------------------------------


def file_order(lines: list[dict]) -> tuple[str, list]:
    """The independent reading of a session without a usable chain: its main user and assistant entries in file
    order."""
    return run([d for d in lines if d.get("type") in ("user", "assistant") and not d.get("isSidechain")])


@pytest.mark.parametrize("shape", ["null", "absent"])
def test_a_session_without_a_parent_chain_is_read_in_file_order(tmp_path, shape):
    """An exported session (every ``parentUuid`` null) or a hand-made one (no ``parentUuid`` key): the real
    thinking session re-shaped so. It keeps every turn (it once kept only the last entry: 0 steps)."""
    lines = raw(CC_THINK)
    for d in lines:
        if shape == "null":
            d["parentUuid"] = None
        else:
            d.pop("parentUuid", None)
    report, (traj,) = imported("auto", write(tmp_path / "s.jsonl", lines), tmp_path, strict=True)
    assert (traj.task, actual(traj)) == file_order(lines)
    _, (chained,) = imported("auto", CC_THINK, tmp_path / "c", strict=True)
    assert actual(traj) == actual(chained) and traj.final_answer == chained.final_answer  # no greeting dropped
    n = sum(1 for d in lines if d.get("type") in ("user", "assistant"))
    assert report.dropped["entries without a parentUuid chain (read in file order)"] == n
    assert "assistant turns before the task (a greeting)" not in report.dropped


def test_a_parent_missing_from_the_file_is_counted_and_the_session_read_in_file_order(tmp_path):
    """A chain broken by a parent no entry of the file has (an entry lost in an export): once refused as "tool
    result answers no open call"; now read in file order, the break counted."""
    lines = raw(CC_THINK)
    msgs = [d for d in lines if d.get("type") in ("user", "assistant")]
    msgs[len(msgs) // 2]["parentUuid"] = "00000000-0000-4000-8000-00000000dead"
    report, (traj,) = imported("auto", write(tmp_path / "s.jsonl", lines), tmp_path, strict=True)
    assert (traj.task, actual(traj)) == file_order(lines)
    assert report.dropped["parentUuid naming no entry of the file (a broken chain, read in file order)"] == 1


def test_a_parent_cycle_is_counted_not_silently_accepted(tmp_path):
    lines = raw(CC_THINK)
    msgs = [d for d in lines if d.get("type") in ("user", "assistant")]
    msgs[0]["parentUuid"] = msgs[-1]["uuid"]  # the root names the last entry: the walk back never ends
    report, (traj,) = imported("auto", write(tmp_path / "s.jsonl", lines), tmp_path, strict=True)
    assert (traj.task, actual(traj)) == file_order(lines)
    assert report.dropped["parentUuid chain with a cycle (read in file order)"] == 1


def test_a_chain_when_present_is_used_and_its_branch_points_counted(tmp_path):
    """The real 2.1 session with a retried answer (same parent, earlier in the file): the chain to the last
    entry is kept, the retried entry and the branch point counted."""
    lines = raw(CC_NEW)
    i, answer = next((i, d) for i, d in enumerate(lines) if d.get("type") == "assistant")
    retried = json.loads(json.dumps(answer))
    retried["uuid"] = "00000000-0000-4000-8000-000000000001"
    retried["message"]["content"] = [{"type": "text", "text": "an answer the user rewound"}]
    lines.insert(i, retried)
    report, (traj,) = imported("auto", write(tmp_path / "s.jsonl", lines), tmp_path)
    assert traj.final_answer == answer["message"]["content"][0]["text"] and len(traj.steps) == 1
    assert report.dropped["branch points (an entry with several children; the branch to the last entry kept)"] == 1
    assert not any("file order" in d for d in report.dropped)


# ---- OpenHands evaluation output rows ---------------------------------------------------------------------------

OH_ROW = REAL / "openhands" / "nunu0404-mopenhands_output_alibaba__fastjson2-2775.jsonl"
OH_STREAM = REAL / "openhands" / "openhands-runtime-tests_basic.json"
# OpenHands' tool schemas as its system event declares them (OpenAI function form); text shortened
OH_TOOLS = [{"type": "function", "function": {"name": name, "description": f"{name} (shortened)",
                                               "parameters": {"type": "object", "properties": props,
                                                              "required": list(props)}}}
            for name, props in (("execute_bash", {"command": {"type": "string"}}),
                                ("think", {"thought": {"type": "string"}}),
                                ("finish", {}),
                                ("str_replace_editor", {"command": {"type": "string"}, "path": {"type": "string"}}))]


def test_an_openhands_output_row_with_a_history_is_one_run(tmp_path):
    """SWE-bench-style ``output.jsonl`` (MopenHands on OpenHands 0.25, gpt-5): one row per instance, its events
    in ``history``. Imported as the event stream would be; the model of the responses kept, the dataset row
    counted."""
    row = json.loads(OH_ROW.read_text(encoding="utf-8"))
    report, (traj,) = imported("auto", OH_ROW, tmp_path, strict=True)
    assert report.formats == {"openhands": 1}
    assert (traj.task, actual(traj)) == openhands_reference(row["history"])
    assert traj.task_id == row["instance_id"]
    meta = traj.extra["metadata"]
    assert meta["models"] == sorted({e["tool_call_metadata"]["model_response"]["model"] for e in row["history"]
                                     if "action" in e and "tool_call_metadata" in e})
    assert meta["metadata"] == row["metadata"] and meta["test_result"] == row["test_result"]
    assert report.dropped["instance (the benchmark's dataset row: not kept)"] == 1
    n_responses = sum(1 for e in row["history"] if "action" in e and "tool_call_metadata" in e)
    assert report.dropped["(event).tool_call_metadata.model_response.usage"] == n_responses
    assert not [d for d in report.dropped if "(unknown)" in d]


def test_the_system_events_tool_schemas_are_the_runs_tools(tmp_path):
    """The system event later versions write first (``action: system``, ``args.tools``): its tools are the
    trajectory's declared tools, not a drop count. Re-shaped: the real row with such an event put first (the
    row's version writes none); the schemas are OpenHands' four CodeAct tools, text shortened."""
    row = json.loads(OH_ROW.read_text(encoding="utf-8"))
    system = {"id": 1, "timestamp": row["history"][0]["timestamp"], "source": "agent", "message": "You are ...",
              "action": "system", "args": {"content": "You are OpenHands agent.", "tools": OH_TOOLS,
                                           "openhands_version": "0.25.0", "agent_class": "CodeActAgent"}}
    row["history"].insert(0, system)
    report, (traj,) = imported("auto", write(tmp_path / "output.jsonl", [row]), tmp_path, strict=True)
    assert traj.system_prompt == "You are OpenHands agent."
    assert [dict(t) for t in traj.tools] == [
        {"name": t["function"]["name"], "description": t["function"]["description"],
         "parameters": t["function"]["parameters"]} for t in OH_TOOLS]
    assert not any(d.startswith("(event).args.tools") for d in report.dropped)
    assert report.dropped["(event).args.openhands_version"] == 1


def test_a_saved_event_stream_as_an_output_row_equals_the_stream(tmp_path):
    """The second producer: OpenHands' own runtime-test stream (claude-3-5-sonnet) as a row (re-shaped so: the
    stream saved as ``history`` of a row)."""
    events = json.loads(OH_STREAM.read_text(encoding="utf-8"))
    _, (stream,) = imported("openhands", OH_STREAM, tmp_path / "a")
    row = {"instance_id": "basic", "history": events, "metadata": {"agent_class": "CodeActAgent"}}
    _, (as_row,) = imported("auto", write(tmp_path / "rows.jsonl", [row]), tmp_path / "b")
    assert (as_row.task, actual(as_row), as_row.final_answer) == (stream.task, actual(stream), stream.final_answer)
    assert (as_row.task, actual(as_row)) == openhands_reference(events)


# ---- Gemini CLI's API-history form ---------------------------------------------------------------------------

GEMINI_API = REAL / "gemini" / "api-history" / "codeboltai_api-request_gemini-2.5-pro.json"
GEMINI_RECORDING = REAL / "gemini" / "yoavf_gemini-cli-pomodoro-timer.json"


def api_reference(contents: list[dict]) -> tuple[str, list]:
    """(task, steps) of Gemini API contents read by the Gemini API's rules: a model turn's ``thought`` parts are
    its thinking, ``functionCall`` parts its calls, answered by the next user turn's ``functionResponse`` parts."""
    def texts(parts, thought=False):
        return [p["text"] for p in parts if "text" in p and bool(p.get("thought")) == thought]

    first = next(i for i, c in enumerate(contents) if c["role"] == "model")
    task = "\n\n".join("\n".join(texts(c["parts"])) for c in contents[:first])
    steps = []
    for i, c in enumerate(contents[first:], start=first):
        if c["role"] != "model":
            continue
        nxt = contents[i + 1]["parts"] if i + 1 < len(contents) else []
        calls = [p["functionCall"] for p in c["parts"] if "functionCall" in p]
        thinking, text = "\n\n".join(texts(c["parts"], True)), "\n".join(texts(c["parts"]))
        if calls:
            out = [r["functionResponse"]["response"] for r in nxt if "functionResponse" in r]
            obs = [o["output"] if isinstance(o.get("output"), str) else o["error"] if isinstance(o.get("error"), str)
                   else json.dumps(o, ensure_ascii=False) for o in out]
            steps.append((thinking or text, [(f["name"], f["args"]) for f in calls], obs[0] if len(obs) == 1 else obs))
        else:
            steps.append((thinking, text, "\n".join(texts(nxt)) if nxt else None))
    return task, steps


def test_a_gemini_cli_api_request_is_one_run_with_its_system_prompt_and_tools(tmp_path):
    """Gemini CLI's logged API request (``{model, request: {contents, systemInstruction, tools}}``, role
    user/model with parts): once refused as "unknown role 'model'"."""
    doc = json.loads(GEMINI_API.read_text(encoding="utf-8"))
    report, (traj,) = imported("auto", GEMINI_API, tmp_path, strict=True)
    request = doc["request"]
    assert report.formats == {"gemini": 1}
    assert (traj.task, actual(traj)) == api_reference(request["contents"])
    assert traj.system_prompt == "\n".join(p["text"] for p in request["systemInstruction"]["parts"])
    declared = [d for group in request["tools"] for d in group["functionDeclarations"]]
    assert [dict(t) for t in traj.tools] == [{"name": d["name"], "description": d["description"],
                                              "parameters": d["parametersJsonSchema"]} for d in declared]
    assert traj.task_id == request["session_id"] and traj.extra["metadata"] == {"models": [doc["model"]]}
    assert report.dropped["request.generationConfig"] == 1


def recording_as_api_history(doc: dict) -> list[dict]:
    """A chat recording written as the API history the CLI sends (``/chat save`` writes this list): each gemini
    message a model turn (thoughts as ``thought`` parts), its calls' results the next user turn."""
    contents: list[dict] = []
    for m in doc["messages"]:
        if m["type"] == "user":
            content = m["content"]
            parts = [{"text": content}] if isinstance(content, str) else [{"text": p["text"]} for p in content]
            contents.append({"role": "user", "parts": parts})
        elif m["type"] == "gemini":
            thoughts = [{"text": "\n".join(p for p in (t.get("subject", ""), t.get("description", "")) if p),
                         "thought": True} for t in m.get("thoughts") or []]
            text = [{"text": m["content"]}] if m.get("content") else []
            calls = [{"functionCall": {"id": c["id"], "name": c["name"], "args": c["args"]},
                      "thoughtSignature": "c2ln"} for c in m.get("toolCalls") or []]
            contents.append({"role": "model", "parts": thoughts + text + calls})
            results = [p for c in m.get("toolCalls") or [] for p in c.get("result") or []]
            if results:
                contents.append({"role": "user", "parts": results})
    return contents


def test_a_saved_api_history_equals_the_recording_it_was_written_from(tmp_path):
    """Re-shaped (no public ``/chat save`` checkpoint with calls was found): the real pomodoro recording (11
    calls, thought summaries) written as the API history; it imports to the recording's own independent
    reading."""
    doc = json.loads(GEMINI_RECORDING.read_text(encoding="utf-8"))
    contents = recording_as_api_history(doc)
    source = tmp_path / "checkpoint-pomodoro.json"
    source.write_text(json.dumps(contents), encoding="utf-8")
    report, (traj,) = imported("auto", source, tmp_path, strict=True)
    assert (traj.task, actual(traj)) == gemini_reference(doc) == api_reference(contents)
    n_calls = sum(len(m.get("toolCalls") or []) for m in doc["messages"])
    assert report.dropped["(record)[].parts[].thoughtSignature"] == n_calls > 0


# ---- tau2-bench without info -----------------------------------------------------------------------------------

TAU2 = REAL / "tau2" / "claude-sonnet-4-5_airline.json"


def test_a_tau2_file_without_info_is_detected_by_auto(tmp_path):
    """Leaderboard submissions without ``info`` (``{tasks, simulations}``): ``auto`` once said "format not
    recognised" while ``tau2`` read them. Re-shaped: the real airline file with its ``info`` taken out."""
    from .test_conformance import read_chat

    doc = json.loads(TAU2.read_text(encoding="utf-8"))
    del doc["info"]
    source = tmp_path / "submission.json"
    source.write_text(json.dumps(doc), encoding="utf-8")
    report, trajs = imported("auto", source, tmp_path, strict=True)
    assert report.formats == {"tau2": len(doc["simulations"])}
    for sim, traj in zip(doc["simulations"], trajs, strict=True):
        assert actual(traj) == read_chat(sim["messages"], results_by="id")
        assert traj.outcome == {"reward": sim["reward_info"]["reward"]} and traj.system_prompt == ""
    _, named = imported("tau2", source, tmp_path / "named", strict=True)
    assert named == trajs
