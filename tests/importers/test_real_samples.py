"""Real public samples (tests/importers/samples/) through the importers, checked field by field against the raw file.

The expected reasoning, actions and observations are read from the raw JSON
by the small readers below, written from the formats' documentation (the
tau2-bench message model, the ATIF RFC), not with the importers' code.
"""

from __future__ import annotations

import json

import pytest

from interp.data.importers.registry import import_runs
from interp.data.trajectory import load_trajectories, validate_file

from ._support import REAL

pytestmark = pytest.mark.unit

TAU2 = REAL / "tau2" / "claude-sonnet-4-5_retail.json"
ATIF = REAL / "atif" / "rfc_example"


def imported(fmt, source, tmp_path, **options):
    out = tmp_path / "t.jsonl"
    report = import_runs(fmt, source, out, **options)
    assert report.written and not report.problems, report.problems
    strict = validate_file(out, strict=True)
    assert not strict.problems and not strict.unknown_fields  # one truth for strictness
    return report, load_trajectories(out)


def tau2_reference(sim):
    """(reasoning, [(tool, arguments)] or text, observation) per agent turn after the first user message."""
    msgs, steps, started = sim["messages"], [], False
    results = {m["id"]: m["content"] for m in msgs if m["role"] == "tool"}
    for m in msgs:
        if m["role"] == "user":
            started = True
        if m["role"] != "assistant" or not started:
            continue
        blocks = (m.get("raw_data") or {}).get("thinking_blocks") or []
        reasoning = "\n\n".join(b["thinking"] for b in blocks)
        if m["tool_calls"]:
            calls = [(c["name"], c["arguments"]) for c in m["tool_calls"]]
            obs = [results[c["id"]] for c in m["tool_calls"]]
            steps.append((reasoning, calls, obs[0] if len(obs) == 1 else obs))
        else:
            nxt = msgs[msgs.index(m) + 1] if msgs.index(m) + 1 < len(msgs) else None
            steps.append((reasoning, m["content"], nxt["content"] if nxt and nxt["role"] == "user" else None))
    return steps


def actual(traj):
    out = []
    for s in traj.steps:
        action = s.action.text if s.action.is_text else [(c.tool, dict(c.arguments)) for c in s.action.calls]
        out.append((s.reasoning, action, list(s.observation) if isinstance(s.observation, tuple) else s.observation))
    return out


def test_tau2_every_step_keeps_its_thinking_and_equals_the_raw_file(tmp_path):
    raw = json.loads(TAU2.read_text(encoding="utf-8"))
    report, (traj,) = imported("auto", TAU2, tmp_path)
    assert report.formats == {"tau2": 1}
    sim = raw["simulations"][0]
    assert actual(traj) == tau2_reference(sim)
    assert all(s.reasoning for s in traj.steps)  # every assistant turn of the sample has thinking: all kept
    assert traj.task == sim["messages"][1]["content"]  # the user's first message, after the greeting
    assert traj.task_id == "14" and traj.domain == "retail" and traj.outcome == {"reward": 1.0}
    assert traj.system_prompt == raw["info"]["environment_info"]["policy"]
    assert traj.extra["metadata"]["agent_llm"] == "claude-sonnet-4-5"
    assert report.dropped["assistant turns before the task (a greeting)"] == 1
    # the provider response of each assistant turn with thinking is dropped, by path, once per turn
    assert report.dropped["simulations[].messages[].raw_data (provider response; its thinking_blocks kept)"] == 4
    assert report.dropped["simulations[].messages[].timestamp"] == len(sim["messages"])
    assert not [d for d in report.dropped if "(unknown)" in d]


def test_tau2_task_scenario_goes_to_metadata_and_trials_get_their_own_ids(tmp_path):
    raw = json.loads(TAU2.read_text(encoding="utf-8"))
    second = json.loads(json.dumps(raw["simulations"][0]))
    second.update(trial=1, task_id="0")
    raw["simulations"][0]["task_id"] = "0"
    raw["simulations"].append(second)
    source = tmp_path / "two.json"
    source.write_text(json.dumps(raw), encoding="utf-8")
    _, trajs = imported("tau2", source, tmp_path)
    assert [t.task_id for t in trajs] == ["0/trial-0", "0/trial-1"]
    assert trajs[0].extra["metadata"]["user_scenario"] == raw["tasks"][0]["user_scenario"]


def atif_reference(doc):
    steps = []
    for s in doc["steps"]:
        if s["source"] != "agent":
            continue
        results = {r.get("source_call_id"): r.get("content") for r in (s.get("observation") or {}).get("results", [])}
        if s.get("tool_calls"):
            calls = [(c["function_name"], c["arguments"]) for c in s["tool_calls"]]
            obs = [results[c["tool_call_id"]] for c in s["tool_calls"]]
            steps.append((s.get("reasoning_content", ""), calls, obs[0] if len(obs) == 1 else obs))
        else:
            steps.append((s.get("reasoning_content", ""), s["message"], None))
    return steps


def test_atif_directory_equals_the_raw_file_and_keeps_the_text_beside_calls(tmp_path):
    doc = json.loads((ATIF / "agent" / "trajectory.json").read_text(encoding="utf-8"))
    report, (traj,) = imported("auto", ATIF, tmp_path)
    assert report.formats == {"atif": 1}
    assert actual(traj) == atif_reference(doc)
    assert traj.task == doc["steps"][0]["message"]  # the prompt is the task, not a step
    assert traj.steps[0].extra["assistant_text"] == doc["steps"][1]["message"]  # beside the calls, with reasoning
    assert traj.final_answer == doc["steps"][2]["message"]
    assert traj.task_id == "rfc_example"  # the trial folder of TRIAL/agent/trajectory.json
    assert traj.extra["metadata"]["agent"]["model_name"] == "gemini-2.5-flash"


def test_atif_reward_from_the_trial_and_prompt_only_runs_are_skipped(tmp_path):
    doc = json.loads((ATIF / "agent" / "trajectory.json").read_text(encoding="utf-8"))
    trial = tmp_path / "runs" / "trial-7"
    (trial / "agent").mkdir(parents=True)
    (trial / "verifier").mkdir()
    (trial / "agent" / "trajectory.json").write_text(json.dumps(doc), encoding="utf-8")
    (trial / "verifier" / "reward.txt").write_text("0.5\n", encoding="utf-8")
    prompt_only = tmp_path / "runs" / "trial-8" / "agent"
    prompt_only.mkdir(parents=True)
    (prompt_only / "trajectory.json").write_text(json.dumps({**doc, "steps": doc["steps"][:1]}), encoding="utf-8")
    out = tmp_path / "t.jsonl"
    report = import_runs("atif", tmp_path / "runs", out)
    (traj,) = load_trajectories(out)
    assert traj.task_id == "trial-7" and traj.outcome == {"reward": 0.5}
    assert report.problems == [f"{prompt_only / 'trajectory.json'}:1: steps: no assistant turn: a trajectory needs "
                               "at least one step"]


SWE = REAL / "swe-agent" / "gpt-4o_6e44b9__sweagenttestrepo-1c2844.traj"


def swe_agent_reference(doc):
    """(reasoning, [(tool, arguments)], observation) per step: the call of the history message with the step's action."""
    by_action = {m["action"]: m["tool_calls"] for m in doc["history"]
                 if m["role"] == "assistant" and m.get("tool_calls")}
    steps = []
    for s in doc["trajectory"]:
        calls = by_action.get(s["action"])
        action = ([(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] if calls
                  else [("bash", {"command": s["action"]})])  # no structured call written: the command line
        steps.append((s["thought"], action, s["observation"]))
    return steps


@pytest.mark.parametrize("fmt", ["swe-agent", "auto"])
def test_swe_agent_function_calling_actions_are_the_models_structured_calls(tmp_path, fmt):
    doc = json.loads(SWE.read_text(encoding="utf-8"))
    report, (traj,) = imported(fmt, SWE, tmp_path, strict=True)
    assert report.formats == {"swe-agent": 1}
    assert actual(traj) == swe_agent_reference(doc)
    written = [[(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m["tool_calls"]]
               for m in doc["history"] if m.get("tool_calls")]
    # the four calls the model wrote, in order; the last step (submit) has no message in history
    assert [a for _, a, _ in actual(traj)][:4] == written and len(traj.steps) == 5
    edit = traj.steps[2].action.calls[0]
    assert (edit.tool, dict(edit.arguments)) == ("edit", {"search": "def division(a: float, b: float) -> float",
                                                          "replace": "def division(a: float, b: float) -> float:",
                                                          "replace-all": False})  # not `edit '...' '...' False`
    assert traj.steps[-1].action.calls[0].arguments == {"command": "submit"}
    assert report.dropped == {  # each field that does not reach the output, by path; the submit step's call
        "trajectory[].action (no structured call: the command line kept as a bash call)": 1,
        "history[].agent": 10, "history[].tool_call_ids": 4,
        "trajectory[].execution_time": 5, "trajectory[].response": 5, "trajectory[].state": 5}
    assert traj.system_prompt == doc["history"][0]["content"] and traj.task == doc["history"][1]["content"]
    assert traj.final_answer == doc["info"]["submission"]
    assert traj.task_id == SWE.name.removesuffix(".traj") and traj.domain == "code"
    assert traj.extra["metadata"]["info"]["exit_status"] == "submitted"
