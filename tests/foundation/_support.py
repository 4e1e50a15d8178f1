"""Independent references for the foundation tests.

Nothing here calls the functions under test to produce an expected value: the
reference prompt is rebuilt from the documented message conventions of
``interp.data.render`` and rendered with the tokenizer's own chat template; token
checks re-tokenize the whole text; piece texts come straight from the
trajectory.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "data" / "demo" / "trajectories.jsonl"
MINI = ROOT / "tests" / "data" / "mini.jsonl"
SEGMENT_KINDS = {"system", "tools", "task", "reasoning_block", "action", "observation", "glue"}


def mini_record() -> dict[str, Any]:
    """A fresh copy of the raw mini record (one valid trajectory with every feature)."""
    return json.loads(MINI.read_text(encoding="utf-8").splitlines()[0])


def token_counter(tokenizer: Any) -> Callable[[str], int]:
    """Tokens of a text without special tokens."""
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


def generation_prompt(tokenizer: Any) -> str:
    """The template's generation prompt: rendering with it minus rendering without it."""
    msgs = [{"role": "user", "content": "x"}]
    with_gp = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    without = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=False)
    assert with_gp.startswith(without)
    return with_gp[len(without):]


def tool_defs(traj) -> list[dict[str, Any]]:
    """Tool definitions in the OpenAI function format the templates expect."""
    return [{"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                              "parameters": t.get("parameters", {})}} for t in traj.tools]


def parse_tool_call(text: str) -> dict[str, Any]:
    """``<tool_call>\\n{json}\\n</tool_call>`` -> the JSON object (asserts the framing)."""
    assert text.startswith("<tool_call>\n"), text[:40]
    assert text.endswith("\n</tool_call>"), text[-40:]
    return json.loads(text[len("<tool_call>\n"):-len("\n</tool_call>")])


def parse_tools_region(text: str) -> list[dict[str, Any]]:
    """The JSON tool definitions inside ``<tools>\\n...\\n</tools>`` (one per line)."""
    start = text.rindex("<tools>\n")
    end = text.index("\n</tools>", start)
    return [json.loads(line) for line in text[start + len("<tools>\n"):end].split("\n")]


def reference_text(traj, b: int, tokenizer: Any, mode: str, reasoning_mode: str,
                   fallback_tools_text: str | None = None, fallback_call_texts: dict | None = None) -> str:
    """The prompt at boundary b, rebuilt from the documented conventions and the tokenizer's template.

    Native: reasoning in ``reasoning_content`` (or inline ``<think>`` when the
    template drops it), tool calls as ``tool_calls``, observations of tool calls
    as ``tool`` turns, other observations as ``user`` turns. Fallback: tool
    definitions appended to the system message, ``<think>`` + ``<tool_call>``
    assistant turns, observations as ``<tool_response>`` user turns. In fallback
    mode the tools text and tool-call texts are passed in (taken from the render
    after the caller checked them by parsing), since their exact wording is the
    library's own.
    """
    msgs: list[dict[str, Any]] = []
    system = traj.system_prompt
    if mode == "fallback" and traj.tools:
        system = (system + "\n\n" if system else "") + fallback_tools_text
    if system:
        msgs.append({"role": "system", "content": system})
    msgs.append({"role": "user", "content": traj.task})
    for t, step in enumerate(traj.steps[:b], start=1):
        reasoning = "\n\n".join(step.blocks)
        msg: dict[str, Any] = {"role": "assistant"}
        if step.action.is_text:
            content = step.action.text
        elif mode == "fallback":
            content = "\n".join(fallback_call_texts[(t, k)] for k in range(len(step.action.calls)))
        else:
            content = ""
            msg["tool_calls"] = [{"type": "function", "function": {"name": c.tool, "arguments": dict(c.arguments)}}
                                 for c in step.action.calls]
        if reasoning and (mode == "fallback" or reasoning_mode == "inline"):
            content = f"<think>\n{reasoning}\n</think>\n\n{content}"
        elif reasoning:
            msg["reasoning_content"] = reasoning
        msg["content"] = content
        msgs.append(msg)
        for obs in step.observations:
            if mode == "fallback":
                msgs.append({"role": "user", "content": f"<tool_response>\n{obs}\n</tool_response>"})
            else:
                msgs.append({"role": "user" if step.action.is_text else "tool", "content": obs})
    tools = tool_defs(traj) if mode == "native" and traj.tools else None
    return tokenizer.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)


def expected_pieces(traj, b: int) -> list[tuple[str, int | None, int | None]]:
    """Every non-glue piece the prompt at boundary b must hold exactly once: (kind, step, block)."""
    out: list[tuple[str, int | None, int | None]] = []
    if traj.system_prompt:
        out.append(("system", None, None))
    if traj.tools:
        out.append(("tools", None, None))
    out.append(("task", None, None))
    for t, step in enumerate(traj.steps[:b], start=1):
        out += [("reasoning_block", t, k) for k in range(len(step.blocks))]
        if step.action.is_text:
            if step.action.text:
                out.append(("action", t, 0))
        else:
            out += [("action", t, k) for k in range(len(step.action.calls))]
        out += [("observation", t, k) for k, o in enumerate(step.observations) if o]
    return out


def piece_text(traj, kind: str, step: int | None, block: int | None) -> str | None:
    """The exact text of a piece, from the trajectory (None for template-rendered pieces)."""
    if kind == "system":
        return traj.system_prompt
    if kind == "task":
        return traj.task
    if kind == "tools":
        return None
    s = traj.steps[step - 1]
    if kind == "reasoning_block":
        return s.blocks[block]
    if kind == "observation":
        return s.observations[block]
    if kind == "action" and s.action.is_text:
        return s.action.text
    return None


def check_rendered(traj, b: int, tokenizer: Any, r, gen_prompt: str) -> None:
    """Every exactness property of one rendered prompt (see test_render.py)."""
    where = f"{traj.task_id} @ b={b}"
    n = r.n_tokens
    assert r.boundary == b
    # Whole-text re-tokenization is the reference for ids and offsets.
    enc = tokenizer(r.text, add_special_tokens=False, return_offsets_mapping=True)
    assert r.input_ids == list(enc["input_ids"]), where
    assert [tuple(o) for o in r.offsets] == [tuple(o) for o in enc["offset_mapping"]], where
    # Tiling: ordered, disjoint, contiguous, covering [0, n), no empty segment.
    segs = r.segments
    assert segs and segs[0].start == 0 and segs[-1].end == n, where
    for a, c in zip(segs, segs[1:]):
        assert a.end == c.start, f"{where}: gap/overlap between {a} and {c}"
        assert a.char_end <= c.char_start, f"{where}: char ranges out of order: {a} {c}"
    for s in segs:
        assert s.kind in SEGMENT_KINDS, s
        assert s.n_tokens > 0, f"{where}: empty segment {s}"
        assert s.end - s.start == s.n_tokens
    assert sum(r.tokens_per_kind().values()) == n
    # Exactly the expected pieces, each once.
    got = sorted(((s.kind, s.step, s.block) for s in segs if s.kind != "glue"), key=repr)
    assert got == sorted(expected_pieces(traj, b), key=repr), where
    call_texts: dict[tuple[int, int], str] = {}
    tools_text = None
    for s in segs:
        if s.kind == "glue":
            continue
        span_text = r.text[s.char_start:s.char_end]
        want = piece_text(traj, s.kind, s.step, s.block)
        if want is not None:
            assert span_text == want, f"{where}: {s} holds {span_text[:60]!r}, not {want[:60]!r}"
        elif s.kind == "action":
            call = traj.steps[s.step - 1].action.calls[s.block]
            assert parse_tool_call(span_text) == {"name": call.tool, "arguments": dict(call.arguments)}, \
                f"{where}: {s} is not the call {call}"
            call_texts[(s.step, s.block)] = span_text
        else:  # tools
            defs = parse_tools_region(span_text)
            assert defs == tool_defs(traj), where
            tools_text = span_text
        # Token coverage: first/last token cover the characters; no token lies outside the piece.
        first, last = r.offsets[s.start], r.offsets[s.end - 1]
        assert first[0] <= s.char_start and last[1] >= s.char_end, f"{where}: {s} tokens {first}..{last}"
        for i in range(s.start, s.end):
            o = r.offsets[i]
            assert o[1] > s.char_start and o[0] < s.char_end, f"{where}: token {i} {o} outside {s}"
        assert span_text in tokenizer.decode(r.input_ids[s.start:s.end]), f"{where}: decode of {s}"
    # Every reasoning block of steps 1..b exactly once, in order.
    blocks = [(s.step, s.block) for s in segs if s.kind == "reasoning_block"]
    assert blocks == [(t, k) for t in range(1, b + 1) for k in range(len(traj.steps[t - 1].blocks))], where
    # The boundary token closes the generation prompt.
    assert r.text.endswith(gen_prompt), where
    assert r.input_ids[-1] == tokenizer(gen_prompt, add_special_tokens=False)["input_ids"][-1], where
    assert segs[-1].kind == "glue" and gen_prompt in r.text[segs[-1].char_start:], where
    # The whole prompt equals the template's rendering of the documented messages.
    ref = reference_text(traj, b, tokenizer, r.mode, r.reasoning_mode, tools_text, call_texts)
    assert r.text == ref, f"{where}: prompt differs from the reference rendering"
