"""`interp study` with an Inspect AI task: each (sample, epoch) is its own session through the proxy (the solver
wrapped to send X-Interp-Session), rewards are the samples' scores, and the table pairs the sessions."""

from __future__ import annotations

import json
import sys

import pytest

from interp.io import safe_stem
from interp.pipelines.cli import main
from interp.serve.runlog import read_requests

from ._support import Stub

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # Inspect AI runs twice: about 30 s

inspect_ai = pytest.importorskip("inspect_ai")
pytest.importorskip("openai")

STEPS = 2
TASK = '''
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import tool


@tool
def add():
    async def execute(x: int, y: int) -> str:
        """Add two numbers.

        Args:
            x: First number.
            y: Second number.
        """
        return f"The sum of {x} and {y} is {x + y}. " * 10

    return execute


@task
def adding():
    return Task(dataset=[Sample(id=f"s{i}", input=f"Add numbers, run {i}.", target="6" if i == 0 else "nine")
                         for i in range(2)],
                solver=[use_tools(add()), generate()], scorer=includes(), epochs=2)
'''


def turns() -> list[dict]:
    out = [{"role": "assistant", "content": "", "reasoning_content": f"Add {k} and 1.\n\nThen check it.",
            "tool_calls": [{"id": f"call_{k}", "type": "function",
                            "function": {"name": "add", "arguments": json.dumps({"x": k, "y": 1})}}]}
           for k in range(STEPS)]
    return [*out, {"role": "assistant", "content": "The answer is 6."}]


def test_an_inspect_task_runs_with_a_session_per_sample_and_epoch(serving, tmp_path, monkeypatch, capsys):
    (tmp_path / "adding.py").write_text(TASK)
    stub = Stub(turns())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [
        "interp", "study", "--upstream", serving(stub.build()), "--out", str(tmp_path / "study"), "--agent",
        f"inspect:{tmp_path / 'adding.py'}@adding", "--policies", "full,observation_masking:m=1", "--n-boot", "50",
        "--tokenizer", "tiny-qwen3.5"])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    assert exc.value.code == 0, out.out + out.err
    doc = json.loads((tmp_path / "study" / "study.json").read_text())
    sessions = ["s0#1", "s0#2", "s1#1", "s1#2"]
    assert doc["tasks"] == sessions  # epochs of one sample are separate tasks
    for policy in doc["policies"]:
        rows = read_requests(tmp_path / "study" / "runs" / safe_stem(policy) / "log")
        assert sorted({r["session"] for r in rows}) == sessions
        assert all(sum(r["session"] == s for r in rows) == STEPS + 1 for s in sessions)
    rewards = {r["task_id"]: r["reward"] for r in doc["per_task"] if r["policy"] == "full"}
    assert rewards == {"s0#1": 1.0, "s0#2": 1.0, "s1#1": 0.0, "s1#2": 0.0}
    masked = next(r for r in doc["table"] if r["policy"] != "full")
    assert masked["refused"] is None and masked["direct_change"] < 0 and masked["amplification"] is not None
