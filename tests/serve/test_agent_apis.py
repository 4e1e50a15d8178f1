"""The Anthropic Messages and OpenAI Responses APIs through the proxy, on request bodies shaped as Claude Code and
Codex CLI send them (tests/serve/_agents.py), against recording stubs that check what the providers check."""

from __future__ import annotations

import copy
import json
import threading
from urllib.parse import urlsplit

import httpx
import pytest
from starlette.applications import Starlette

from interp.accounting.tokens import parse_policy
from interp.data.conditions import OBSERVATION_MASK
from interp.serve.app import Proxy
from interp.serve.runlog import REQUEST_FIELDS, read_requests

from ._agents import agents_sdk_body, claude_code_body, claude_code_messages, codex_body, codex_items
from ._providers import Recording, anthropic_answer, anthropic_check, responses_answer, responses_check
from ._support import TOOLS, Anywhere, Stub, raw, scripted_turns
from .test_isolation import WAIT, Blocking, history

pytestmark = pytest.mark.e2e


def signed() -> dict[str, str]:
    """signature -> thinking text, for every thinking block of the Claude Code session."""
    return {b["signature"]: b["thinking"] for m in claude_code_messages() if isinstance(m["content"], list)
            for b in m["content"] if b["type"] == "thinking"}


def written() -> dict[str, list]:
    """encrypted_content -> summary, for every reasoning item of the Codex rollout."""
    return {it["encrypted_content"]: it["summary"] for it in codex_items()[1] if it.get("type") == "reasoning"}


def post(url: str, path: str, body: dict, headers: dict[str, str]) -> httpx.Response:
    with httpx.Client(timeout=60) as client:
        return client.post(f"{url}{path}", json=body, headers=headers)


def expected_without_reasoning(body: dict) -> list[dict]:
    """The messages with every step's reasoning removed by hand: thinking blocks dropped, a tool turn's one text
    block (its ReAct thought) dropped; the latest assistant turn kept whole (it calls a tool, thinking is on)."""
    messages = copy.deepcopy(body["messages"])
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    for i, m in enumerate(messages):
        if m["role"] != "assistant" or i == last or not isinstance(m["content"], list):
            continue
        kinds = [b["type"] for b in m["content"]]
        if "thinking" in kinds:
            m["content"] = [b for b in m["content"] if b["type"] != "thinking"]
        elif "tool_use" in kinds and kinds.count("text") == 1:
            m["content"] = [b for b in m["content"] if b["type"] != "text"]
    return messages


@pytest.mark.parametrize("stream", [True, False])
def test_claude_code_request_loses_whole_thinking_blocks_only_and_is_logged(serving, tmp_path, stream):
    stub = Recording("/v1/messages", anthropic_check(signed()), anthropic_answer)
    proxy = Proxy(serving(stub.build()), parse_policy("delete_all_reasoning"), tmp_path / "log",
                  upstream_key="sk-ant-upstream")
    url = serving(proxy.build())
    body = claude_code_body(27, stream)
    assert stub.check(body) is None  # the recorded request itself passes the provider's checks
    r = post(url, "/messages", body, {"x-api-key": proxy.token, "anthropic-version": "2023-06-01"})
    assert r.status_code == 200 and r.content == stub.sent[-1]  # the answer passes byte for byte
    assert len(stub.received) == 1 and not stub.refused
    got = stub.received[0]
    assert got["messages"] == expected_without_reasoning(body) != body["messages"]
    assert {k: v for k, v in got.items() if k != "messages"} == {k: v for k, v in body.items() if k != "messages"}
    assert stub.headers[0]["x-api-key"] == "sk-ant-upstream" and "authorization" not in stub.headers[0]
    [row] = read_requests(tmp_path / "log")
    assert set(row) == {f.name for f in REQUEST_FIELDS}
    assert (row["api"], row["provider"], row["attempt"], row["edited"], row["stream"]) == \
        ("messages", "anthropic", 1, True, stream)
    assert row["n_steps"] == 13 and row["failure"] is None
    assert (row["removed_tokens"], row["removed_measure"]) == (None, "unknown")  # edited, no tokenizer: never 0
    assert row["coarsened"] == ["step 13: reasoning kept whole (the latest tool turn's thinking blocks are required)"]
    fresh = len(json.dumps(got["messages"])) // 4
    assert (row["prompt_tokens"], row["cached_tokens"], row["cache_write_tokens"], row["completion_tokens"]) == \
        (fresh + 105, 100, 5, 17)
    assert row["session"].startswith("user_") and "_session_" in row["session"]  # Claude Code's own run id


def test_claude_code_observation_masking_changes_tool_results_only(serving, tmp_path):
    stub = Recording("/v1/messages", anthropic_check(signed()), anthropic_answer)
    proxy = Proxy(serving(stub.build()), parse_policy("observation_masking:m=3"), tmp_path / "log")
    body = claude_code_body(27, stream=False)
    r = post(serving(proxy.build()), "/messages", body, {"authorization": f"Bearer {proxy.token}"})
    assert r.status_code == 200
    got = stub.received[0]["messages"]
    results = [(i, j) for i, m in enumerate(body["messages"]) if isinstance(m["content"], list)
               for j, b in enumerate(m["content"]) if b["type"] == "tool_result"]
    masked = results[:-3]
    for i, m in enumerate(body["messages"]):
        if all((i, j) not in masked for j in range(len(m["content"]))):
            assert got[i] == m
    assert [got[i]["content"][j]["content"] for i, j in masked] == [OBSERVATION_MASK] * len(masked)
    assert [{k: v for k, v in got[i]["content"][j].items() if k != "content"} for i, j in masked] == \
        [{k: v for k, v in body["messages"][i]["content"][j].items() if k != "content"} for i, j in masked]


@pytest.mark.parametrize("stream", [True, False])
def test_codex_request_loses_whole_reasoning_items_only_and_is_logged(serving, tmp_path, stream):
    stub = Recording("/v1/responses", responses_check(written()), responses_answer)
    proxy = Proxy(serving(stub.build()), parse_policy("keep_last_k_reasoning:k=1"), tmp_path / "log")
    body = codex_body(4, stream)
    r = post(serving(proxy.build()), "/responses", body, {"authorization": f"Bearer {proxy.token}"})
    assert r.status_code == 200 and r.content == stub.sent[-1] and not stub.refused
    got = stub.received[0]
    reasoning = [i for i, it in enumerate(body["input"]) if it.get("type") == "reasoning"]
    assert len(reasoning) == 4
    assert got["input"] == [it for i, it in enumerate(body["input"]) if i not in reasoning[:-1]]
    assert {k: v for k, v in got.items() if k != "input"} == {k: v for k, v in body.items() if k != "input"}
    [row] = read_requests(tmp_path / "log")
    assert (row["api"], row["provider"], row["edited"], row["n_steps"], row["coarsened"]) == \
        ("responses", "openai-responses", True, 4, [])
    assert (row["prompt_tokens"], row["cached_tokens"], row["completion_tokens"]) == \
        (len(json.dumps(got["input"])) // 4, 64, 23)
    assert row["session"] == body["prompt_cache_key"]  # Codex's conversation id names the session


def test_codex_observation_masking_changes_outputs_only(serving, tmp_path):
    stub = Recording("/v1/responses", responses_check(written()), responses_answer)
    proxy = Proxy(serving(stub.build()), parse_policy("observation_masking:m=1"), tmp_path / "log")
    body = codex_body(4, stream=False)
    assert post(serving(proxy.build()), "/responses", body,
                {"authorization": f"Bearer {proxy.token}"}).status_code == 200
    got = stub.received[0]["input"]
    outputs = [i for i, it in enumerate(body["input"]) if it.get("type") == "function_call_output"]
    assert [got[i]["output"] for i in outputs] == [OBSERVATION_MASK] * 3 + [body["input"][outputs[-1]]["output"]]
    assert [it for i, it in enumerate(got) if i not in outputs[:-1]] == \
        [it for i, it in enumerate(body["input"]) if i not in outputs[:-1]]


def test_previous_response_id_is_forwarded_unedited_with_its_reason(serving, tmp_path):
    stub = Recording("/v1/responses", responses_check(written()), responses_answer)
    proxy = Proxy(serving(stub.build()), parse_policy("delete_all_reasoning"), tmp_path / "log")
    body = {**codex_body(4, stream=False), "previous_response_id": "resp_earlier"}
    body["input"] = body["input"][-3:]  # only the new items: the history is the upstream's
    assert post(serving(proxy.build()), "/responses", body,
                {"authorization": f"Bearer {proxy.token}"}).status_code == 200
    assert stub.received == [body]
    [row] = read_requests(tmp_path / "log")
    assert (row["removed_tokens"], row["removed_measure"]) == (0, "unedited")
    assert row["edited"] is False and row["failure"].startswith("previous_response_id: the history is held by "
                                                                 "the upstream")


@pytest.mark.parametrize("stream", [True, False])
def test_agents_sdk_request_loses_whole_reasoning_items_only(serving, tmp_path, stream):
    body = agents_sdk_body(3, stream)
    items = body["input"]
    paired = {it["id"]: items[i - 1]["id"] for i, it in enumerate(items) if it.get("type") == "function_call"}
    stub = Recording("/v1/responses", responses_check(written(), paired), responses_answer)
    proxy = Proxy(serving(stub.build()), parse_policy("keep_latest_reasoning"), tmp_path / "log")
    r = post(serving(proxy.build()), "/responses", body, {"authorization": f"Bearer {proxy.token}",
                                                          "x-interp-session": "run-1"})
    assert r.status_code == 200 and r.content == stub.sent[-1]
    assert len(stub.received) == 1 and not stub.refused  # the edit is one the API accepts: no retry
    reasoning = [i for i, it in enumerate(items) if it.get("type") == "reasoning"]
    assert len(reasoning) == 3
    # the two older turns lose their reasoning item, and their call its id (it no longer names a stored item)
    expected = [{k: v for k, v in it.items() if not (k == "id" and i - 1 in reasoning[:-1])}
                for i, it in enumerate(items) if i not in reasoning[:-1]]
    assert stub.received[0]["input"] == expected
    assert [it.get("id") for it in expected if it.get("type") == "function_call"] == [None, None, list(paired)[-1]]
    [row] = read_requests(tmp_path / "log")
    assert (row["session"], row["api"], row["n_steps"], row["edited"]) == ("run-1", "responses", 3, True)


class Words:
    """A whitespace tokenizer (the proxy's counter takes any callable of the transformers form)."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": text.split()}


def test_removed_tokens_count_the_dropped_blocks_text_not_their_signatures(serving, tmp_path):
    stub = Recording("/v1/messages", anthropic_check(signed()), anthropic_answer)
    proxy = Proxy(serving(stub.build()), parse_policy("delete_all_reasoning"), tmp_path / "log", tokenizer=Words())
    body = claude_code_body(27, stream=False)
    assert post(serving(proxy.build()), "/messages", body, {"x-api-key": proxy.token}).status_code == 200
    sent = expected_without_reasoning(body)
    dropped = [b for m, s in zip(body["messages"], sent) for b in m["content"] if b not in s["content"]]
    assert {b["type"] for b in dropped} == {"thinking", "text"}
    words = sum(len(v.split()) for b in dropped for k, v in b.items() if k != "signature" and isinstance(v, str))
    [row] = read_requests(tmp_path / "log")
    assert (row["removed_tokens"], row["removed_measure"]) == (words, "strings")  # runlog.direct_removal's measure


def test_messages_requests_pass_the_gatekeeper(serving, tmp_path):
    """/v1/messages is behind the same door as chat completions: paths confined, Host checked, body limit."""
    up = Anywhere()
    base = serving(up.build()).removesuffix("/v1")
    proxy = Proxy(f"{base}/tenant-a/v1", parse_policy("delete_all_reasoning"), tmp_path / "log",
                  upstream_key="sk-secret", max_body_bytes=14_000)
    url = serving(proxy.build())
    for target in ("/v1/messages/../../health", "/v1/messages/%2e%2e/%2e%2e/admin", "/v1/messages%2f..%2f..%2fx"):
        status, body = raw(url, target, proxy.token, method="POST")
        assert status == 400 and "base URL" in json.loads(body)["error"]["message"], target
    status, body = raw(url, "/v1/messages", proxy.token, host="evil.example", method="POST")
    assert status == 400 and "Host" in json.loads(body)["error"]["message"]
    big, small = claude_code_body(27, stream=False), claude_code_body(19, stream=False)
    assert len(json.dumps(big)) > 14_000 > len(json.dumps(small))
    assert post(url, "/messages", big, {"x-api-key": proxy.token}).status_code == 413
    assert up.paths == []  # nothing above reached the upstream
    assert post(url, "/messages", small, {"x-api-key": proxy.token}).status_code == 200
    assert up.paths == ["/tenant-a/v1/messages"]
    [row] = read_requests(tmp_path / "log")
    assert (row["api"], row["edited"]) == ("messages", True)


def test_a_messages_request_from_memory_does_not_wait_for_another_sessions_scoring(tiny_sensor, serving, tmp_path):
    """Per-session locks cover /v1/messages: Claude Code's request, its steps in its session's memory, completes
    while a chat session's scoring holds the sensor (order synchronised on events; no clock)."""
    stub, claude = Stub(scripted_turns(3)), Recording("/v1/messages", anthropic_check(signed()), anthropic_answer)
    upstream = Starlette(routes=[*stub.build().routes, *claude.build().routes])
    proxy = Proxy(serving(upstream), parse_policy("iclr:rho=0.5"), tmp_path / "log", sensor=tiny_sensor)
    url = serving(proxy.build())
    body = claude_code_body(19, stream=False)  # the first request whose final turn thinks (the stub's check)
    assert post(url, "/messages", body, {"x-api-key": proxy.token}).status_code == 200  # scored: in memory now
    blocked = Blocking(proxy.session("A").state.scorer.scorer)
    proxy.session("A").state.scorer.scorer = blocked
    got: dict[str, httpx.Response] = {}

    def session_a() -> None:
        got["A"] = post(url, "/chat/completions", {"model": "m", "messages": history(2), "tools": TOOLS},
                        {"authorization": f"Bearer {proxy.token}", "x-interp-session": "A"})

    a = threading.Thread(target=session_a)
    a.start()
    assert blocked.entered.wait(WAIT)  # A is inside the sensor, holding it
    again = post(url, "/messages", body, {"x-api-key": proxy.token})  # answered from its session's memory
    assert again.status_code == 200 and "A" not in got and not blocked.release.is_set()  # done while A waits
    blocked.release.set()
    a.join(WAIT)
    assert got["A"].status_code == 200
    rows = [r for r in read_requests(tmp_path / "log") if r["api"] == "messages"]
    assert [r["request"] for r in rows] == [1, 2] and rows[0]["sensor_seconds"] > 0 == rows[1]["sensor_seconds"]
    assert claude.received[0] == claude.received[1] and not claude.refused
