"""Nothing lost silently: unknown fields, nulls, provider reasoning fields, ids of several runs, SWE-agent tool calls.

Hand-written edge cases; the expected trajectories are written out by hand.
"""

from __future__ import annotations

import json

import pytest

from interp.data.importers import openai, swe_agent
from interp.data.importers.common import RunContext, RunProblem
from interp.data.importers.registry import IdOptions, import_runs
from interp.data.trajectory import load_trajectories

pytestmark = pytest.mark.unit

CALL = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}


def run(*messages):
    return {"task_id": "t", "messages": [{"role": "user", "content": "go"}, *messages]}


def write(path, *records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_an_unknown_field_holding_text_is_counted_and_refused_under_strict(tmp_path):
    planted = run({"role": "assistant", "content": "done", "scratchpad": "the model's hidden plan"})
    source = write(tmp_path / "in.jsonl", planted)
    report = import_runs("openai", source, tmp_path / "t.jsonl")
    assert report.written and report.dropped["messages[].scratchpad (unknown)"] == 1
    assert "messages[].scratchpad (unknown) x1" in report.summary()
    strict = import_runs("openai", source, tmp_path / "s.jsonl", strict=True)
    assert not strict.written and strict.problems == [
        f"{source}:1: messages[].scratchpad: field holding text, dropped (openai does not map it; 1 such "
        "field(s)); --strict refuses a text it would lose"]
    known = write(tmp_path / "k.jsonl", run({"role": "assistant", "content": "done", "name": "bot"}))
    assert import_runs("openai", known, tmp_path / "k_out.jsonl", strict=True).written  # documented drops pass


def test_a_null_content_is_reported_where_it_becomes_an_empty_text(tmp_path):
    record = run({"role": "assistant", "content": None, "tool_calls": [CALL]}, {"role": "tool", "tool_call_id": "c1",
                                                                                "content": None},
                 {"role": "assistant", "content": None})
    ctx = RunContext(file="x", line=1, stem="x")
    out = openai.convert(record, ctx)
    assert out["steps"][0]["observation"] == "" and out["steps"][1]["action"] == {"text": ""}
    # the null content beside tool calls is no text and is not counted
    assert ctx.dropped == {'messages[].content: null as ""': 2}


@pytest.mark.parametrize("field, value", [
    ("reasoning_content", "think"),
    ("reasoning", "think"),
    ("reasoning_details", [{"type": "reasoning.text", "text": "think"}, {"type": "reasoning.encrypted", "data": "x"}]),
    ("thinking_blocks", [{"type": "thinking", "thinking": "think", "signature": "s"}]),
    ("raw_data", {"thinking_blocks": [{"type": "thinking", "thinking": "think", "signature": "s"}]}),
    ("extra", {"response": {"choices": [{"message": {"reasoning_content": "think"}}]}}),  # mini-swe-agent
])
def test_every_provider_reasoning_field_becomes_the_reasoning(field, value):
    ctx = RunContext(file="x", line=1, stem="x")
    out = openai.convert(run({"role": "assistant", "content": "<think>\nmore\n</think>done", field: value}), ctx)
    assert out["steps"][0]["reasoning"] == "think\n\nmore" and out["steps"][0]["action"] == {"text": "done"}
    assert not [d for d in ctx.dropped if "(unknown)" in d]


def test_the_greeting_before_the_task_is_dropped_and_counted():
    ctx = RunContext(file="x", line=1, stem="x")
    record = {"messages": [{"role": "assistant", "content": "Hi! How can I help?"},
                           {"role": "user", "content": "Cancel my order."},
                           {"role": "assistant", "content": "Done."}]}
    out = openai.convert(record, ctx)
    assert out["task"] == "Cancel my order." and len(out["steps"]) == 1
    assert ctx.dropped["assistant turns before the task (a greeting)"] == 1


def test_id_prefix_lets_two_models_share_a_file_and_id_from_picks_the_field(tmp_path):
    a = write(tmp_path / "a.jsonl", {**run({"role": "assistant", "content": "x"}), "meta": {"run": "r1"}})
    assert not import_runs("openai", a, tmp_path / "a_out.jsonl", ids=IdOptions("model-a/")).problems
    assert not import_runs("openai", a, tmp_path / "b_out.jsonl", ids=IdOptions("model-b/")).problems
    joined = tmp_path / "joined.jsonl"
    joined.write_text((tmp_path / "a_out.jsonl").read_text() + (tmp_path / "b_out.jsonl").read_text())
    assert [t.task_id for t in load_trajectories(joined)] == ["model-a/t", "model-b/t"]
    import_runs("openai", a, tmp_path / "c.jsonl", ids=IdOptions(field="meta.run"))
    assert [t.task_id for t in load_trajectories(tmp_path / "c.jsonl")] == ["r1"]
    report = import_runs("openai", a, tmp_path / "d.jsonl", ids=IdOptions(field="meta.missing"))
    assert report.problems == [f"{a}:1: meta.missing: --id-from: the run has no such field holding a string or "
                               "integer"]


def _fc_traj():
    """A function-calling SWE-agent run: structured calls in history, a final summary, a cost-limit exit."""
    old = "    def f():\n        return 1\n"
    args = json.dumps({"command": "str_replace", "path": "/repo/a.py", "old_str": old, "new_str": "x"})
    rendered = "str_replace_editor str_replace /repo/a.py --old_str '    def f():\n'\"'\"'...'"
    history = [
        {"role": "system", "content": "You are SWE-agent."},
        {"role": "user", "content": "Fix f."},
        {"role": "assistant", "content": "Edit f.", "thought": "Edit f.", "action": rendered,
         "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "str_replace_editor",
                                                                       "arguments": args}}]},
        {"role": "tool", "content": "edited", "tool_call_ids": ["t1"]},
        {"role": "assistant", "content": "The fix is in.", "thought": "The fix is in.", "action": ""},
        {"role": "assistant", "content": "Exit due to cost limit", "thought": "Exit due to cost limit",
         "action": ""},
    ]
    trajectory = [
        {"thought": "Edit f.", "action": rendered, "observation": "edited"},
        {"thought": "The fix is in.", "action": "", "observation": ""},
        {"thought": "Exit due to cost limit", "action": "", "observation": "Exited"},
    ]
    return {"trajectory": trajectory, "history": history, "info": {"exit_status": "exit_cost"}}, old


def test_swe_agent_function_calls_thoughts_without_action_and_harness_steps():
    record, old = _fc_traj()
    ctx = RunContext(file="x.traj", line=1, stem="x", single=True)
    out = swe_agent.convert(record, ctx)
    assert out["steps"] == [
        {"reasoning": "Edit f.", "observation": "edited",
         "action": {"tool": "str_replace_editor", "arguments": {"command": "str_replace", "path": "/repo/a.py",
                                                                "old_str": old, "new_str": "x"}}},
        {"reasoning": "", "action": {"text": "The fix is in."}, "observation": ""},
    ]
    assert ctx.dropped == {"trajectory[] (harness step: Exit due to cost limit)": 1, "history[].tool_call_ids": 1}


def test_swe_agent_steps_pair_with_history_by_content_not_by_count():
    record, old = _fc_traj()
    record["history"] = record["history"][:3]  # one assistant message for three steps: the first step's
    ctx = RunContext(file="x.traj", line=1, stem="x", single=True)
    out = swe_agent.convert(record, ctx)
    assert out["steps"][0]["action"] == {"tool": "str_replace_editor", "arguments": {
        "command": "str_replace", "path": "/repo/a.py", "old_str": old, "new_str": "x"}}
    record["history"][2] = {**record["history"][2], "action": "something else"}  # the message is no step's
    ctx = RunContext(file="x.traj", line=1, stem="x", single=True)
    out = swe_agent.convert(record, ctx)
    assert out["steps"][0]["action"] == {"tool": "bash", "arguments": {"command": record["trajectory"][0]["action"]}}
    assert ctx.dropped["history[] (assistant message of no step: its calls and reasoning are not in the output)"] == 1


def test_a_run_of_only_harness_steps_is_a_problem():
    record = {"trajectory": [{"thought": "Exit due to cost limit", "action": "", "observation": ""}],
              "history": [{"role": "user", "content": "Fix f."}]}
    with pytest.raises(RunProblem, match="every step is a harness message"):
        swe_agent.convert(record, RunContext(file="x.traj", line=1, stem="x", single=True))


def test_a_run_whose_every_turn_converts_empty_is_refused(tmp_path):
    """Assistant turns holding only image parts (or any content the format drops) leave nothing: refused, not
    written as empty text actions."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    empty = {"messages": [{"role": "user", "content": "Describe it."},
                          {"role": "assistant", "content": [image]},
                          {"role": "user", "content": "And now?"},
                          {"role": "assistant", "content": [image]}]}
    source = write(tmp_path / "in.jsonl", empty)
    report = import_runs("openai", source, tmp_path / "t.jsonl")
    assert not report.written and report.problems == [
        f"{source}:1: messages: every one of the 2 assistant turns converted to an empty step (no reasoning, call "
        "or text reached the output; the dropped parts are counted): is the format right?"]
