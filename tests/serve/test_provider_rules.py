"""Provider rules: the DeepSeek field that must stay, an edit the upstream refuses retried unedited once (both
attempts logged), partial edits of signed blocks coarsened to whole blocks, and the rules' table."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from interp.accounting.tokens import parse_policy
from interp.data.conditions import EditLog
from interp.data.trajectory import join_blocks, split_blocks
from interp.serve import anthropic
from interp.serve.app import Proxy
from interp.serve.providers import PROVIDERS, capability_for, whole_units
from interp.serve.runlog import read_requests

from ._agents import claude_code_body
from ._providers import Recording, chat_answer, deepseek_check
from ._support import run_agent, scripted_turns
from .test_agent_apis import signed

pytestmark = pytest.mark.e2e


def test_a_deepseek_upstream_never_sees_a_missing_reasoning_content(serving, tmp_path):
    stub = Recording("/v1/chat/completions", deepseek_check, chat_answer(scripted_turns(4)))
    proxy = Proxy(serving(stub.build()), parse_policy("delete_all_reasoning"), tmp_path / "log", provider="deepseek")
    sent, _ = run_agent(serving(proxy.build()), proxy.token, 4)
    assert not stub.refused and len(stub.received) == 5  # one attempt per request: nothing refused, no retry
    for got, asked in zip(stub.received, sent):
        assert got["messages"] == asked["messages"]  # every turn is a tool turn: its reasoning stays whole
    rows = read_requests(tmp_path / "log")
    assert [r["provider"] for r in rows] == ["deepseek"] * 5 and all(r["attempt"] == 1 for r in rows)
    assert [len(r["coarsened"]) for r in rows] == [0, 1, 2, 3, 4]
    assert rows[-1]["coarsened"][0] == "step 1: reasoning_content kept whole (deepseek requires it on tool-call turns)"


def test_an_edit_the_upstream_refuses_is_retried_unedited_once_and_both_are_logged(serving, tmp_path):
    stub = Recording("/v1/chat/completions", deepseek_check, chat_answer(scripted_turns(2)))
    # the openai-chat rules let the edit empty reasoning_content: this upstream refuses it
    proxy = Proxy(serving(stub.build()), parse_policy("delete_all_reasoning"), tmp_path / "log",
                  provider="openai-chat")
    sent, answers = run_agent(serving(proxy.build()), proxy.token, 2)
    assert answers[1:] == [stub.sent[1], stub.sent[2]]  # the agent got the unedited retries' answers
    assert len(stub.received) == 5 and len(stub.refused) == 2  # requests 2 and 3: refused, then retried
    for k, got in ((1, stub.received[1]), (2, stub.received[3])):
        assert got["messages"] != sent[k]["messages"]
        assert all(m.get("reasoning_content") in (None, "") for m in got["messages"])
    assert stub.received[2] == sent[1] and stub.received[4] == sent[2]  # the retries: as the agent sent them
    rows = read_requests(tmp_path / "log")
    assert [(r["request"], r["attempt"], r["status"], r["edited"]) for r in rows] == \
        [(1, 1, 200, False), (2, 1, 400, True), (2, 2, 200, False), (3, 1, 400, True), (3, 2, 200, False)]
    assert rows[2]["failure"] == "retried unedited: the upstream refused the edited request"
    assert rows[1]["prompt_tokens"] is None and rows[2]["prompt_tokens"] is not None


def test_an_upstream_error_on_an_unedited_request_is_not_retried(serving, tmp_path):
    stub = Recording("/v1/chat/completions", lambda body: "always refused", chat_answer(scripted_turns(1)))
    proxy = Proxy(serving(stub.build()), parse_policy("full"), tmp_path / "log")
    with pytest.raises(AssertionError):
        run_agent(serving(proxy.build()), proxy.token, 1)
    assert len(stub.received) == 1
    assert [(r["attempt"], r["status"]) for r in read_requests(tmp_path / "log")] == [(1, 400)]


def test_a_partial_edit_of_a_signed_block_drops_the_block_whole():
    body = claude_code_body(45, stream=False)
    history = anthropic.history_of(body, "s")
    steps = history.trajectory.steps
    t = next(k for k, s in enumerate(steps) if len(split_blocks(s.reasoning)) > 1 and k < len(steps) - 1)
    src = history.sources[t]
    assert len(src.thinking) == 1  # one signed block holding several of the study's blocks
    first, *_ = split_blocks(steps[t].reasoning)
    edited = dataclasses.replace(history.trajectory, steps=[
        dataclasses.replace(s, reasoning=first) if k == t else s for k, s in enumerate(steps)])
    notes: list[str] = []
    before = copy.deepcopy(body)
    out = anthropic.write_back(body, history, edited, EditLog("test", len(steps)), PROVIDERS["anthropic"], notes)
    assert body == before
    expected = copy.deepcopy(body["messages"])
    del expected[src.message]["content"][src.thinking[0]]
    assert out["messages"] == expected
    assert notes == [f"step {t + 1}: the policy edited inside a signed thinking block; dropped whole (0 of 1 "
                     "blocks kept)"]
    for m in out["messages"]:  # every thinking block left is one the model signed, byte for byte
        for b in m["content"] if isinstance(m["content"], list) else []:
            assert b["type"] != "thinking" or signed()[b["signature"]] == b["thinking"]


@pytest.mark.parametrize("units, edited, keep, exact", [
    (["a b", "c d", "e"], "a b\n\nc d\n\ne", [True, True, True], True),
    (["a b", "c d", "e"], "a b\n\ne", [True, False, True], True),
    (["a b", "c d", "e"], "", [False, False, False], True),
    (["a b\n\nx", "c d"], "a b\n\nc d", [False, True], False),  # a paragraph of block 1 removed: block 1 goes
    (["", "a b"], "a b", [True, True], True),  # an encrypted-only item stays while reasoning stays
    (["", "a b"], " ", [False, False], True),
    (["same", "same"], "same", [True, False], True),
])
def test_whole_units_keep_what_survives_verbatim(units, edited, keep, exact):
    assert whole_units(units, edited) == (keep, exact)
    if exact:
        assert join_blocks([u for u, k in zip(units, keep) if k and u.strip()]) == edited.strip()


def test_the_kind_of_a_request_follows_the_option_then_the_api():
    assert capability_for("auto", "messages", "http://x/v1", None).kind == "anthropic"
    assert capability_for("auto", "responses", "http://x/v1", None).kind == "openai-responses"
    assert capability_for("auto", "chat", "https://api.deepseek.com/v1", "m").kind == "deepseek"
    assert capability_for("auto", "chat", "http://127.0.0.1:8000/v1", "deepseek-reasoner").kind == "deepseek"
    assert capability_for("auto", "chat", "http://127.0.0.1:8000/v1", "gpt-5").kind == "openai-chat"
    assert capability_for("deepseek", "chat", "http://x/v1", "gpt-5").kind == "deepseek"
    assert capability_for("openai-chat", "chat", "https://api.deepseek.com", None).kind == "openai-chat"
    assert capability_for("deepseek", "messages", "http://x/v1", None).kind == "anthropic"  # not a Messages kind


def test_redacted_thinking_goes_only_with_its_turns_whole_reasoning():
    """No public session has redacted_thinking blocks: two are planted (marked) into the Claude Code request, one
    beside a thinking block, one alone in its turn."""
    from interp.serve.policy import PolicyState

    body = claude_code_body(27, stream=False)
    planted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy-planted"}
    thinking_turns = [i for i, m in enumerate(body["messages"]) if m["role"] == "assistant"
                      and m["content"][0]["type"] == "thinking"]
    beside, alone = thinking_turns[0], thinking_turns[1]
    body["messages"][beside]["content"].insert(1, planted)
    body["messages"][alone]["content"][0] = planted
    history = anthropic.history_of(body, "s")
    edited, log = PolicyState(parse_policy("delete_all_reasoning"), "s").apply(history.trajectory)
    notes: list[str] = []
    out = anthropic.write_back(body, history, edited, log, PROVIDERS["anthropic"], notes)
    kinds = [[b["type"] for b in m["content"]] for m in out["messages"]]
    assert kinds[beside] == ["tool_use"]  # its thinking went, so its redacted reasoning went with it
    assert kinds[alone] == ["redacted_thinking", "tool_use"]  # the policy sees no reasoning there: kept
    assert out["messages"][alone]["content"][0] is planted
