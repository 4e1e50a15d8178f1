"""The proxy between an agent and a stub upstream: access, errors passed through, sessions, the run log."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from interp.accounting.tokens import parse_policy
from interp.data.conditions import OBSERVATION_MASK
from interp.serve.app import Proxy, SSEUsage, bind, session_of, usage_of
from interp.serve.runlog import REQUEST_FIELDS, read_requests

from ._support import Stub, opening, run_agent, scripted_turns

pytestmark = pytest.mark.e2e


def post(url: str, token: str, body: dict, **headers: str) -> httpx.Response:
    with httpx.Client(timeout=30) as client:
        return client.post(f"{url}/chat/completions", json=body, headers={"authorization": f"Bearer {token}",
                                                                          **headers})


def test_a_policy_edits_the_history_and_the_answer_passes_unchanged(serving, tmp_path):
    stub = Stub(scripted_turns(5))
    proxy = Proxy(serving(stub.build()), parse_policy("observation_masking:m=2"), tmp_path / "log")
    sent, answers = run_agent(serving(proxy.build()), proxy.token, 5)
    assert answers == stub.sent
    last = stub.received[-1]["messages"]
    assert [m["content"] for m in last if m["role"] == "tool"] == [OBSERVATION_MASK] * 3 + \
        [m["content"] for m in sent[-1]["messages"] if m["role"] == "tool"][-2:]
    assert [m for m in last if m["role"] != "tool"] == [m for m in sent[-1]["messages"] if m["role"] != "tool"]
    rows = read_requests(tmp_path / "log")
    assert [r["edited"] for r in rows] == [False, False, False, True, True, True]
    assert [len(r["edit_log"]["edits"]) if r["edit_log"] else 0 for r in rows] == [0, 0, 0, 1, 2, 3]
    # no tokenizer given: an edited request's removal is unknown (not 0), an unedited one's is 0
    assert [(r["removed_tokens"], r["removed_measure"]) for r in rows] == [(0, "unedited")] * 3 + [(None, "unknown")] * 3
    assert all(set(r) == {f.name for f in REQUEST_FIELDS} for r in rows)
    saw = json.loads(next((tmp_path / "log" / "sessions").iterdir()).read_text())
    assert [s["observation"] for s in saw["steps"]][:3] == [OBSERVATION_MASK] * 3 and saw["task_id"] == rows[0]["session"]


def test_access_needs_the_token_and_the_proxy_listens_on_loopback(serving, tmp_path):
    stub = Stub(scripted_turns(1))
    proxy = Proxy(serving(stub.build()), parse_policy("full"), tmp_path / "log")
    url = serving(proxy.build())
    assert url.startswith("http://127.0.0.1:")
    body = {"model": "m", "messages": opening()}
    assert post(url, "wrong", body).status_code == 401 and not stub.received
    with httpx.Client() as client:
        assert client.get(f"{url}/models").status_code == 401
        other = client.get(f"{url}/models", headers={"authorization": f"Bearer {proxy.token}"})
        assert other.status_code == 404 and other.text == "Not Found"  # the stub's own answer, passed through
    r = post(url, proxy.token, body)
    assert r.status_code == 200 and "authorization" not in stub.headers[0]
    proxy.upstream_key = "sk-upstream"
    post(url, proxy.token, body, **{"x-interp-session": "s1"})
    assert stub.headers[1]["authorization"] == "Bearer sk-upstream" and "x-interp-session" not in stub.headers[1]


def test_upstream_errors_pass_through_with_their_status(serving, tmp_path):
    stub = Stub(scripted_turns(1), fail_status=429)
    proxy = Proxy(serving(stub.build()), parse_policy("delete_all_reasoning"), tmp_path / "log")
    url = serving(proxy.build())
    r = post(url, proxy.token, {"model": "m", "messages": opening()})
    assert r.status_code == 429 and r.json() == {"error": {"message": "scripted failure"}}
    closed = bind("127.0.0.1", 0)  # a port nobody answers on
    port = closed.getsockname()[1]
    closed.close()
    proxy.upstream = f"http://127.0.0.1:{port}/v1"
    r = post(url, proxy.token, {"model": "m", "messages": opening()})
    assert r.status_code == 502 and "unreachable" in r.json()["error"]["message"]
    assert [row["status"] for row in read_requests(tmp_path / "log")] == [429, 502]


def test_an_upstream_timeout_is_a_504(serving, tmp_path):
    never = asyncio.Event()

    async def hang(request):
        await never.wait()
        return JSONResponse({})

    proxy = Proxy(serving(Starlette(routes=[Route("/v1/chat/completions", hang, methods=["POST"])])),
                  parse_policy("full"), tmp_path / "log", timeout=0.2)
    r = post(serving(proxy.build()), proxy.token, {"model": "m", "messages": opening()})
    assert r.status_code == 504 and read_requests(tmp_path / "log")[0]["status"] == 504


def test_sessions_are_named_expire_and_are_bounded(tmp_path):
    now = [1000.0]
    proxy = Proxy("http://127.0.0.1:9/v1", parse_policy("full"), tmp_path / "log", max_sessions=2,
                  session_ttl=60, clock=lambda: now[0])
    a = session_of({"messages": [*opening(), {"role": "assistant", "content": "x"}]}, None)
    assert a == session_of({"messages": opening()}, None) != session_of({"messages": opening()[:1]}, None)
    assert session_of({"messages": opening()}, "mine") == "mine"
    proxy.session("a")
    proxy.session("b")
    proxy.session("c")  # over the bound: the least recently used (a) goes
    assert list(proxy.sessions) == ["b", "c"]
    now[0] += 30
    proxy.session("c")
    now[0] += 31
    assert proxy.sweep() == ["b"]  # b idle for over the ttl: gone, without a request
    assert list(proxy.sessions) == ["c"]


def test_usage_is_read_from_answers_and_streams():
    answer = {"usage": {"prompt_tokens": 100, "completion_tokens": 5,
                        "prompt_tokens_details": {"cached_tokens": 64}}}
    assert usage_of(answer) == {"prompt_tokens": 100, "cached_tokens": 64, "cache_write_tokens": None,
                                "completion_tokens": 5}
    assert usage_of({"usage": {"prompt_tokens": 9, "completion_tokens": 1, "cache_creation_input_tokens": 4}})[
        "cache_write_tokens"] == 4
    stream = b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\ndata: ' + json.dumps(answer).encode() + \
        b"\n\ndata: [DONE]\n\n"
    sse = SSEUsage()
    for i in range(0, len(stream), 5):
        sse.feed(stream[i:i + 5])
    assert sse.usage == usage_of(answer)


def test_a_streamed_answer_is_reassembled_into_its_message():
    """The deltas of an SSE chat stream (content, reasoning, a tool call's name and arguments in pieces, by
    index) make the message a non-streamed answer would hold."""
    message = {"role": "assistant", "content": "I will look.", "reasoning_content": "first\n\nsecond",
               "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}},
                              {"id": "c2", "type": "function", "function": {"name": "cat", "arguments": '{"f": 1}'}}]}
    deltas = [{"role": "assistant", "reasoning_content": "first\n\n"}, {"reasoning_content": "second"},
              {"content": "I will "}, {"content": "look."},
              {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "bash", "arguments": ""}}]},
              {"tool_calls": [{"index": 0, "function": {"arguments": '{"cmd": '}}]},
              {"tool_calls": [{"index": 1, "id": "c2", "type": "function", "function": {"name": "cat", "arguments": '{"f": 1}'}}]},
              {"tool_calls": [{"index": 0, "function": {"arguments": '"ls"}'}}]}]
    stream = b"".join(b"data: " + json.dumps({"choices": [{"index": 0, "delta": d}]}).encode() + b"\n\n"
                      for d in deltas) + b"data: [DONE]\n\n"
    sse = SSEUsage()
    for i in range(0, len(stream), 7):
        sse.feed(stream[i:i + 7])
    assert sse.message == message
