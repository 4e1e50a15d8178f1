"""A 20-step agent run through the proxy under iclr sends the histories the offline online-ICLR decisions make."""

from __future__ import annotations

import json

import httpx
import pytest

from interp.accounting.tokens import parse_policy
from interp.data.conditions import SKIP
from interp.data.trajectory import replace_blocks
from interp.data.render import render
from interp.extraction.entropy import EntropyScorer, entropy_table
from interp.serve.app import Proxy
from interp.serve.messages import history_of
from interp.serve.runlog import read_requests

from ._support import TOOLS, Stub, opening, run_agent, scripted_turns, tool_result

pytestmark = pytest.mark.parity

N = 20
RHO = 0.5


def full_messages(n: int) -> list[dict]:
    turns, messages = scripted_turns(n), opening()
    for k in range(n):
        messages += [turns[k], tool_result(turns[k], k + 1)]
    return messages


@pytest.fixture(scope="module")
def offline(tiny_sensor):
    """The offline reference: `interp entropy`'s table (online context) for the run's trajectory."""
    traj = history_of({"messages": full_messages(N), "tools": TOOLS}, "run").trajectory
    table = entropy_table(tiny_sensor, [traj], rho=RHO, context="online", full=False, progress=False)
    expected = {}
    for t in range(1, N + 1):
        rows = table[table["step"] == t].sort_values("block")
        drop = {int(b) for b, d in zip(rows["block"], rows["dropped"]) if d}
        expected[t] = replace_blocks(traj.steps[t - 1].reasoning, dict.fromkeys(drop, SKIP))
    assert any(SKIP in r for r in expected.values()) and any(SKIP not in r for r in expected.values())
    return expected


@pytest.mark.slow  # about 15 s a run on the tiny model, plus the offline reference
@pytest.mark.parametrize("stream", [False, True])
def test_iclr_through_the_proxy_equals_the_offline_online_decisions(tiny_sensor, offline, serving, tmp_path, stream):
    stub = Stub(scripted_turns(N))
    proxy = Proxy(serving(stub.build()), parse_policy(f"iclr:rho={RHO}"), tmp_path / "log", sensor=tiny_sensor)
    sent, answers = run_agent(serving(proxy.build()), proxy.token, N, stream=stream)
    assert len(stub.received) == N + 1
    assert answers == stub.sent  # the upstream's answers reach the agent byte for byte
    for k, (mine, got) in enumerate(zip(sent, stub.received)):
        assert len(got["messages"]) == len(mine["messages"])
        assert {key: v for key, v in got.items() if key != "messages"} == \
            {key: v for key, v in mine.items() if key != "messages"}
        steps = [m for m in got["messages"] if m["role"] == "assistant"]
        assert [m["reasoning_content"] for m in steps] == [offline[t] for t in range(1, k + 1)]
        for a, b in zip(mine["messages"], got["messages"]):  # everything but reasoning byte-identical
            assert {key: v for key, v in a.items() if key != "reasoning_content"} == \
                {key: v for key, v in b.items() if key != "reasoning_content"}
    rows = read_requests(tmp_path / "log")
    assert [r["n_steps"] for r in rows] == list(range(N + 1)) and all(r["failure"] is None for r in rows)
    assert [r["prompt_tokens"] for r in rows] == [stub.usage(b)["prompt_tokens"] for b in stub.received]
    session = next(iter(proxy.sessions.values()))
    # one step scored per request: earlier decisions answered from the session's memory
    assert session.state.scorer.scored == sum(1 for t in range(1, N + 1) if offline[t] is not None)
    assert rows[-1]["cache_bytes"] > 0 and rows[-1]["sensor_seconds"] > 0
    # the sensor ran about the new tokens of each request (the last history once, plus re-runs from the start of
    # each compressed step), not every history from its start (about N / 2 times the last one)
    last = render(history_of(stub.received[-1], "run").trajectory, N, tiny_sensor.tokenizer).n_tokens
    assert session.state.scorer.scorer.tokens_run < 2 * last


def test_a_sensor_failure_forwards_the_request_unedited(tiny_sensor, serving, tmp_path, monkeypatch):
    def broken(self, *args, **kwargs):
        raise RuntimeError("sensor out of memory")

    monkeypatch.setattr(EntropyScorer, "_forward", broken)
    stub = Stub(scripted_turns(3))
    proxy = Proxy(serving(stub.build()), parse_policy("iclr"), tmp_path / "log", sensor=tiny_sensor)
    url = serving(proxy.build())
    turns, messages, raw_sent = scripted_turns(3), opening(), []
    with httpx.Client(timeout=60) as client:
        for k in range(4):
            raw = json.dumps({"model": "stub", "messages": messages, "tools": TOOLS}, indent=1).encode()
            raw_sent.append(raw)
            r = client.post(f"{url}/chat/completions", content=raw,
                            headers={"authorization": f"Bearer {proxy.token}", "content-type": "application/json"})
            assert r.status_code == 200
            if k < 3:
                messages = [*messages, turns[k], tool_result(turns[k], k + 1)]
    assert stub.raw == raw_sent  # the very bytes the agent sent
    rows = read_requests(tmp_path / "log")
    assert [r["failure"] is not None for r in rows] == [False, True, True, True]
    assert all("sensor out of memory" in r["failure"] for r in rows[1:]) and not any(r["edited"] for r in rows)
