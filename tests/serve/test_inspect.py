"""Inspect AI runs a multi-step tool-using task through the proxy (its OpenAI-compatible provider pointed at
it) to a stub upstream, with and without a policy; `interp tokens --paired` reads the two run logs."""

from __future__ import annotations

import json
import sys

import pytest

from interp.accounting.tokens import parse_policy
from interp.pipelines.cli import main
from interp.schema import check
from interp.serve.app import Proxy
from interp.serve.runlog import PAIRED_FIELDS, read_requests

from ._support import Stub

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # Inspect AI runs twice: about 40 s

inspect_ai = pytest.importorskip("inspect_ai")
pytest.importorskip("openai")  # Inspect's OpenAI-compatible provider needs the openai client (dev extra)

STEPS = 3


def turns() -> list[dict]:
    out = [{"role": "assistant", "content": "", "reasoning_content": f"Add {k} and 1.\n\nThen check it.",
            "tool_calls": [{"id": f"call_{k}", "type": "function",
                            "function": {"name": "add", "arguments": json.dumps({"x": k, "y": 1})}}]}
           for k in range(STEPS)]
    return [*out, {"role": "assistant", "content": "The answer is 6."}]


def inspect_run(url: str, token: str, log_dir, monkeypatch, name: str) -> object:
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate, use_tools
    from inspect_ai.tool import tool
    import openai  # noqa: F401  (what Inspect's OpenAI-compatible provider talks through)

    @tool
    def add():
        async def execute(x: int, y: int) -> str:
            """Add two numbers and explain.

            Args:
                x: First number.
                y: Second number.
            """
            return f"The sum of {x} and {y} is {x + y}. " * 20

        return execute

    monkeypatch.setenv("INTERP_API_KEY", token)  # the proxy's token is the agent's API key
    monkeypatch.setenv("INTERP_BASE_URL", url)
    task = Task(dataset=[Sample(input=f"Add numbers, run {i}.", target="6") for i in range(3)],
                solver=[use_tools(add()), generate()], scorer=includes())
    # a model name per run: Inspect keeps one client per model name
    return inspect_eval(task, model=f"openai-api/interp/{name}", model_base_url=url, log_dir=str(log_dir),
                        display="none")[0]


def test_inspect_runs_through_the_proxy_and_paired_logs_are_read(serving, tmp_path, monkeypatch, capsys, tokenizer):
    logs = {}
    for name, policy in (("base", "full"), ("masked", "observation_masking:m=1")):
        stub = Stub(turns())
        proxy = Proxy(serving(stub.build()), parse_policy(policy), tmp_path / name, tokenizer=tokenizer)
        result = inspect_run(serving(proxy.build()), proxy.token, tmp_path / f"inspect-{name}", monkeypatch,
                             name)
        assert result.status == "success" and result.results.scores[0].metrics["accuracy"].value == 1.0
        rows = read_requests(tmp_path / name)
        assert len(rows) == 3 * (STEPS + 1) and all(r["status"] == 200 and r["failure"] is None for r in rows)
        logs[name] = rows
        if policy != "full":  # the model saw masked observations: the older tool results
            last = [b for b in stub.received if sum(m["role"] == "tool" for m in b["messages"]) == STEPS]
            tool_texts = [[m["content"] for m in b["messages"] if m["role"] == "tool"] for b in last]
            assert all(t[:-1] == ["[old observation omitted]"] * (STEPS - 1) and "sum" in t[-1] for t in tool_texts)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"uncached_input": 3.0, "cache_read": 0.3, "cache_write": 3.75, "output": 15.0}))
    monkeypatch.setattr(sys, "argv", ["interp", "tokens", "--trajectories", str(tmp_path / "base"), "--paired",
                                      str(tmp_path / "masked"), "--prices", str(prices), "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 0, capsys.readouterr()
    doc = check(json.loads((tmp_path / "o" / "paired.json").read_text()), PAIRED_FIELDS, "paired.json")
    # independent sums from the two request logs
    t = {k: sum(r["prompt_tokens"] + r["completion_tokens"] for r in rows) for k, rows in logs.items()}
    d = sum(r["removed_tokens"] for r in logs["masked"])
    assert d > 0 and doc["n_tasks"] == 3 and doc["unmatched"] == []
    assert doc["totals"]["total_change"] == pytest.approx(t["masked"] - t["base"])
    assert doc["totals"]["direct_change"] == pytest.approx(-d)
    assert doc["totals"]["request_count_change"] == 0  # the same requests per task
    assert doc["amplification"] == pytest.approx(abs(t["masked"] - t["base"]) / d)
    lo, hi = doc["amplification_ci"]
    assert lo <= doc["amplification"] <= hi
    cost = {k: sum((r["prompt_tokens"] - r["cached_tokens"]) * 3.0 + r["cached_tokens"] * 0.3
                   + r["completion_tokens"] * 15.0 for r in rows) / 1e6 for k, rows in logs.items()}
    assert doc["cost"]["base"]["cost_usd"] == pytest.approx(cost["base"])
    assert doc["cost"]["compressed"]["cost_usd"] == pytest.approx(cost["masked"])
    assert "paired live runs (observation_masking:m=1, 3 tasks)" in capsys.readouterr().out
