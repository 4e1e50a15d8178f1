"""Sessions isolated from one another: a request that needs no forward completes while another session's scoring
is blocked (order, synchronised on events; no clock), decisions made while the tool runs (``decide="async"``) equal
the synchronous ones one request later, the memory budget drops the least recently used session's KV snapshots
but not its decisions, and idle sessions are swept without a request."""

from __future__ import annotations

import threading

import httpx
import pytest

from interp.accounting.tokens import parse_policy
from interp.serve.app import Proxy
from interp.serve.runlog import read_requests

from ._support import TOOLS, Stub, opening, scripted_turns, tool_result

pytestmark = pytest.mark.e2e

WAIT = 120  # seconds an event may take on a loaded machine before the test fails (never a timing assert)


def history(n: int) -> list[dict]:
    turns, messages = scripted_turns(n), opening()
    for k in range(n):
        messages += [turns[k], tool_result(turns[k], k + 1)]
    return messages


def post(url: str, token: str, messages: list[dict], session: str) -> httpx.Response:
    return httpx.post(f"{url}/chat/completions", json={"model": "m", "messages": messages, "tools": TOOLS},
                      headers={"authorization": f"Bearer {token}", "x-interp-session": session}, timeout=WAIT)


class Blocking:
    """A block scorer that, once called, waits for ``release`` before scoring (a forward held in the sensor)."""

    def __init__(self, inner):
        self.inner, self.entered, self.release = inner, threading.Event(), threading.Event()

    @property
    def _resume(self):
        return self.inner._resume

    def __call__(self, history, step):
        self.entered.set()
        assert self.release.wait(WAIT)
        return self.inner(history, step)


def test_a_request_needing_no_forward_completes_while_another_session_is_scored(tiny_sensor, serving, tmp_path):
    stub = Stub(scripted_turns(3))
    proxy = Proxy(serving(stub.build()), parse_policy("iclr:rho=0.5"), tmp_path / "log", sensor=tiny_sensor)
    url = serving(proxy.build())
    messages = history(2)
    assert post(url, proxy.token, messages, "B").status_code == 200  # B's steps scored: in its memory now
    blocked = Blocking(proxy.session("A").state.scorer.scorer)
    proxy.session("A").state.scorer.scorer = blocked
    got: dict[str, httpx.Response] = {}
    a = threading.Thread(target=lambda: got.setdefault("A", post(url, proxy.token, messages, "A")))
    a.start()
    assert blocked.entered.wait(WAIT)  # A is inside the sensor, holding it
    again = post(url, proxy.token, messages, "B")  # answered from B's memory: no forward
    assert again.status_code == 200 and "A" not in got and not blocked.release.is_set()  # B done while A waits
    blocked.release.set()
    a.join(WAIT)
    assert got["A"].status_code == 200
    rows = {(r["session"], r["request"]): r for r in read_requests(tmp_path / "log")}
    assert rows["B", 2]["sensor_seconds"] == 0.0 and rows["B", 1]["sensor_seconds"] > 0
    assert stub.received[1]["messages"] == stub.received[0]["messages"] == stub.received[2]["messages"]


@pytest.mark.parametrize("stream", [False, True])
def test_async_decisions_made_while_the_tool_runs_equal_the_synchronous_ones(tiny_sensor, serving, tmp_path, stream):
    """Each answer's new step is scored as soon as the answer is complete (streamed or not); when that ends before
    the next request (the tool "runs" until it does: drain), the request is edited as synchronously, lag 0."""
    n = 4
    runs = {}
    for mode in ("sync", "async"):
        stub = Stub(scripted_turns(n))
        proxy = Proxy(serving(stub.build()), parse_policy("iclr:rho=0.5"), tmp_path / mode, sensor=tiny_sensor,
                      decide=mode)
        url = serving(proxy.build())
        for k in range(n + 1):
            r = httpx.post(f"{url}/chat/completions", json={"model": "m", "messages": history(k), "tools": TOOLS,
                                                            "stream": stream},
                           headers={"authorization": f"Bearer {proxy.token}", "x-interp-session": "run"}, timeout=WAIT)
            assert r.status_code == 200 and r.content == stub.sent[k]
            proxy.drain()
        runs[mode] = ([m["messages"] for m in stub.received], read_requests(tmp_path / mode))
        proxy.close()
    (sync, sync_rows), (early, early_rows) = runs["sync"], runs["async"]
    assert [r["lag"] for r in sync_rows] == [r["lag"] for r in early_rows] == [0] * (n + 1)
    assert all(r["sensor_seconds"] == 0.0 for r in early_rows)  # the request never waited for the sensor
    assert sum(r["sensor_seconds"] > 0 for r in sync_rows) == n
    assert early == sync and sync[n] != history(n)  # the same edits, and edits there were


def test_a_step_not_decided_in_time_is_left_whole_and_applied_later(tiny_sensor, serving, tmp_path):
    """The upstream's answers are not the turns the agent sends next (nothing to score ahead): the newest step is
    left whole (lag 1) and decided in the background, and every earlier step is as the synchronous run decided."""
    n = 4
    runs = {}
    for mode in ("sync", "async"):
        stub = Stub([{"role": "assistant", "content": "ok"}])
        proxy = Proxy(serving(stub.build()), parse_policy("iclr:rho=0.5"), tmp_path / mode, sensor=tiny_sensor,
                      decide=mode)
        url = serving(proxy.build())
        for k in range(n + 1):
            assert post(url, proxy.token, history(k), "run").status_code == 200
            proxy.drain()
        runs[mode] = (stub.received, read_requests(tmp_path / mode))
        proxy.close()
    (sync, _), (late, late_rows) = runs["sync"], runs["async"]
    assert [r["lag"] for r in late_rows] == [0] + [1] * n
    edited_somewhere = False
    for k in range(n + 1):
        want = [dict(m) for m in sync[k]["messages"]]
        newest = max((i for i, m in enumerate(want) if m["role"] == "assistant"), default=None)
        if newest is not None:  # left whole at this request; every earlier step as the synchronous run decided
            edited_somewhere |= want[newest]["reasoning_content"] != history(k)[newest]["reasoning_content"]
            want[newest]["reasoning_content"] = history(k)[newest]["reasoning_content"]
        assert late[k]["messages"] == want, k
    assert edited_somewhere and late[n]["messages"] != history(n)  # both runs did edit


def test_a_request_does_not_wait_for_the_background_decision(tiny_sensor, serving, tmp_path):
    stub = Stub(scripted_turns(3))
    proxy = Proxy(serving(stub.build()), parse_policy("iclr:rho=0.5"), tmp_path / "log", sensor=tiny_sensor,
                  decide="async")
    url = serving(proxy.build())
    behind = proxy.session("run").behind
    blocked = Blocking(behind.scorer.scorer)
    behind.scorer.scorer = blocked
    assert post(url, proxy.token, history(1), "run").status_code == 200
    assert blocked.entered.wait(WAIT)  # the background decision of step 1 is in the sensor
    assert post(url, proxy.token, history(2), "run").status_code == 200  # forwarded meanwhile
    assert not blocked.release.is_set()
    blocked.release.set()
    proxy.drain()
    assert [r["lag"] for r in read_requests(tmp_path / "log")] == [1, 2]  # step 1 still pending at request 2
    proxy.close()


def test_the_memory_budget_drops_the_least_recent_snapshots_not_decisions(tiny_sensor, serving, tmp_path):
    stub = Stub(scripted_turns(3))
    proxy = Proxy(serving(stub.build()), parse_policy("iclr:rho=0.5"), tmp_path / "log", sensor=tiny_sensor)
    url = serving(proxy.build())
    messages = history(2)
    post(url, proxy.token, messages, "A")
    size = proxy.sessions["A"].cache_bytes()
    assert size > 0
    proxy.memory_budget = size + size // 2  # room for one session's snapshots, not two
    post(url, proxy.token, messages, "B")
    rows = read_requests(tmp_path / "log")
    assert rows[-1]["evicted"] == ["A"] and rows[0]["evicted"] == []
    assert proxy.sessions["A"].cache_bytes() == 0 and proxy.sessions["B"].cache_bytes() == size
    post(url, proxy.token, messages, "A")  # A's decisions kept: the same edit, no forward
    assert stub.received[2]["messages"] == stub.received[0]["messages"] != messages
    assert read_requests(tmp_path / "log")[-1]["sensor_seconds"] == 0.0


def test_idle_sessions_are_swept_without_a_request(tmp_path):
    now = [1000.0]
    proxy = Proxy("http://127.0.0.1:9/v1", parse_policy("full"), tmp_path / "log", session_ttl=60,
                  sweep_interval=0.01, clock=lambda: now[0])
    proxy.session("a")
    proxy.swept.clear()
    assert proxy.swept.wait(WAIT) and list(proxy.sessions) == ["a"]  # not idle long enough
    now[0] += 61
    for _ in range(2):  # the second sweep began after the clock moved
        proxy.swept.clear()
        assert proxy.swept.wait(WAIT)
    assert list(proxy.sessions) == []
    proxy.close()
