"""Chat messages -> trajectory (the openai importer's mapping) and a policy's edit written back in place."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from interp.accounting.tokens import parse_policy
from interp.data.conditions import OBSERVATION_MASK, SKIP
from interp.serve.messages import WriteBackError, history_of, write_back
from interp.serve.policy import PolicyState, parse_serve_policy

from ._support import TOOLS, opening, scripted_turns, tool_result

pytestmark = pytest.mark.unit

SAMPLES = Path(__file__).resolve().parents[1] / "importers" / "samples"


def call(i: int, name: str = "bash", args: str = '{"cmd": "ls"}') -> dict:
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": args}}


def forms() -> list[dict]:
    """One conversation with each reasoning form: reasoning_content, reasoning, <think>, ReAct content, parallel."""
    return [*opening(),
            {"role": "assistant", "content": "Looking.", "reasoning_content": "A one.\n\nA two.", "tool_calls": [call(1)]},
            {"role": "tool", "tool_call_id": "c1", "content": "out 1"},
            {"role": "assistant", "content": None, "reasoning": "B one.\n\nB two.\n\nB three.", "tool_calls": [call(2)]},
            {"role": "tool", "tool_call_id": "c2", "content": "out 2"},
            {"role": "assistant", "content": "<think>\nC one.\n\nC two.\n</think>\n\nRunning it.", "tool_calls": [call(3)]},
            {"role": "tool", "tool_call_id": "c3", "content": "out 3"},
            {"role": "assistant", "content": "D one.\n\nD two.", "tool_calls": [call(4), call(5, args='{"cmd": "pwd"}')]},
            {"role": "tool", "tool_call_id": "c5", "content": "out 5"},
            {"role": "tool", "tool_call_id": "c4", "content": "out 4"}]


def edit(messages: list[dict], spec: str, tools=TOOLS) -> tuple[dict, dict]:
    body = {"model": "m", "messages": messages, "tools": tools}
    before = copy.deepcopy(body)
    history = history_of(body, "run")
    state = PolicyState(parse_policy(spec), "run")
    edited, log = state.apply(history.trajectory)
    out = write_back(body, history, edited, log)
    assert body == before  # the request received is not changed
    again = history_of(out, "run")  # the messages sent map back to the policy's trajectory
    for a, e in zip(again.trajectory.steps, edited.steps, strict=True):
        if e.action.is_text and not e.action.text and "assistant_text" in e.extra:  # every call gone, text stays
            assert a.action.text == e.extra["assistant_text"] and not a.observations
        else:
            assert (a.action, a.observations) == (e.action, e.observations)
        if e.reasoning.strip() or "assistant_text" not in e.extra:
            assert a.reasoning == e.reasoning
        else:  # reasoning gone, the visible text stays: read again it is the turn's ReAct thought
            assert a.reasoning == e.extra["assistant_text"]
    return body, out


def test_each_reasoning_form_is_found_where_the_importer_read_it():
    h = history_of({"messages": forms(), "tools": TOOLS}, "run")
    assert [s.reasoning for s in h.sources] == ["reasoning_content", "reasoning", "think", "content"]
    assert [s.results for s in h.sources] == [(3,), (5,), (7,), (10, 9)]
    assert [len(s.blocks) for s in h.trajectory.steps] == [2, 3, 2, 2]
    assert history_of({"messages": opening()}, "run") is None  # no step yet: nothing to edit


def test_delete_all_reasoning_changes_only_the_reasoning_in_its_own_place():
    body, out = edit(forms(), "delete_all_reasoning")
    sent, got = body["messages"], out["messages"]
    expected = copy.deepcopy(sent)
    expected[2]["reasoning_content"] = ""
    expected[4]["reasoning"] = ""
    expected[6]["content"] = "<think>\n\n</think>\n\nRunning it."
    expected[8]["content"] = ""
    assert got == expected
    assert all(got[i] is sent[i] for i in (0, 1, 3, 5, 7, 9, 10))  # untouched messages pass as received
    assert {k: v for k, v in out.items() if k != "messages"} == {k: v for k, v in body.items() if k != "messages"}


def test_iclr_style_skip_markers_land_inside_the_think_section():
    msgs = forms()
    h = history_of({"messages": msgs, "tools": TOOLS}, "run")
    from interp.data.conditions import apply_condition

    edited, log = apply_condition("iclr", h.trajectory, 4, scorer=lambda hist, t: list(range(len(hist.steps[t - 1].blocks))),
                                  rho=0.5)
    got = write_back({"messages": msgs}, h, edited, log)["messages"]
    assert got[2]["reasoning_content"] == f"{SKIP}\n\nA two."
    assert got[4]["reasoning"] == f"{SKIP}\n\nB two.\n\nB three."
    assert got[6]["content"] == f"<think>\n{SKIP}\n\nC two.\n</think>\n\nRunning it."
    assert got[8]["content"] == f"{SKIP}\n\nD two."


def test_observation_masking_and_tool_exchanges_and_windows():
    _, out = edit(forms(), "observation_masking:m=1")
    got = out["messages"]
    assert [m["content"] for m in got if m["role"] == "tool"] == [OBSERVATION_MASK] * 3 + ["out 5", "out 4"]
    assert got[9]["tool_call_id"] == "c5"  # the parallel step (the last) is kept whole
    _, out = edit(forms(), "keep_last_m_tool_exchanges:m=2")
    got = out["messages"]
    assert [c["id"] for m in got if m["role"] == "assistant" for c in m.get("tool_calls", [])] == ["c4", "c5"]
    assert [m.get("tool_call_id") for m in got if m["role"] == "tool"] == ["c5", "c4"]
    assert [m.get("reasoning_content", m.get("reasoning")) for m in got if m["role"] == "assistant"][:2] == \
        ["A one.\n\nA two.", "B one.\n\nB two.\n\nB three."]  # reasoning kept: the turns stay, without calls
    _, out = edit(forms(), "sliding_window:k=2")
    assert out["messages"] == [*forms()[:2], *forms()[6:]]


def test_a_step_without_reasoning_loses_its_whole_exchange():
    turns = [{"role": "assistant", "content": None, "tool_calls": [call(i)]} for i in (1, 2)]
    msgs = [*opening(), turns[0], {"role": "tool", "tool_call_id": "c1", "content": "a"},
            turns[1], {"role": "tool", "tool_call_id": "c2", "content": "b"}]
    _, out = edit(msgs, "keep_last_m_tool_exchanges:m=1")
    assert out["messages"] == [*opening(), *msgs[4:]]


def test_a_change_without_a_place_is_refused():
    msgs = forms()
    msgs[2] = {**msgs[2], "content": "<think>own</think>Looking."}  # reasoning from two sources
    with pytest.raises(WriteBackError, match="step 1: .*provider field and a <think> section"):
        edit(msgs, "delete_all_reasoning")
    with pytest.raises(ValueError, match="not a policy of a live agent"):
        parse_serve_policy("hide_observation")
    with pytest.raises(ValueError, match="takes only rho"):
        parse_serve_policy("iclr:scorer=x")


def test_real_runs_of_two_producers():
    """mini-swe-agent (SWE-bench) and tau2-bench (retail) message lists, as their frameworks wrote them."""
    mini_file = SAMPLES / "mini-swe-agent" / "deepseek_2.3_astropy__astropy-12907.traj.json"
    body, out = edit(json.loads(mini_file.read_text())["messages"], "observation_masking:m=1")
    changed = [i for i, (a, b) in enumerate(zip(body["messages"], out["messages"])) if a != b]
    results = [i for i, m in enumerate(body["messages"]) if m.get("role") == "tool"]
    assert len(results) > 2 and changed == results[:-1]  # one call per step: every result but the last step's
    assert all(out["messages"][i] == {**body["messages"][i], "content": OBSERVATION_MASK} for i in changed)
    tau2 = json.loads((SAMPLES / "tau2" / "claude-sonnet-4-5_retail.json").read_text())["simulations"][0]["messages"]
    body, out = edit(tau2, "observation_masking:m=1")
    changed = [i for i, (a, b) in enumerate(zip(body["messages"], out["messages"])) if a != b]
    assert changed == [5, 7]  # steps 2 and 3's results; step 4 (two parallel results) is the last M = 1
    assert all(out["messages"][i] == {**body["messages"][i], "content": OBSERVATION_MASK} for i in changed)
    assert [m["role"] for m in out["messages"]] == [m["role"] for m in body["messages"]]
    with pytest.raises(WriteBackError, match="thinking_blocks"):  # signed provider thinking is never rewritten
        edit(tau2, "delete_all_reasoning")


def test_every_live_policy_runs_on_the_scripted_run():
    turns, msgs = scripted_turns(6), opening()
    for k in range(6):
        msgs += [turns[k], tool_result(turns[k], k + 1)]
    for spec in ("full", "keep_latest_reasoning", "keep_last_k_reasoning:k=2", "delete_all_reasoning",
                 "random:r=0.2", "observation_masking:m=2", "sliding_window:k=3", "keep_last_m_tool_exchanges:m=2"):
        body, out = edit(msgs, spec)
        assert (out["messages"] == body["messages"]) == (spec == "full"), spec


def test_the_gate_hook_edits_through_the_same_write_back():
    body = {"messages": forms(), "tools": TOOLS}
    with pytest.raises(ValueError, match="drsr_gate: needs a gate"):
        PolicyState(parse_serve_policy("drsr_gate"), "run")
    calls = []

    def gate(history, t):  # online with memory: asked after every step t, deletes only at the newest (t = 4)
        calls.append(t)
        return [("reasoning", 1, 0), ("observation", 2, 0)] if t == 4 else None

    state = PolicyState(parse_serve_policy("drsr_gate"), "run", gate=gate)
    h = history_of(body, "run")
    edited, log = state.apply(h.trajectory)
    got = write_back(body, h, edited, log)["messages"]
    assert calls == [1, 2, 3, 4] and log.params["units"] == {"1": [], "2": [], "3": [],
                                                "4": [["observation", 2, 0], ["reasoning", 1, 0]]}
    assert got[2]["reasoning_content"] == "A two." and got[5]["content"] == ""
    assert [i for i, (a, b) in enumerate(zip(body["messages"], got)) if a != b] == [2, 5]
