"""Anthropic-style message runs -> trajectories: content blocks, parallel tool_use, tool_result lists, is_error, redacted thinking."""

from __future__ import annotations

import pytest

from interp.data.importers import anthropic
from interp.data.importers.common import RunContext, RunProblem

from ._support import SAMPLES, records

pytestmark = pytest.mark.unit

RUNS = {r["id"]: r for r in records(SAMPLES / "anthropic.jsonl")}


def convert(record):
    ctx = RunContext(file="runs.jsonl", line=1, stem="runs")
    return anthropic.convert(record, ctx), ctx


def test_office_run_maps_blocks_parallel_calls_and_errors():
    out, ctx = convert(RUNS["an-office-1"])
    assert out["system_prompt"] == "You are an office assistant.\nAmounts are in euros (€)."
    assert out["task"] == "Sum Q3 revenue in budget.xlsx (sheets Jul–Sep) and email the total to zoë@example.com."
    assert out["tools"][1] == {"name": "send_email", "description": "Send an email", "parameters": {
        "type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
        "required": ["to", "body"]}}
    first, retry, mail, final = out["steps"]
    assert first == {
        "reasoning": "Q3 is July to September; each month is its own sheet.\n\nI can read all three ranges at once.",
        "action": {"calls": [{"tool": "read_sheet", "arguments": {"file": "budget.xlsx", "range": f"{m}!B2:B40"}}
                             for m in ("Jul", "Aug", "Sep")]},
        # results in call order (given out of order), the image block of the second dropped
        "observation": ["sum=38 950", "sum=41 200", "error: sheet 'Sep' not found (sheets: Jul, Aug, Sept)"],
        "is_error": [False, False, True]}
    assert retry["reasoning"].startswith("Wait, the September sheet") and retry["assistant_text"] == "Retrying September."
    assert retry["observation"] == "sum=40 310" and "is_error" not in retry
    assert mail["action"] == {"tool": "send_email", "arguments": {"to": "zoë@example.com",
                                                                   "body": "Q3 revenue: 120 460 €"}}
    assert final == {"reasoning": "Done; report the total.",
                     "action": {"text": "Q3 revenue is 120 460 €; \nI emailed it to zoë@example.com."},
                     "observation": None}
    assert out["final_answer"] == final["action"]["text"]
    n_signed = sum(1 for m in RUNS["an-office-1"]["messages"] if isinstance(m["content"], list)
                   for b in m["content"] if "signature" in b)
    assert ctx.dropped == {"image content parts": 1, "messages[].content[].signature": n_signed}


def test_redacted_thinking_is_dropped_counted_and_marked():
    out, ctx = convert(RUNS["an-security-1"])
    step = out["steps"][1]
    assert step["reasoning"] == "The note may hint at the vault's password."
    assert step["redacted_thinking"] == 1 and "EmwK" not in str(out)
    n_signed = sum(1 for m in RUNS["an-security-1"]["messages"] if isinstance(m["content"], list)
                   for b in m["content"] if "signature" in b)
    assert ctx.dropped == {"redacted_thinking blocks": 1, "messages[].content[].signature": n_signed}
    assert out["system_prompt"] == "You are solving a CTF challenge in a sandbox."
    assert out["steps"][2]["observation"] == "flag{r0t_and_r0ll}"


def test_empty_thoughts_give_empty_reasoning():
    out, _ = convert(RUNS["an-empty-1"])
    assert [s["reasoning"] for s in out["steps"]] == ["", "", ""]
    assert out["steps"][0]["is_error"] is True and out["steps"][0]["observation"] == "permission denied"
    assert out["steps"][1]["redacted_thinking"] == 1
    assert out["steps"][2]["action"] == {"text": "flag{sud0}"} and out["task"] == "Read /srv/flag.txt."


@pytest.mark.parametrize("messages, where, message", [
    ([{"role": "system", "content": "x"}], "messages[0].role", "unknown role 'system'"),
    ([{"role": "user", "content": "go"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "t",
                                                                             "input": {}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b", "content": "?"}]}],
     "messages[2].content[0]", "tool result for call id 'b'"),
    ([{"role": "user", "content": "go"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "t",
                                                                             "input": "{oops"}]}],
     "messages[1].content[0].input", "invalid JSON arguments"),
    ([{"role": "user", "content": "go"}, {"role": "assistant", "content": [{"type": "thinking", "thinking": 3}]}],
     "messages[1].content[0].thinking", "expected a string, got a number"),
])
def test_malformed_runs_name_the_field(messages, where, message):
    with pytest.raises(RunProblem) as exc:
        convert({"messages": messages})
    assert exc.value.where == where and exc.value.message.startswith(message)
