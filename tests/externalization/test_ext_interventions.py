"""Controlled continuations: states validation, rubric scoring, re-acquisition, and end-to-end generation (tiny model; SmolLM2 in test_ext_smollm2.py)."""

from __future__ import annotations

import json

import pytest

from interp.continuations.run import CONTINUATION_CONDITIONS, RunSettings, continue_states, summarize, write_results
from interp.continuations.scoring import reacquires, score_turn
from interp.continuations.states import StatesError, load_states
from interp.data.parse import ParsedTurn, parse_turn
from interp.data.render import fallback_tool_call_text
from interp.data.trajectory import load_trajectories

from ._support import DEMO, DEMO_STATES, MINI

pytestmark = pytest.mark.unit

MINI_STATES = [
    {"task_id": "mini-code-1", "after_step": 1, "note": "failing test output at b",
     "rubric": {"next_tool": "read_file", "args_match": ["dates\\.py"], "no_repeat": [{"tool": "run_tests"}]}},
    {"state_id": "mini@3", "task_id": "mini-code-1", "after_step": 3,
     "rubric": {"no_repeat": [{"tool": "write_file"}], "writes_code": False}},
]


@pytest.fixture
def mini_states(tmp_path, mini_trajectory):
    path = tmp_path / "states.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in MINI_STATES))
    return load_states(path, [mini_trajectory])


def test_demo_states_are_valid_and_the_recorded_next_action_scores_one():
    trajs = {t.task_id: t for t in load_trajectories(DEMO)}
    states = load_states(DEMO_STATES, list(trajs.values()))
    assert 12 <= len(states) <= 16
    assert {trajs[s.task_id].domain for s in states} == {"code", "office", "security", "web"}
    with_errors = [s for s in states if any(w in (trajs[s.task_id].steps[s.after_step - 1].observation or "")
                                            for w in ("Error", "FAILED", "error", "correct the following"))]
    assert len(with_errors) >= 5
    for s in states:
        traj = trajs[s.task_id]
        recorded = ParsedTurn("ok", None, traj.steps[s.after_step].action.calls)
        assert score_turn(recorded, s.rubric)[0] == 1.0, s.state_id
        hidden = traj.steps[s.hidden_step - 1].action
        assert reacquires(ParsedTurn("ok", None, hidden.calls), hidden) is True
        assert reacquires(recorded, hidden) is False


@pytest.mark.parametrize("record, message", [
    ({"task_id": "nope", "after_step": 1, "rubric": {"next_tool": "read_file"}}, ":1: task_id: unknown task 'nope'"),
    ({"task_id": "mini-code-1", "after_step": 9, "rubric": {"next_tool": "read_file"}},
     ":1: after_step: boundary 9 out of range 1..4"),
    ({"task_id": "mini-code-1", "after_step": 1, "rubric": {"args_match": ["(unclosed"]}},
     ":1: rubric.args_match[0]: bad regex '(unclosed'"),
    ({"task_id": "mini-code-1", "after_step": 1, "rubric": {"no_repeat": [{"tool": "run_tests", "args": "[x"}]}},
     ":1: rubric.no_repeat[0].args: bad regex '[x'"),
    ({"task_id": "mini-code-1", "after_step": 1, "rubric": {"next_tool": "wirte_file"}},
     ":1: rubric.next_tool[0]: tool 'wirte_file' is not declared"),
    ({"task_id": "mini-code-1", "after_step": 2, "hide_step": 3, "rubric": {"next_tool": "read_file"}},
     ":1: hide_step: 3 is not a step of the history 1..2"),
    ({"task_id": "mini-code-1", "after_step": 1, "rubric": {"next_tools": "read_file"}},
     ":1: rubric.next_tools: unknown rubric field"),
    ({"task_id": "mini-code-1", "after_step": 1, "rubric": {}}, ":1: rubric: the rubric has no checks"),
    ({"task_id": "mini-code-1", "after_step": 1}, ":1: rubric: missing"),
])
def test_state_errors_name_file_line_and_field(tmp_path, mini_trajectory, record, message):
    path = tmp_path / "states.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(StatesError) as exc:
        load_states(path, [mini_trajectory])
    assert f"{path}{message}" in str(exc.value)


def test_scoring_is_the_mean_of_the_rubric_checks(mini_states):
    rubric = mini_states[0].rubric  # next_tool, one args_match, one no_repeat
    good = parse_turn(fallback_tool_call_text("read_file", {"path": "utils/dates.py"}))
    assert score_turn(good, rubric)[0] == 1.0
    wrong_file = parse_turn(fallback_tool_call_text("read_file", {"path": "setup.py"}))
    score, checks = score_turn(wrong_file, rubric)
    assert score == pytest.approx(2 / 3) and [c["passed"] for c in checks] == [True, False, True]
    rerun = parse_turn(fallback_tool_call_text("run_tests", {}))
    assert score_turn(rerun, rubric)[0] == 0.0
    garbage = parse_turn("<tool_call>{oops</tool_call>")
    assert score_turn(garbage, rubric) == (0.0, [])


def test_reacquisition_is_the_same_call_up_to_whitespace_and_key_order(mini_trajectory):
    hidden = mini_trajectory.steps[1].action  # read_file utils/dates.py
    same = parse_turn('<tool_call>{"arguments": {"path": " utils/dates.py "}, "name": "read_file"}</tool_call>')
    other = parse_turn('<tool_call>{"name": "read_file", "arguments": {"path": "utils/other.py"}}</tool_call>')
    assert reacquires(same, hidden) is True and reacquires(other, hidden) is False
    assert reacquires(same, mini_trajectory.steps[3].action) is None  # a text action has nothing to re-issue


def test_pipeline_with_a_scripted_model(tmp_path, tiny_sensor, mini_trajectory, mini_states, monkeypatch):
    """A scripted 'model' re-runs the hidden command when its output is hidden, else reads the helper."""
    calls = []

    def scripted(sensor, input_ids, max_new_tokens, seed=None, temperature=0.7, top_p=1.0, prompt=None):
        calls.append(seed)
        prompt = sensor.tokenizer.decode(input_ids)
        if "[output hidden]" in prompt and "FAILED" not in prompt:  # state @1: the failing test output is hidden
            text = fallback_tool_call_text("run_tests", {})
        elif seed is not None and seed % 2:
            text = "<think>\nhmm"  # cut off inside the reasoning: a parse failure
        else:
            text = "<think>\nRead it.\n</think>\n\n" + fallback_tool_call_text("read_file", {"path": "utils/dates.py"})
        return {"text": text, "n_new_tokens": 5, "stopped": True}

    monkeypatch.setattr("interp.continuations.run.generate_turn", scripted)
    settings = RunSettings(samples=2, max_new_tokens=8, seed=3)
    doc = continue_states(tiny_sensor, mini_states, [mini_trajectory], tmp_path, settings, progress=False)
    summary = doc["summary"]
    assert list(summary) == list(CONTINUATION_CONDITIONS)
    assert len(doc["rows"]) == 2 * len(CONTINUATION_CONDITIONS) * 3
    hide = [r for r in doc["rows"] if r["condition"] == "hide_observation" and r["state_id"] == "mini-code-1@1"]
    assert all(r["reacquired"] for r in hide)
    assert summary["hide_observation"]["reacquisition_rate"] > summary["full"]["reacquisition_rate"] == 0.0
    for cond, row in summary.items():
        mine = [r for r in doc["rows"] if r["condition"] == cond]
        assert row["parse_failures"] == sum(r["parse_failure"] for r in mine)
        assert all(r["score"] == 0.0 for r in mine if r["parse_failure"])
    n_calls = len(calls)
    again = continue_states(tiny_sensor, mini_states, [mini_trajectory], tmp_path, settings, progress=False)
    assert len(calls) == n_calls and again["rows"] == doc["rows"]  # resumed from the unit cache
    json_path, md_path = write_results(doc, tmp_path / "out")
    assert "| hide_observation |" in md_path.read_text() and json.loads(json_path.read_text())["schema"]


def test_summary_counts_parse_failures_and_bootstraps_over_tasks():
    rows = [{"condition": "full", "state_id": s, "task_id": t, "sample": smp, "score": sc, "parse_failure": pf,
             "reacquired": rq}
            for s, t, smp, sc, pf, rq in [("a", "T1", "greedy", 1.0, False, False), ("a", "T1", 0, 0.0, True, False),
                                          ("b", "T2", "greedy", 0.5, False, True), ("b", "T2", 0, 0.5, False, None)]]
    out = summarize(rows, ["full"], n_boot=200)["full"]
    assert out["mean_score"] == pytest.approx(0.5) and out["greedy_mean_score"] == pytest.approx(0.75)
    assert (out["parse_failures"], out["n_states"], out["n_tasks"], out["n_generations"]) == (1, 2, 2, 4)
    assert out["reacquisition_rate"] == pytest.approx(1 / 3)
    assert out["ci"][0] <= out["mean_score"] <= out["ci"][1]


def test_end_to_end_on_tiny_qwen_is_deterministic(tmp_path, tiny_sensor, mini_trajectory, mini_states):
    settings = RunSettings(samples=1, max_new_tokens=8, seed=11)
    first = continue_states(tiny_sensor, mini_states, [mini_trajectory], tmp_path / "a", settings, progress=False)
    second = continue_states(tiny_sensor, mini_states, [mini_trajectory], tmp_path / "b", settings, progress=False)
    assert [r["text"] for r in first["rows"]] == [r["text"] for r in second["rows"]]
    assert first["summary"] == second["summary"]
    assert set(first["summary"]) == set(CONTINUATION_CONDITIONS)
    assert {r["sample"] for r in first["rows"]} == {"greedy", 0}
    for cond, row in first["summary"].items():
        mine = [r for r in first["rows"] if r["condition"] == cond]
        assert row["n_generations"] == len(mine) == 4
        assert row["parse_failures"] == sum(r["parse_failure"] for r in mine)
        assert row["reacquisition_rate"] is not None  # both hidden steps are tool calls
    hidden = [r for r in first["rows"] if r["condition"] == "hide_observation"]
    assert all(isinstance(r["reacquired"], bool) for r in hidden)
    assert all(r["edit"]["edits"][0]["what"] == "observation" for r in hidden)
    reseeded = continue_states(tiny_sensor, mini_states, [mini_trajectory], tmp_path / "c",
                               RunSettings(conditions=("full",), samples=1, max_new_tokens=8, seed=12), progress=False)
    greedy = [r["text"] for r in reseeded["rows"] if r["sample"] == "greedy"]
    assert greedy == [r["text"] for r in first["rows"] if r["sample"] == "greedy" and r["condition"] == "full"]
