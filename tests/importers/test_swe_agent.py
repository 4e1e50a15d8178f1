"""SWE-agent .traj files -> trajectories: the trajectory list verbatim, prompt from history or the first query."""

from __future__ import annotations

import json

import pytest

from interp.data.importers import swe_agent
from interp.data.importers.common import RunContext, RunProblem

from ._support import SAMPLES

pytestmark = pytest.mark.unit

DIR = SAMPLES / "swe-agent"


def convert(name: str, record=None):
    record = record if record is not None else json.loads((DIR / f"{name}.traj").read_text(encoding="utf-8"))
    ctx = RunContext(file=f"{name}.traj", line=1, stem=name, single=True)
    return swe_agent.convert(record, ctx), record


def test_trajectory_steps_are_kept_verbatim():
    out, raw = convert("demo__calc-1")
    assert out["task_id"] == "demo__calc-1" and out["domain"] == "code" and out["tools"] == []
    assert len(out["steps"]) == 7
    assert out["steps"][1] == {"reasoning": "Now add the call that triggers the crash.",
                               "action": {"tool": "bash", "arguments": {
                                   "command": "edit 1:1\nfrom calc import divide\nprint(divide(1, 0))\nend_of_edit\n"}},
                               "observation": "File updated."}
    assert out["steps"][0]["reasoning"] == ("Let me reproduce the bug first.\n\n"
                                            "I will write a small script that calls divide(1, 0).")
    assert out["system_prompt"].startswith("SETTING: You are an autonomous programmer")
    assert out["task"].startswith("We're currently solving the following issue")  # the demonstration is skipped
    assert out["final_answer"] == raw["info"]["submission"] and out["outcome"] == {}
    assert out["metadata"] == {"environment": "swe_main", "info": raw["info"]}


def test_without_history_the_prompt_comes_from_the_first_query():
    out, _ = convert("demo__slug-2")
    assert out["task"] == "ISSUE:\nslugify(\"Crème Brûlée\") returns \"crème-brûlée\"; it should return \"creme-brulee\"."
    assert out["system_prompt"].startswith("SETTING:")
    assert out["steps"][1] == {"reasoning": "", "action": {"tool": "bash", "arguments": {
        "command": "open text/slug.py\n"}}, "observation": "1:def slugify(s):\n2:    return s.lower().replace(' ', '-')"}


def test_a_thought_with_a_blank_action_is_a_text_action_and_json_observations_are_text():
    _, raw = convert("demo__slug-2")
    raw["trajectory"][-1].update(action="  ", observation={"exit": "cost"})
    thought = raw["trajectory"][-1]["thought"]
    out, _ = convert("x", raw)
    assert out["steps"][-1] == {"reasoning": "", "action": {"text": thought}, "observation": '{"exit": "cost"}'}


@pytest.mark.parametrize("edit, where, message", [
    (lambda r: r.pop("trajectory"), "trajectory", "expected a list of steps, got null"),
    (lambda r: r["trajectory"][2].update(action=None), "trajectory[2].action", "expected the command as a string"),
    (lambda r: r["trajectory"][0].update(query=[{"role": "system", "content": "s"}]), "trajectory[0].query",
     "no user message before the first assistant message"),
])
def test_malformed_runs_name_the_field(edit, where, message):
    _, raw = convert("demo__slug-2")
    edit(raw)
    with pytest.raises(RunProblem) as exc:
        convert("x", raw)
    assert exc.value.where == where and exc.value.message.startswith(message)
