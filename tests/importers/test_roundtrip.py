"""The 25 demo trajectories written out as OpenAI and Anthropic runs (by the formats' documented shapes) import back unchanged.

The writers below are the test's own, from the public message formats: a
step is one assistant turn (reasoning in ``reasoning_content`` / a
``thinking`` block, calls as ``tool_calls`` with JSON-string arguments /
``tool_use`` blocks), then one tool result per call (in reverse order, to
exercise matching by id); a text action's observation is the user's reply.
"""

from __future__ import annotations

import json

import pytest

from interp.data.importers.registry import import_runs
from interp.data.trajectory import load_trajectories

from ._support import DEMO

pytestmark = pytest.mark.unit

DEMO_RUNS = [json.loads(line) for line in DEMO.read_text(encoding="utf-8").splitlines()]


def _calls(action):
    return action.get("calls", [action] if "tool" in action else [])


def _results(step):
    obs = step["observation"]
    return obs if isinstance(obs, list) else [obs]


def as_openai(traj):
    messages = [{"role": "system", "content": traj["system_prompt"]}, {"role": "user", "content": traj["task"]}]
    for t, step in enumerate(traj["steps"]):
        calls = _calls(step["action"])
        msg = {"role": "assistant", "reasoning_content": step["reasoning"],
               "content": None if calls else step["action"]["text"]}
        if calls:
            msg["tool_calls"] = [{"id": f"c{t}_{j}", "type": "function",
                                  "function": {"name": c["tool"], "arguments": json.dumps(c["arguments"])}}
                                 for j, c in enumerate(calls)]
        messages.append(msg)
        if calls and step["observation"] is not None:
            messages += [{"role": "tool", "tool_call_id": f"c{t}_{j}", "content": r}
                         for j, r in reversed(list(enumerate(_results(step))))]
        elif step["observation"] is not None:
            messages.append({"role": "user", "content": step["observation"]})
    tools = [{"type": "function", "function": tool} for tool in traj["tools"]]
    return {"task_id": traj["task_id"], "domain": traj["domain"], "tools": tools, "messages": messages}


def as_anthropic(traj):
    messages = [{"role": "user", "content": [{"type": "text", "text": traj["task"]}]}]
    for t, step in enumerate(traj["steps"]):
        calls = _calls(step["action"])
        blocks = [{"type": "thinking", "thinking": step["reasoning"], "signature": "x"}]
        blocks += ([{"type": "tool_use", "id": f"u{t}_{j}", "name": c["tool"], "input": c["arguments"]}
                    for j, c in enumerate(calls)] if calls else [{"type": "text", "text": step["action"]["text"]}])
        messages.append({"role": "assistant", "content": blocks})
        if calls and step["observation"] is not None:
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"u{t}_{j}", "content": [{"type": "text", "text": r}]}
                for j, r in reversed(list(enumerate(_results(step))))]})
        elif step["observation"] is not None:
            messages.append({"role": "user", "content": step["observation"]})
    tools = [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
             for t in traj["tools"]]
    return {"task_id": traj["task_id"], "domain": traj["domain"], "system": traj["system_prompt"], "tools": tools,
            "messages": messages}


def expected_steps(traj):
    """The demo steps as the importers write them: one call as {"tool", "arguments"}, several as {"calls"}."""
    steps = []
    for step in traj["steps"]:
        calls = _calls(step["action"])
        action = step["action"] if not calls else (calls[0] if len(calls) == 1 else {"calls": calls})
        obs = step["observation"]
        steps.append({"reasoning": step["reasoning"], "action": action,
                      "observation": obs[0] if isinstance(obs, list) and len(obs) == 1 else obs})
    return steps


@pytest.mark.parametrize("fmt, writer", [("openai", as_openai), ("anthropic", as_anthropic)])
def test_demo_runs_round_trip(tmp_path, fmt, writer):
    source = tmp_path / "runs.jsonl"
    source.write_text("".join(json.dumps(writer(t), ensure_ascii=False) + "\n" for t in DEMO_RUNS), encoding="utf-8")
    report = import_runs(fmt, source, tmp_path / "t.jsonl", strict=True)
    assert report.problems == [] and report.converted == len(DEMO_RUNS) == 25
    out = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text(encoding="utf-8").splitlines()]
    for got, want in zip(out, DEMO_RUNS):
        assert {k: got[k] for k in ("task_id", "domain", "system_prompt", "task", "tools")} == {
            k: want[k] for k in ("task_id", "domain", "system_prompt", "task", "tools")}
        assert got["steps"] == expected_steps(want), want["task_id"]
    assert len(load_trajectories(tmp_path / "t.jsonl")) == 25
    assert sum("calls" in s["action"] for t in out for s in t["steps"]) > 0  # parallel calls were exercised
