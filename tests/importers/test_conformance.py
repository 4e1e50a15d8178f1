"""The conformance corpus: every real public sample (tests/importers/samples/<format>/) through ``interp import``.

Each sample is imported with no code (``auto``), the output passes
``interp validate --strict``, and every step is compared field by field with
an independent reader of the raw file written here from the formats'
documentation (SWE-agent's trajectory files, mini-swe-agent's output files,
the tau2-bench message model, the ATIF RFC, inspect_ai's log reader): the
reasoning, each call's tool name and arguments, each observation, and the
reward. The readers share no code with the importers.

The shapes real producers write and the importers once got wrong are checked
on real excerpts too: a SWE-agent step that has no history message, thinking
in a history message, a planted field inside a tool call, ``openai`` on an
Anthropic file, mini-swe-agent 2.x's ``exit`` message.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from interp.data.importers.registry import import_runs
from interp.data.trajectory import load_trajectories, validate_file

from ._support import REAL, SAMPLES

pytestmark = pytest.mark.unit

EXIT = re.compile(r"\s*Exit(?:ed)? due to\b")  # SWE-agent's thought for a step it ends itself (cost, format limits)


def samples(fmt: str) -> list[Path]:
    """The sample inputs of a format: files, or for ATIF one folder per run (a Harbor trial, or tbench's output)."""
    folder = REAL / fmt
    if fmt == "atif":
        return sorted(p for p in folder.iterdir() if p.is_dir())
    return sorted(p for p in folder.iterdir() if p.is_file())


def atif_file(folder: Path) -> Path:
    """The trajectory file of an ATIF run folder: a Harbor trial's ``agent/trajectory.json``, or tbench's own."""
    harbor = folder / "agent" / "trajectory.json"
    return harbor if harbor.is_file() else folder / "trajectory.json"


# ---- independent readers: raw file -> [(reasoning, action, observation)], action a [(tool, args)] list or a text


def read_swe_agent(doc: dict[str, Any]) -> list[tuple]:
    turns = [m for m in doc.get("history") or [] if m.get("role") == "assistant"
             and not m.get("is_demo") and m.get("message_type") != "demonstration"]
    steps, start = [], 0
    for entry in doc["trajectory"]:
        act, thought = entry["action"], entry.get("thought") or ""
        if act.strip().startswith("exit_") or (not act.strip() and EXIT.match(thought)):
            continue
        found = next((k for k in range(start, len(turns)) if turns[k].get("action") == act
                      and turns[k].get("thought", thought) == thought), None)
        msg = turns[found] if found is not None else {}
        start = found + 1 if found is not None else start
        thinking = "\n\n".join(b["thinking"] for b in msg.get("thinking_blocks") or [])
        if msg.get("tool_calls"):
            action: Any = [(c["function"]["name"], json.loads(c["function"]["arguments"] or "{}"))
                           for c in msg["tool_calls"]]
        elif act.strip() and "<function=" in (entry.get("response") or ""):
            name, body = re.search(r"<function=([^>]+)>(.*?)</function>", entry["response"], re.S).groups()
            action = [(name.strip(), {k: v.removeprefix("\n").removesuffix("\n")
                                      for k, v in re.findall(r"<parameter=([^>]+)>(.*?)</parameter>", body, re.S)})]
        elif act.strip():
            action = [("bash", {"command": act})]
        else:
            action, thought = thought, ""
        steps.append((thinking or thought, action, entry["observation"]))
    return steps


def _response_reasoning(msg: dict[str, Any]) -> str:
    choices = (((msg.get("extra") or {}).get("response") or {}).get("choices") or [{}])
    return (choices[0].get("message") or {}).get("reasoning_content") or ""


def read_chat(messages: list[dict[str, Any]], results_by: str = "tool_call_id") -> list[tuple]:
    """OpenAI-style messages (mini-swe-agent, tau2-bench): assistant turns after the first user message."""
    results = {m[results_by]: m["content"] for m in messages if m["role"] == "tool"}
    steps, started = [], False
    for i, m in enumerate(messages):
        started = started or m["role"] == "user"
        if m["role"] != "assistant" or not started:
            continue
        blocks = (m.get("raw_data") or {}).get("thinking_blocks") or []
        reasoning = ("\n\n".join(b["thinking"] for b in blocks) or m.get("reasoning_content")
                     or _response_reasoning(m) or "")
        text = m.get("content") or ""
        if m.get("tool_calls"):
            fns = [c.get("function", c) for c in m["tool_calls"]]
            calls = [(f["name"], json.loads(f["arguments"]) if isinstance(f["arguments"], str) else f["arguments"])
                     for f in fns]
            obs = [results.get(c["id"]) for c in m["tool_calls"]]  # none: the run ended on this call
            steps.append((reasoning or text, calls, obs[0] if len(obs) == 1 else None if obs == [None] * len(obs)
                          else obs))
        else:
            nxt = messages[i + 1] if i + 1 < len(messages) else None
            steps.append((reasoning, text, nxt["content"] if nxt and nxt["role"] == "user" else None))
    return steps


def read_atif(doc: dict[str, Any]) -> list[tuple]:
    steps: list[tuple] = []
    for k, s in enumerate(doc["steps"]):
        if s["source"] == "user" and steps and isinstance(steps[-1][1], str) and steps[-1][2] is None:
            steps[-1] = (*steps[-1][:2], s["message"])
        if s["source"] != "agent":
            continue
        results = (s.get("observation") or {}).get("results") or []
        reasoning, message = s.get("reasoning_content") or "", s.get("message") or ""
        calls = s.get("tool_calls") or []
        if calls:
            by_id = {r.get("source_call_id"): r["content"] for r in results}
            if len(results) == len(calls) and all(c["tool_call_id"] in by_id for c in calls):
                obs: Any = [by_id[c["tool_call_id"]] for c in calls]
                obs = obs[0] if len(obs) == 1 else obs
            else:  # one result for the step's calls
                obs = "\n".join(r["content"] for r in results)
            steps.append((reasoning or message, [(c["function_name"], c["arguments"]) for c in calls], obs))
        else:
            steps.append((reasoning, message, "\n".join(r["content"] for r in results) if results else None))
    return steps


RESULT_FOR = re.compile(r"Tool result for (\S+)")  # tbench's tool result steps name their call so


def tbench_results(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """tbench's tool result steps, in file order."""
    return [s for s in doc["steps"] if s["source"] == "system" and RESULT_FOR.fullmatch(s.get("message") or "")]


def read_tbench(doc: dict[str, Any]) -> list[tuple]:
    """OpenAgents tbench's ATIF (its ``crates/harbor/src/bin/tbench.rs``): every text block of the model is an agent
    step, every tool result a system step written when it came back, and the calls seen so far ride on the next
    agent step. So a call was made where its result is, after the last text written before that result."""
    calls = {c["id"]: (c["name"], c["arguments"]) for s in doc["steps"] if s["source"] == "agent"
             for c in s.get("tool_calls") or []}
    steps: list[tuple] = []
    text = None
    for s in doc["steps"]:
        if s in tbench_results(doc):
            steps.append((text or "", [calls[RESULT_FOR.fullmatch(s["message"])[1]]], s["observation"]["content"]))
            text = None
        elif s["source"] == "agent":
            if text is not None:
                steps.append(("", text, None))
            text = s["message"]
    return steps + ([("", text, None)] if text is not None else [])


def read_inspect(path: Path) -> list[list[tuple]]:
    log_module = pytest.importorskip("inspect_ai.log")
    runs = []
    for sample in log_module.read_eval_log(str(path)).samples:
        results = {m.tool_call_id: m.text for m in sample.messages if m.role == "tool"}
        steps, msgs = [], sample.messages
        for i, m in enumerate(msgs):
            if m.role != "assistant":
                continue
            parts = [] if isinstance(m.content, str) else m.content
            reasoning = "\n\n".join(p.reasoning for p in parts if p.type == "reasoning" and not p.redacted)
            text = m.content if isinstance(m.content, str) else "\n".join(p.text for p in parts if p.type == "text")
            if m.tool_calls:
                obs = [results[c.id] for c in m.tool_calls]
                steps.append((reasoning or text, [(c.function, dict(c.arguments)) for c in m.tool_calls],
                              obs[0] if len(obs) == 1 else obs))
            else:
                nxt = msgs[i + 1] if i + 1 < len(msgs) else None
                steps.append((reasoning, text, nxt.text if nxt is not None and nxt.role == "user" else None))
        runs.append(steps)
    return runs


def actual(traj) -> list[tuple]:
    out = []
    for s in traj.steps:
        action = s.action.text if s.action.is_text else [(c.tool, dict(c.arguments)) for c in s.action.calls]
        out.append((s.reasoning, action, list(s.observation) if isinstance(s.observation, tuple) else s.observation))
    return out


def imported(source: Path, tmp_path: Path, fmt: str = "auto"):
    """Import with no code, then ``validate --strict`` (no problem, no unknown field, no undeclared tool)."""
    out = tmp_path / "t.jsonl"
    report = import_runs(fmt, source, out, strict=True)
    assert report.written and not report.problems, report.problems
    strict = validate_file(out, strict=True)
    assert not strict.problems and not strict.unknown_fields and not strict.warnings
    return report, load_trajectories(out)


# ---- the corpus


@pytest.mark.parametrize("source", samples("swe-agent"), ids=lambda p: p.name)
def test_swe_agent_samples_equal_an_independent_reading(source, tmp_path):
    doc = json.loads(source.read_text(encoding="utf-8"))
    report, (traj,) = imported(source, tmp_path)
    assert report.formats == {"swe-agent": 1}
    assert actual(traj) == read_swe_agent(doc)
    assert traj.final_answer == (doc.get("info") or {}).get("submission") and traj.outcome == {}


@pytest.mark.parametrize("source", samples("mini-swe-agent"), ids=lambda p: p.name)
def test_mini_swe_agent_samples_equal_an_independent_reading(source, tmp_path):
    doc = json.loads(source.read_text(encoding="utf-8"))
    messages = doc["messages"] if isinstance(doc, dict) else doc
    report, (traj,) = imported(source, tmp_path)
    assert report.formats == {"openai": 1}  # mini-swe-agent writes OpenAI-style messages
    assert actual(traj) == read_chat(messages)
    assert traj.system_prompt == messages[0]["content"] and traj.task == messages[1]["content"]
    if messages[-1]["role"] == "exit":  # 2.x: the loop's last message, its submission the final answer
        assert traj.final_answer == messages[-1]["content"]
        assert report.dropped["messages[] (role exit: the agent loop's end; its content is the final answer)"] == 1


@pytest.mark.parametrize("source", samples("tau2"), ids=lambda p: p.name)
def test_tau2_samples_equal_an_independent_reading(source, tmp_path):
    doc = json.loads(source.read_text(encoding="utf-8"))
    sims = doc["simulations"] if isinstance(doc, dict) else doc
    report, trajs = imported(source, tmp_path)
    assert report.formats == {"tau2": len(sims)}
    for sim, traj in zip(sims, trajs, strict=True):
        assert actual(traj) == read_chat(sim["messages"], results_by="id")
        assert traj.outcome == {"reward": sim["reward_info"]["reward"]}
        policy = doc["info"]["environment_info"]["policy"] if isinstance(doc, dict) else sim["policy"]
        assert traj.system_prompt == policy
        for key in sim["reward_info"]:  # the checks behind the reward: counted, by path
            if key != "reward" and sim["reward_info"][key] not in (None, [], {}, ""):
                assert any(d.endswith(f"reward_info.{key}") for d in report.dropped), key
    if isinstance(doc, dict):
        assert all(report.dropped[f"tasks[].{k}"] for t in doc.get("tasks", []) for k in t
                   if k not in ("id", "user_scenario") and t[k] not in (None, [], {}, ""))
        n_requestor = sum(1 for m in sims[0]["messages"] for c in m.get("tool_calls") or [] if "requestor" in c)
        assert report.dropped["simulations[].messages[].tool_calls[].requestor"] == n_requestor


@pytest.mark.parametrize("source", samples("atif"), ids=lambda p: p.name)
def test_atif_samples_equal_an_independent_reading(source, tmp_path):
    doc = json.loads(atif_file(source).read_text(encoding="utf-8"))
    report, (traj,) = imported(source, tmp_path)  # the run's folder, as a user names it
    assert report.formats == {"atif": 1}
    assert actual(traj) == (read_tbench(doc) if tbench_results(doc) else read_atif(doc))
    assert traj.extra["metadata"]["agent"] == doc["agent"]


def test_a_folder_of_atif_runs_imports_each_producers_layout_and_leaves_nothing_unread(tmp_path):
    """Harbor trials (``TRIAL/agent/trajectory.json``) and tbench's output folder (``trajectory.json`` at its
    top) side by side: the folder imports one run per trajectory file, none listed as not read."""
    runs = samples("atif")
    report = import_runs("atif", REAL / "atif", tmp_path / "t.jsonl", strict=True)
    assert report.converted == len(runs) == 4 and report.not_read == []
    by_id = {t.task_id: t for t in load_trajectories(tmp_path / "t.jsonl")}
    assert len(by_id) == len(runs)
    for run in runs:
        (tmp_path / run.name).mkdir()
        _, (alone,) = imported(run, tmp_path / run.name)
        assert by_id[alone.task_id] == alone


TBENCH = REAL / "atif" / "openagents-tbench_regex-log" / "trajectory.json"


def test_tbench_results_before_their_calls_answer_them_as_the_turns_happened(tmp_path):
    """OpenAgents tbench (claude-code): the results of steps 3-6 come before the agent step 7 that carries their
    calls, and step 7's text was written after them ("I see there's a permission issue"): each call is a step of
    its own where its result is, and a failed result is an error."""
    doc = json.loads(TBENCH.read_text(encoding="utf-8"))
    report, (traj,) = imported(TBENCH, tmp_path)
    results = tbench_results(doc)
    called = [s for s in traj.steps if s.action.calls]
    assert len(called) == len(results) == sum(len(s.get("tool_calls") or []) for s in doc["steps"])
    assert [s.extra.get("is_error", False) for s in called] == [not r["observation"]["result"]["success"]
                                                               for r in results]
    assert called[-1].reasoning == doc["steps"][6]["message"]  # step 7's text: before the call after it
    assert called[-1].action.calls[0].arguments["file_path"] == "/tmp/tmp.Gtrekx29jH/regex.txt"
    assert len(traj.steps) == doc["final_metrics"]["total_steps"]  # claude-code's own count of model turns
    assert traj.task == doc["steps"][0]["message"] and traj.final_answer == doc["steps"][-1]["message"]
    assert traj.task_id == doc["session_id"] and traj.outcome == {}  # extra.success: claude-code's exit status
    assert traj.extra["metadata"]["extra"] == doc["extra"]
    for key in ("output", "error"):  # the copy of content in result: counted, one per result step holding it
        n = sum(1 for r in results if r["observation"]["result"].get(key) == r["observation"]["content"])
        assert report.dropped[f"steps[].observation.result.{key} (the same text as content)"] == n > 0


def test_a_tbench_result_for_no_call_is_refused_naming_file_step_and_field(tmp_path):
    doc = json.loads(TBENCH.read_text(encoding="utf-8"))
    doc["steps"][2]["message"] = "Tool result for toolu_nowhere"
    source = tmp_path / "trajectory.json"
    source.write_text(json.dumps(doc), encoding="utf-8")
    out = tmp_path / "t.jsonl"
    report = import_runs("auto", source, out)
    assert not report.written and not out.exists()
    assert report.problems == [f"{source}:1: steps[2].message: tool result for call id 'toolu_nowhere' answers no "
                               "tool call of the run"]


@pytest.mark.parametrize("source", samples("inspect"), ids=lambda p: p.name)
def test_inspect_samples_equal_an_independent_reading(source, tmp_path):
    runs = read_inspect(source)
    report, trajs = imported(source, tmp_path)
    assert report.formats == {"inspect": len(runs)}
    assert [actual(t) for t in trajs] == runs
    log = pytest.importorskip("inspect_ai.log").read_eval_log(str(source))
    letters = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}
    for sample, traj in zip(log.samples, trajs, strict=True):
        if not sample.scores:  # a sample the log holds unscored
            assert traj.outcome == {}
            continue
        value = next(iter(sample.scores.values())).value
        assert traj.outcome.get("reward") == (letters[value] if isinstance(value, str) else float(value))


def test_the_corpus_has_three_files_from_two_producers_per_format():
    sources = (REAL / "SOURCES.md").read_text(encoding="utf-8")
    for fmt in ("swe-agent", "mini-swe-agent", "tau2", "atif", "inspect"):
        files = samples(fmt)
        assert len(files) >= 3, fmt
        assert all(f"`{fmt}/{f.name}" in sources for f in files), fmt  # each one's source is named


# ---- the shapes real producers write


SWE_FC = REAL / "swe-agent" / "gpt-4o_6e44b9__sweagenttestrepo-1c2844.traj"
REPLAY_FC = REAL / "swe-agent" / "replay_function-calling_marshmallow-1867.traj"


def test_an_extra_summary_step_costs_one_steps_structure_not_the_runs(tmp_path):
    """SWE-agent 1.1 writes a blank-action summary step with no history message of its own (the issue's 43
    of 64 runs): on the real function-calling replay with such a step inserted, every other step keeps the
    structured call the model wrote."""
    doc = json.loads(REPLAY_FC.read_text(encoding="utf-8"))
    summary = {**doc["trajectory"][-1], "action": "", "thought": "I fixed the rounding; the patch is ready.",
               "observation": ""}
    doc["trajectory"].insert(len(doc["trajectory"]) - 1, summary)
    source = tmp_path / "run.traj"
    source.write_text(json.dumps(doc), encoding="utf-8")
    report, (traj,) = imported(source, tmp_path)
    steps = actual(traj)
    calls = [s for s in steps if isinstance(s[1], list)]
    assert len(calls) == len(doc["trajectory"]) - 1 and all(a[0][0] != "bash" or "command" in a[0][1] for _, a, _ in calls)
    assert [a for _, a, _ in calls] == [a for _, a, _ in read_swe_agent(doc) if isinstance(a, list)]
    assert steps[-2] == ("", "I fixed the rounding; the patch is ready.", "")
    assert {"edit", "create", "open"} <= {a[0][0] for _, a, _ in calls}  # the replay's own tools, as called
    assert not any("no structured call" in d for d in report.dropped)  # no step lost its call


def test_thinking_in_a_history_message_is_the_steps_reasoning(tmp_path):
    doc = json.loads(SWE_FC.read_text(encoding="utf-8"))
    turn = next(m for m in doc["history"] if m.get("role") == "assistant")
    turn["thinking_blocks"] = [{"type": "thinking", "thinking": "The colon is missing.", "signature": "c2ln"}]
    source = tmp_path / "run.traj"
    source.write_text(json.dumps(doc), encoding="utf-8")
    _, (traj,) = imported(source, tmp_path)
    assert traj.steps[0].reasoning == "The colon is missing."
    assert traj.steps[0].extra["assistant_text"] == doc["trajectory"][0]["thought"]  # the visible thought, kept


def test_an_xml_call_in_the_response_is_the_steps_call(tmp_path):
    """SWE-agent 1.0 with xml_function_calling (SWE-agent-LM): the call is only in the step's response."""
    doc = json.loads(SWE_FC.read_text(encoding="utf-8"))
    doc["history"] = [m for m in doc["history"] if m.get("role") != "assistant"]
    step = doc["trajectory"][0]
    step["response"] = (f"{step['thought']}\n\n<function=str_replace_editor>\n<parameter=command>view</parameter>\n"
                        "<parameter=path>/repo/a.py</parameter>\n<parameter=view_range>[1, 5]</parameter>\n"
                        "</function>")
    source = tmp_path / "run.traj"
    source.write_text(json.dumps(doc), encoding="utf-8")
    _, (traj,) = imported(source, tmp_path)
    assert actual(traj)[0][1] == [("str_replace_editor", {"command": "view", "path": "/repo/a.py",
                                                          "view_range": "[1, 5]"})]
    assert actual(traj) == read_swe_agent(doc)


def test_a_planted_field_holding_text_inside_a_tool_call_is_reported_and_refused_under_strict(tmp_path):
    doc = json.loads((REAL / "mini-swe-agent" / "deepseek_2.3_astropy__astropy-12907.traj.json").read_text("utf-8"))
    call = doc["messages"][2]["tool_calls"][0]
    call["thought"] = "the model's own note on this call"
    _counted_then_refused_under_strict(doc, tmp_path / "run.traj.json", "auto", "openai",
                                       "messages[].tool_calls[].thought", "unknown")


def _counted_then_refused_under_strict(doc: dict, source: Path, fmt: str, mapper: str, field: str, why: str) -> None:
    """``doc`` written to ``source`` imports with ``field`` counted once (``field (why)``), and ``--strict`` refuses
    it with the one-line message naming file, line and field."""
    source.write_text(json.dumps(doc), encoding="utf-8")
    report = import_runs(fmt, source, source.with_name("t.jsonl"))
    assert report.written and report.dropped[f"{field} ({why})"] == 1
    strict = import_runs(fmt, source, source.with_name("s.jsonl"), strict=True)
    assert not strict.written and strict.problems == [
        f"{source}:1: {field}: field holding text, dropped ({mapper} does not map it; 1 such field(s)); "
        "--strict refuses a text it would lose"]


def test_openai_on_an_anthropic_file_refuses_every_run(tmp_path):
    source = SAMPLES / "anthropic.jsonl"
    report = import_runs("openai", source, tmp_path / "t.jsonl")
    assert not report.converted and not report.written
    n_runs = sum(1 for line in source.read_text(encoding="utf-8").splitlines() if line.strip())
    assert len(report.problems) == n_runs
    assert all("content part: a block of Anthropic's turn structure" in p for p in report.problems)
    strict = import_runs("openai", source, tmp_path / "s.jsonl", strict=True)
    assert not strict.written


def test_one_atif_result_for_several_calls_is_the_steps_observation(tmp_path):
    """Harbor's Terminus-2 writes one result (the terminal screen) for a step's N keystroke calls, without
    source_call_id: kept whole as the step's observation and marked, never refused."""
    doc = json.loads((REAL / "atif" / "gemini-cli_3d-scan-calc" / "agent" / "trajectory.json").read_text("utf-8"))
    step = doc["steps"][1]  # two calls, two results with ids: make it the Terminus-2 shape
    screen = "\n".join(r["content"] for r in step["observation"]["results"])
    step["observation"] = {"results": [{"content": screen}]}
    trial = tmp_path / "trial" / "agent"
    trial.mkdir(parents=True)
    (trial / "trajectory.json").write_text(json.dumps(doc), encoding="utf-8")
    report, (traj,) = imported(trial.parent, tmp_path)
    assert traj.steps[0].observation == screen and traj.steps[0].extra["observation_scope"] == "step"
    assert len(traj.steps[0].action.calls) == 2 and actual(traj) == read_atif(doc)


def test_agent_fields_on_a_user_or_system_step_are_counted_and_refused_under_strict(tmp_path):
    """Only a user or system step's message is kept: a tool result it carries (as OpenAgents' MechaCoder
    orchestrator writes on system steps) is counted by path, a problem under --strict."""
    doc = json.loads((REAL / "atif" / "rfc_example" / "agent" / "trajectory.json").read_text("utf-8"))
    doc["steps"][0]["observation"] = {"results": [{"content": "tests failed"}]}
    _counted_then_refused_under_strict(doc, tmp_path / "trajectory.json", "atif", "atif", "steps[].observation",
                                       "on a user step")


def test_import_help_names_every_format():
    from typer.testing import CliRunner

    from interp.data.importers.registry import FORMATS
    from interp.pipelines.cli import app

    result = CliRunner().invoke(app, ["import", "--help"], env={"COLUMNS": "300"})
    text = re.sub(r"\s+", " ", result.output)
    assert all(f in text for f in FORMATS) and ".eval" in text and "inspect" in text


def test_validate_notes_calls_with_no_declared_tools(tmp_path):
    _, (traj,) = imported(SWE_FC, tmp_path)
    report = validate_file(tmp_path / "t.jsonl", strict=True)
    assert any("calls tools but declares none" in n for n in report.notes) and not traj.tools


GEMINI_ATIF = REAL / "atif" / "gemini-cli_3d-scan-calc" / "agent" / "trajectory.json"
RFC_ATIF = REAL / "atif" / "rfc_example" / "agent" / "trajectory.json"


def test_a_finishing_step_whose_one_result_names_only_the_keystroke_call_is_the_steps_observation(tmp_path):
    """Harbor's Terminus-2 finishing step: a keystroke call plus ``mark_task_complete``, and one result (the
    terminal screen) naming only the keystroke call. No public Terminus-2 ATIF file was found; the real gemini-cli
    step (two calls, two results) is re-shaped into it: the second call becomes mark_task_complete, one result
    stays. Kept whole as the step's observation, marked, both calls kept, never refused (also under --strict)."""
    doc = json.loads(GEMINI_ATIF.read_text("utf-8"))
    step = doc["steps"][1]
    step["tool_calls"][1] = {"tool_call_id": "call_3_task_complete", "function_name": "mark_task_complete",
                             "arguments": {}}
    step["observation"]["results"] = step["observation"]["results"][:1]
    trial = tmp_path / "trial" / "agent"
    trial.mkdir(parents=True)
    (trial / "trajectory.json").write_text(json.dumps(doc), encoding="utf-8")
    report, (traj,) = imported(trial.parent, tmp_path)
    first = traj.steps[0]
    assert first.observation == step["observation"]["results"][0]["content"]
    assert first.extra["observation_scope"] == "step"
    assert [c.tool for c in first.action.calls] == ["read_file", "mark_task_complete"]
    assert actual(traj) == read_atif(doc)
    assert report.dropped["steps[].observation (results not one per call: kept whole as the step's observation, "
                          "observation_scope step)"] == 1


@pytest.mark.parametrize("version", ["ATIF-v2.0", "2.1"])
def test_an_unknown_atif_major_version_is_refused_naming_it(tmp_path, version):
    doc = json.loads(RFC_ATIF.read_text("utf-8"))
    doc["schema_version"] = version
    doc.setdefault("session_id", "s")
    source = tmp_path / "trajectory.json"
    source.write_text(json.dumps(doc), encoding="utf-8")
    report = import_runs("atif", source, tmp_path / "t.jsonl")
    assert not report.written
    assert report.problems == [f"{source}:1: schema_version: ATIF major version 2 ({version}) is not supported; "
                               "this importer reads ATIF-v1.0 ... v1.x"]


def test_embedded_atif_subagents_are_runs_linked_to_their_parent(tmp_path):
    """ATIF v1.7 ``subagent_trajectories``: each embedded trajectory is a run of its own, task id
    ``PARENT/subagent-SESSION``, ``metadata.parent_task_id`` the parent's, no reward of its own. No public file
    with embedded subagents was found: the real RFC example embeds the real gemini-cli run (re-shaped so)."""
    parent = json.loads(RFC_ATIF.read_text("utf-8"))
    sub = json.loads(GEMINI_ATIF.read_text("utf-8"))
    parent["schema_version"] = "ATIF-v1.7"
    parent["subagent_trajectories"] = [sub]
    trial = tmp_path / "trial"
    (trial / "agent").mkdir(parents=True)
    (trial / "agent" / "trajectory.json").write_text(json.dumps(parent), encoding="utf-8")
    (trial / "verifier").mkdir()
    (trial / "verifier" / "reward.txt").write_text("1\n", encoding="utf-8")
    report, (main, child) = imported(trial, tmp_path)
    assert report.formats == {"atif": 2}
    assert actual(main) == read_atif(parent) and main.outcome == {"reward": 1.0}
    assert actual(child) == read_atif(sub) and child.outcome == {}
    assert child.task_id == f"{main.task_id}/subagent-{sub['session_id']}"
    assert child.extra["metadata"]["parent_task_id"] == main.task_id
    assert child.extra["metadata"]["agent"] == sub["agent"]
    assert "subagent_trajectories" not in main.extra["metadata"]
