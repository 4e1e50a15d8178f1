"""mini-swe-agent (its LiteLLM model, OpenAI-compatible provider) runs a three-step bash task through the proxy to
a stub upstream, its local environment executing the commands, with and without a policy; `interp tokens
--paired` reads the two run logs."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from interp.accounting.tokens import parse_policy
from interp.pipelines.cli import main
from interp.schema import check
from interp.serve.app import Proxy
from interp.serve.runlog import PAIRED_FIELDS, read_requests

from ._support import Stub

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # LiteLLM's import alone is ~7 s of CPU; about 15 s in all

if importlib.util.find_spec("minisweagent") is None:  # imported in the test: LiteLLM's import costs ~7 s of CPU
    pytest.skip("mini-swe-agent is not installed (the mini-swe-agent extra, in dev)", allow_module_level=True)

TASKS = ("alpha", "beta")
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def turns(word: str) -> list[dict]:
    """The scripted model: write a file, read it back, submit it (mini-swe-agent stops on the submit line)."""
    commands = [f"echo {word} > notes.txt", "cat notes.txt", f"echo {SUBMIT} && cat notes.txt"]
    return [{"role": "assistant", "content": "",
             "reasoning_content": f"Step {k + 1} of the {word} task.\n\nThe command is {c!r}.",
             "tool_calls": [{"id": f"call_{word}_{k}", "type": "function",
                             "function": {"name": "bash", "arguments": json.dumps({"command": c})}}]}
            for k, c in enumerate(commands)]


class TaskStub(Stub):
    """The stub upstream, scripted per task (the task's word is in its first user message)."""

    def __init__(self) -> None:
        super().__init__([])
        self.scripts = {w: turns(w) for w in TASKS}

    def build(self):  # the answer to a history with k assistant turns of task w is self.scripts[w][k]
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import Response
        from starlette.routing import Route

        async def chat(request: Request) -> Response:
            body = json.loads(await request.body())
            self.received.append(body)
            task = next(m["content"] for m in body["messages"] if m["role"] == "user")
            word = next(w for w in TASKS if w in task)
            done = sum(1 for m in body["messages"] if m["role"] == "assistant")
            answer = {"id": f"c{len(self.received)}", "object": "chat.completion", "created": 0, "model": "stub",
                      "choices": [{"index": 0, "message": self.scripts[word][done], "finish_reason": "tool_calls"}],
                      "usage": self.usage(body)}
            return Response(json.dumps(answer).encode(), media_type="application/json")

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def mini_run(url: str, token: str, word: str, cwd: str) -> dict:
    """One mini-swe-agent run of task ``word`` (LiteLLM's OpenAI provider pointed at the proxy); its exit info."""
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.litellm_model import LitellmModel

    model = LitellmModel(model_name="openai/stub", model_kwargs={"api_base": url, "api_key": token},
                         cost_tracking="ignore_errors")  # no price for a stub model
    agent = DefaultAgent(model, LocalEnvironment(cwd=cwd), system_template="You are an agent with a bash tool.",
                         instance_template=f"Task {word}: write {word} to notes.txt and submit it.", step_limit=6)
    return agent.run()


@pytest.fixture(autouse=True)
def offline_quiet(monkeypatch, tmp_path):
    """LiteLLM's bundled price table (no download), mini-swe-agent's config under the test's directory."""
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("MSWEA_GLOBAL_CONFIG_DIR", str(tmp_path / "mswea"))
    monkeypatch.setenv("MSWEA_SILENT_STARTUP", "1")


def test_mini_swe_agent_runs_through_the_proxy_and_paired_logs_are_read(serving, tmp_path, monkeypatch, capsys,
                                                                         tokenizer):
    logs = {}
    for name, policy in (("base", "full"), ("masked", "observation_masking:m=1")):
        stub = TaskStub()
        proxy = Proxy(serving(stub.build()), parse_policy(policy), tmp_path / name, tokenizer=tokenizer)
        url = serving(proxy.build())
        for word in TASKS:
            work = tmp_path / f"{name}-{word}"
            work.mkdir()
            result = mini_run(url, proxy.token, word, str(work))
            # the commands really ran: the file holds the word, and the submission is its content
            assert result["exit_status"] == "Submitted" and result["submission"] == f"{word}\n"
            assert (work / "notes.txt").read_text() == f"{word}\n"
        rows = read_requests(tmp_path / name)
        assert len(rows) == 3 * len(TASKS) and all(r["status"] == 200 and r["failure"] is None for r in rows)
        assert len({r["session"] for r in rows}) == len(TASKS)  # a session per run, from its opening messages
        logs[name] = rows
        third = [b for b in stub.received if sum(m["role"] == "assistant" for m in b["messages"]) == 2]
        results = [[m["content"] for m in b["messages"] if m["role"] == "tool"] for b in third]
        assert len(results) == len(TASKS) and all(len(r) == 2 for r in results)
        # the model saw what the environment printed; under the policy the older result is masked
        assert all("<returncode>0</returncode>" in r[1] and f"{w}\n" in r[1] for r, w in zip(results, TASKS))
        if policy == "full":
            assert all("<returncode>0</returncode>" in r[0] for r in results)
        else:
            assert all(r[0] == "[old observation omitted]" for r in results)
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
    assert d != 0 and doc["n_tasks"] == len(TASKS) and doc["unmatched"] == []
    assert doc["totals"]["total_change"] == pytest.approx(t["masked"] - t["base"])
    assert doc["totals"]["direct_change"] == pytest.approx(-d)
    assert doc["totals"]["request_count_change"] == 0
    cost = {k: sum((r["prompt_tokens"] - r["cached_tokens"]) * 3.0 + r["cached_tokens"] * 0.3
                   + r["completion_tokens"] * 15.0 for r in rows) / 1e6 for k, rows in logs.items()}
    assert doc["cost"]["base"]["cost_usd"] == pytest.approx(cost["base"])
    assert doc["cost"]["compressed"]["cost_usd"] == pytest.approx(cost["masked"])
