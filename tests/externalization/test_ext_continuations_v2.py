"""Controlled continuations: hide_stderr, the end-of-action stop rule, truncation counted apart, the measured limit."""

from __future__ import annotations

import json

import pytest

from interp.continuations.generation import action_end, finish_turn, measured_max_new_tokens, turn_lengths
from interp.continuations.run import (
    CONTINUATION_CONDITIONS,
    WHAT,
    RunSettings,
    continue_states,
    markdown_table,
    summarize,
)
from interp.continuations.scoring import reacquires
from interp.continuations.states import load_states
from interp.data.conditions import CONDITIONS, HIDDEN_STDERR, apply_condition, stderr_spans, validate_condition
from interp.data.parse import ParsedTurn, parse_turn
from interp.data.render import fallback_tool_call_text
from interp.data.trajectory import Action, ToolCall, load_trajectories

from ._support import DEMO, make_trajectory

pytestmark = pytest.mark.unit

STDOUT = "collected 3 items\n\ntests/test_dates.py ..F\n1 failed, 2 passed in 0.12s"
STDERR = "Traceback (most recent call last):\n  File \"x.py\", line 3\nValueError: bad offset '+25:00'"


def _run_step(observation):
    return make_trajectory("Fix the date parser.", [
        {"reasoning": "Run the tests.", "action": {"tool": "run_shell", "arguments": {"command": "pytest -q"}},
         "observation": observation},
        {"reasoning": "Read the parser.", "action": {"tool": "read_file", "arguments": {"path": "dates.py"}},
         "observation": "def parse(s): ..."}])


def test_hide_stderr_keeps_stdout_byte_identical_in_a_sectioned_observation():
    obs = f"exit code: 1\nSTDOUT:\n{STDOUT}\nSTDERR:\n{STDERR}\n"
    traj = _run_step(obs)
    edited, log = apply_condition("hide_stderr", traj, 1)
    new = edited.steps[0].observation
    assert new == f"exit code: 1\nSTDOUT:\n{STDOUT}\nSTDERR:\n{HIDDEN_STDERR}\n"
    assert new[:new.index("STDERR:")] == obs[:obs.index("STDERR:")]  # stdout and everything before: byte-identical
    assert STDERR not in new and [(e.what, e.op, e.chars) for e in log.edits] == [("stderr", "hidden", len(STDERR))]
    assert edited.steps[1] == traj.steps[1] and log.params == {"step": 1}
    stderr_first = f"STDERR: {STDERR}\nSTDOUT:\n{STDOUT}"  # stderr before stdout, content on the header line
    out = apply_condition("hide_stderr", _run_step(stderr_first), 1)[0].steps[0].observation
    assert out == f"STDERR: {HIDDEN_STDERR}\nSTDOUT:\n{STDOUT}"


def test_hide_stderr_on_a_json_observation_and_parallel_calls():
    obs = json.dumps({"exit_code": 1, "stdout": STDOUT + ' "stderr": not a key', "stderr": STDERR})
    edited, log = apply_condition("hide_stderr", _run_step(obs), 1)
    new = edited.steps[0].observation
    assert json.loads(new) == {**json.loads(obs), "stderr": HIDDEN_STDERR}
    assert new.startswith(obs[:obs.index('"stderr": "Traceback')])  # the text before the stderr value is unchanged
    traj = make_trajectory("t", [{"reasoning": "Run both.", "action": {"calls": [
        {"tool": "run_shell", "arguments": {"command": "make"}}, {"tool": "run_shell", "arguments": {"command": "ls"}}]},
        "observation": [f"STDOUT:\nok\nSTDERR:\n{STDERR}", "a.py b.py"]}])
    edited, log = apply_condition("hide_stderr", traj, 1)
    assert edited.steps[0].observation == (f"STDOUT:\nok\nSTDERR:\n{HIDDEN_STDERR}", "a.py b.py")
    assert [e.block for e in log.edits] == [0] and "observation 1: no error stream" in log.notes[0]


def test_hide_stderr_leaves_observations_without_an_error_stream_whole():
    plain = "E   ValueError: bad offset\n1 failed"  # error text, but no recognised stream structure
    traj = _run_step(plain)
    edited, log = apply_condition("hide_stderr", traj, 1)
    assert edited is traj and not log.edits and log.notes
    assert stderr_spans("STDOUT:\nonly output\nSTDERR:\n\n") == []  # an empty error stream hides nothing
    assert stderr_spans(json.dumps({"stdout": "x", "stderr": ""})) == []
    assert "hide_stderr" in CONDITIONS and "hide_stderr" in CONTINUATION_CONDITIONS
    validate_condition("hide_stderr", {"step": 1})
    with pytest.raises(ValueError, match="not in the history"):
        apply_condition("hide_stderr", traj, 1, step=2)


def test_action_end_and_truncation_rules():
    call = fallback_tool_call_text("read_file", {"path": "a.py"})
    assert action_end("<think>\nplan\n</think>\n\n" + call) is None  # a parallel call may still follow
    assert action_end(call + "\n<tool_c") is None
    assert action_end(call + "\n" + call) is None
    assert action_end(call + "\nDone.") == len(call)
    assert action_end(call + "\n<tool_response>\nok") == len(call)
    assert action_end("<think>\nhmm\n</think>\n<tool_response>x") == len("<think>\nhmm\n</think>\n")

    def decode(ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids)

    def run(text, limit, stop=()):
        return finish_turn(decode, [ord(c) for c in text], stop, limit)

    cut = run("<think>\nthe plan is", 19)  # limit (19 tokens) reached inside the reasoning
    assert (cut["truncated"], cut["stop_reason"], cut["stopped"]) == (True, "max_new_tokens", False)
    done = run("<think>\nx\n</think>\n" + call, len("<think>\nx\n</think>\n" + call))  # limit right after the action
    assert (done["truncated"], done["stop_reason"]) == (False, "max_new_tokens")
    extra = run(call + "\nI will now wait for the result", 500)
    assert (extra["text"], extra["stop_reason"], extra["truncated"]) == (call, "action_end", False)
    eot = run("Fixed it.\x01more", 500, stop=[1])
    assert (eot["text"], eot["stop_reason"], eot["truncated"]) == ("Fixed it.", "end_of_turn", False)
    half = run(call + "\n<tool_call>\n{\"name\": \"read_fi", 40)  # a second parallel call cut off
    assert half["truncated"]


def test_truncated_turns_are_counted_apart_from_wrong_actions(tmp_path, tiny_sensor, mini_trajectory, monkeypatch):
    """Scripted model: cut off under delete_all_reasoning, a wrong action under full, right otherwise."""
    states_path = tmp_path / "states.jsonl"
    states_path.write_text(json.dumps({"task_id": "mini-code-1", "after_step": 1, "rubric": {
        "next_tool": "read_file", "args_match": ["dates\\.py"]}}) + "\n")
    states = load_states(states_path, [mini_trajectory])

    def scripted(sensor, input_ids, max_new_tokens, seed=None, temperature=0.7, top_p=1.0, prompt=None):
        prompt = sensor.tokenizer.decode(input_ids)
        if "run the tests first" not in prompt:  # the reasoning of step 1 was deleted
            return {"text": "<think>\nLet me think about this very care", "n_new_tokens": max_new_tokens,
                    "stopped": False, "truncated": True, "stop_reason": "max_new_tokens"}
        text = fallback_tool_call_text("read_file", {"path": "setup.py" if seed is None else "utils/dates.py"})
        return {"text": text, "n_new_tokens": 9, "stopped": True, "truncated": False, "stop_reason": "action_end"}

    monkeypatch.setattr("interp.continuations.run.generate_turn", scripted)
    doc = continue_states(tiny_sensor, states, [mini_trajectory], tmp_path / "run",
                          RunSettings(conditions=("full", "delete_all_reasoning"), samples=1), progress=False)
    assert doc["what"] == WHAT and "not an agent's final task score" in WHAT
    settings = doc["settings"]
    assert settings["max_new_tokens"] % 64 == 0 and settings["max_new_tokens_source"].startswith("measured: p95")
    full, deleted = doc["summary"]["full"], doc["summary"]["delete_all_reasoning"]
    assert (full["truncated"], full["parse_failures"], full["n_scored_states"]) == (0, 0, 1)
    assert full["mean_score"] == pytest.approx(0.75)  # greedy wrong file (0.5), sampled right (1.0)
    assert (deleted["truncated"], deleted["truncation_rate"], deleted["parse_failures"]) == (2, 1.0, 0)
    assert deleted["mean_score"] is None and deleted["n_scored_states"] == 0 and deleted["ci"] is None
    assert deleted["mean_score_truncated_as_zero"] == 0.0
    rows = [r for r in doc["rows"] if r["condition"] == "delete_all_reasoning"]
    assert all(r["truncated"] and r["score"] is None and not r["parse_failure"] for r in rows)
    md = markdown_table(doc)
    assert "not an agent's final task score" in md and "| delete_all_reasoning | 1 (0) | 2 | - |" in md


def test_summary_counts_truncated_rows_apart():
    rows = [{"condition": "full", "state_id": s, "task_id": t, "sample": smp, "score": sc, "parse_failure": pf,
             "truncated": tr, "reacquired": None}
            for s, t, smp, sc, pf, tr in [("a", "T1", "greedy", 1.0, False, False), ("a", "T1", 0, None, False, True),
                                          ("b", "T2", "greedy", 0.0, True, False), ("b", "T2", 0, 0.5, False, False)]]
    out = summarize(rows, ["full"], n_boot=100)["full"]
    assert out["mean_score"] == pytest.approx((1.0 + 0.25) / 2)
    assert out["mean_score_truncated_as_zero"] == pytest.approx((0.5 + 0.25) / 2)
    assert (out["truncated"], out["parse_failures"], out["n_generations"]) == (1, 1, 4)
    assert out["truncation_rate"] == out["parse_failure_rate"] == 0.25


def test_reacquisition_rereads_the_file_or_reruns_the_command():
    hidden = Action(calls=(ToolCall("read_file", {"path": "utils/dates.py"}),))
    again = ParsedTurn("ok", None, (ToolCall("read_file", {"path": " utils/dates.py", "start_line": 40}),))
    other = ParsedTurn("ok", None, (ToolCall("read_file", {"path": "utils/other.py"}),))
    assert reacquires(again, hidden) is True and reacquires(other, hidden) is False
    shell = Action(calls=(ToolCall("run_shell", {"command": "pytest -q tests/test_dates.py"}),))
    rerun = parse_turn(fallback_tool_call_text("run_shell", {"command": "pytest  -q tests/test_dates.py",
                                                             "timeout": 60}))
    assert reacquires(rerun, shell) is True
    no_target = Action(calls=(ToolCall("run_tests", {"k": "dates"}),))
    assert reacquires(ParsedTurn("ok", None, (ToolCall("run_tests", {"k": "other"}),)), no_target) is False


def test_measured_limit_fits_the_recorded_turns(tiny_sensor):
    trajs = load_trajectories(DEMO)
    lengths = turn_lengths(trajs, tiny_sensor.tokenizer)
    limit, how = measured_max_new_tokens(trajs, tiny_sensor.tokenizer)
    assert len(lengths) == sum(t.n_steps for t in trajs) == 193
    assert limit % 64 == 0 and sum(n <= limit for n in lengths) >= 0.95 * len(lengths)
    assert limit == 1152 and "p95 of 193 recorded assistant turns" in how  # the value documented in generation.py


def test_a_real_tiny_model_cut_off_is_counted_truncated(tmp_path, tiny_sensor, mini_trajectory):
    states_path = tmp_path / "states.jsonl"
    states_path.write_text(json.dumps({"task_id": "mini-code-1", "after_step": 1,
                                       "rubric": {"next_tool": "read_file"}}) + "\n")
    states = load_states(states_path, [mini_trajectory])
    doc = continue_states(tiny_sensor, states, [mini_trajectory], tmp_path / "run",
                          RunSettings(conditions=("full", "hide_stderr"), samples=0, max_new_tokens=2),
                          progress=False)
    for row in doc["rows"]:  # a random model does not finish an action in 2 tokens
        assert row["n_new_tokens"] == 2 and row["truncated"] and row["stop_reason"] == "max_new_tokens"
        assert row["score"] is None and not row["parse_failure"]
    assert all(s["truncated"] == s["n_generations"] == 1 and s["parse_failures"] == 0
               for s in doc["summary"].values())
