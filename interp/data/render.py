"""Render a history at boundary b with the model's own chat template, with exact segment spans.

``render(traj, b, tokenizer)`` builds the prompt of the request that produces
step ``b+1``: system prompt, tool definitions, task, then ``S_1..S_b`` as
assistant turns (reasoning + tool calls) and tool/feedback turns, and the
generation prompt. The boundary token is the last token.

How spans are exact. The conversation is rendered once with every text piece
(system prompt, task, each reasoning block, each observation, text actions)
replaced by a unique sentinel; the real text is then put back at the
sentinels, which gives each piece's exact character range. The result must
equal the template's own rendering of the real conversation (checked on every
call), so a template that rewrites content fails loudly instead of
mis-spanning. Tool definitions and tool calls are rendered by the template
itself (as JSON or its own tags); their spans are the template's
``<tools>...</tools>`` and ``<tool_call>...</tool_call>`` regions. Character
ranges become token ranges through the tokenizer's offsets of the whole
prompt (never by tokenizing pieces separately). The one exception gives the
same tokens: :class:`Renderer` (successive prompts of one conversation) takes
over the previous prompt's tokens before a special token where the new text
repeats it byte for byte, and tokenizes from there; the tokenizer splits its
input at special tokens first, so the tokens before one do not depend on what
follows it (``tests/serve/test_incremental.py`` checks equality with whole
renders). Everything not covered is
``glue`` (role headers, tags, separators), so spans tile the whole prompt.

Reasoning is rendered exactly as recorded (blocks are a literal split on
``"\\n\\n"``, ``interp.data.trajectory.split_blocks``): the text between
blocks is glue, and a ``reasoning_block`` span covers the block verbatim,
except whitespace at the edges of the whole reasoning (glue, so a template
that strips the reasoning's edges cannot move a span).

A step without reasoning (no non-blank block: empty or whitespace-only
reasoning, recorded so or left so by a deletion) renders as a turn that has
no reasoning at all; its whitespace is not rendered. In every mode that
means no think section:

- *native, field*: the turn has no ``reasoning_content``, and the template
  decides. The tiny model's Qwen-style template writes ``<think>`` only when
  ``reasoning_content`` is non-empty, so nothing is written (the same as
  Qwen3's own template for a historical turn without reasoning); a template
  that always opens a think section writes an empty one, as glue;
- *native, inline* and *fallback* (SmolLM2): the library's own convention
  writes no ``<think>\n\n</think>`` section: the assistant content is the
  action alone, as the agent produced it.

So a step with empty reasoning renders exactly like the same step with
whitespace-only reasoning or with every block deleted (``delete_all_reasoning``),
and it has no ``reasoning_block`` span.

Templates:

- *native*: templates that know ``tools`` / ``tool_calls`` (Qwen family).
  Reasoning goes in ``reasoning_content``. If the template drops it for
  historical turns, reasoning is instead written inline as
  ``<think>\\n...\\n</think>\\n\\n`` at the start of the assistant content,
  which is how the agent saw it (``Rendered.reasoning_mode == "inline"``).
- *fallback* (no tool support, e.g. SmolLM2): tool definitions go in the
  system message inside ``<tools>`` tags, each assistant turn is
  ``<think>\\n{reasoning}\\n</think>\\n\\n<tool_call>\\n{json}\\n</tool_call>``
  and each observation is a user turn ``<tool_response>\\n...\\n</tool_response>``.
  ``interp.data.parse`` reads this format back from generated text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from interp.data.trajectory import Step, Trajectory, block_char_spans

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SEGMENT_KINDS = ("system", "tools", "task", "reasoning_block", "action", "observation", "glue")
_SENTINEL = "\ue000{}\ue001"
_SENTINEL_RE = re.compile("\ue000(\\d+)\ue001")


class RenderError(ValueError):
    """The template cannot be rendered with exact spans (the message says why)."""


@dataclass(frozen=True)
class Segment:
    """One piece of the prompt: token range ``[start, end)`` and char range ``[char_start, char_end)``.

    ``step`` is 1-based for step pieces (None for system/tools/task/glue);
    ``block`` is the reasoning block index within the step, or the call /
    observation index for actions and observations.
    """

    kind: str
    start: int
    end: int
    char_start: int
    char_end: int
    step: int | None = None
    block: int | None = None

    @property
    def n_tokens(self) -> int:
        """Number of tokens in the span."""
        return self.end - self.start


@dataclass
class Rendered:
    """A rendered prompt: text, token ids, offsets and segment spans (tile the prompt in order)."""

    text: str
    input_ids: list[int]
    offsets: list[tuple[int, int]]
    segments: list[Segment]
    boundary: int
    mode: str  # "native" or "fallback"
    reasoning_mode: str  # "field" or "inline"

    @property
    def n_tokens(self) -> int:
        """Prompt length in tokens; the boundary token is ``n_tokens - 1``."""
        return len(self.input_ids)

    def spans(self, kind: str | None = None, step: int | None = None) -> list[Segment]:
        """Segments filtered by kind and/or step."""
        return [s for s in self.segments if (kind is None or s.kind == kind) and (step is None or s.step == step)]

    def tokens_per_kind(self) -> dict[str, int]:
        """Token count per segment kind (every kind present, zeros included)."""
        out = dict.fromkeys(SEGMENT_KINDS, 0)
        for s in self.segments:
            out[s.kind] += s.n_tokens
        return out

    def generation_prompt_start(self) -> int:
        """First token of the trailing glue (the generation prompt of the next request)."""
        last = self.segments[-1]
        return last.start if last.kind == "glue" else self.n_tokens


def supports_tools(template: str) -> bool:
    """True when a chat template renders ``tools`` and ``tool_calls`` itself."""
    return "tool_calls" in template and "tools" in template


def _tool_defs(traj: Trajectory) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                              "parameters": t.get("parameters", {})}} for t in traj.tools]


def fallback_tool_call_text(tool: str, arguments: object) -> str:
    """The fallback convention's text of one tool call (read back by ``interp.data.parse``)."""
    return "<tool_call>\n" + json.dumps({"name": tool, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"


def _fallback_tools_text(traj: Trajectory) -> str:
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in _tool_defs(traj))
    return (
        "# Tools\n\nYou may call the following tools. Their signatures are within <tools></tools> tags:\n"
        f"<tools>\n{lines}\n</tools>\n\n"
        "To call a tool, write your reasoning inside <think></think>, then "
        '<tool_call>\n{"name": <tool-name>, "arguments": <args-json-object>}\n</tool_call>. '
        "Results come back inside <tool_response></tool_response>."
    )


class _Builder:
    """Builds messages with sentinels and records which piece each sentinel stands for."""

    def __init__(self) -> None:
        self.pieces: list[tuple[str, str, int | None, int | None]] = []  # (text, kind, step, block)

    def put(self, text: str, kind: str, step: int | None = None, block: int | None = None) -> str:
        self.pieces.append((text, kind, step, block))
        return _SENTINEL.format(len(self.pieces) - 1)


def _messages(traj: Trajectory, steps: tuple[Step, ...], mode: str, inline: bool, b: _Builder | None):
    """Chat messages for the history; with a builder, text pieces become sentinels."""

    def put(text: str, kind: str, step: int | None = None, block: int | None = None) -> str:
        return b.put(text, kind, step, block) if b is not None else text

    system = put(traj.system_prompt, "system") if traj.system_prompt else ""
    if mode == "fallback" and traj.tools:
        tools_text = _fallback_tools_text(traj)
        system = (system + "\n\n" if system else "") + (put(tools_text, "tools") if b is not None else tools_text)
    msgs: list[dict[str, Any]] = []
    if system:
        msgs.append({"role": "system", "content": system})
    msgs.append({"role": "user", "content": put(traj.task, "task")})
    for t, step in enumerate(steps, start=1):
        reasoning = _reasoning_text(step.reasoning, t, put)
        msg: dict[str, Any] = {"role": "assistant"}
        if step.action.is_text:
            content = put(step.action.text or "", "action", t, 0) if step.action.text else ""
        elif mode == "fallback":
            content = "\n".join(
                put(fallback_tool_call_text(c.tool, dict(c.arguments)), "action", t, k)
                for k, c in enumerate(step.action.calls)
            )
        else:
            content = ""
            # Tool names are sentinels too: they locate each call inside the template's own format.
            msg["tool_calls"] = [{"type": "function", "function": {"name": put(c.tool, "tool_name", t, k),
                                                                   "arguments": dict(c.arguments)}}
                                 for k, c in enumerate(step.action.calls)]
        if reasoning and (inline or mode == "fallback"):
            content = f"<think>\n{reasoning}\n</think>\n\n{content}"
        elif reasoning:
            msg["reasoning_content"] = reasoning
        msg["content"] = content
        msgs.append(msg)
        obs_role = "tool" if (mode == "native" and not step.action.is_text) else "user"
        for k, obs in enumerate(step.observations):
            text = put(obs, "observation", t, k)
            if obs_role == "user" and mode == "fallback":
                text = f"<tool_response>\n{text}\n</tool_response>"
            msgs.append({"role": obs_role, "content": text})
    return msgs


def _reasoning_text(reasoning: str, t: int, put: Any) -> str:
    """The step's reasoning exactly as recorded, each block put as a piece (verbatim, except that
    whitespace at the edges of the whole reasoning stays glue); separators stay glue; ``""`` without a block."""
    out, cursor = [], 0
    spans = block_char_spans(reasoning)
    if not spans:
        return ""  # no reasoning: no think section (module docstring)
    for k, (s, e) in enumerate(spans):
        if k == 0:
            s += len(reasoning[s:e]) - len(reasoning[s:e].lstrip())
        if k == len(spans) - 1:
            e -= len(reasoning[s:e]) - len(reasoning[s:e].rstrip())
        out += [reasoning[cursor:s], put(reasoning[s:e], "reasoning_block", t, k)]
        cursor = e
    out.append(reasoning[cursor:])
    return "".join(out)


def _apply(tokenizer: Any, msgs: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    return tokenizer.apply_chat_template(msgs, tools=tools or None, tokenize=False, add_generation_prompt=True)


def render_text(traj: Trajectory, after_step: int, tokenizer: PreTrainedTokenizerBase) -> tuple[str, list[tuple[str, int, int, int | None, int | None]], str, str]:
    """Rendered prompt text and exact char spans ``(kind, start, end, step, block)`` of every piece."""
    if not 0 <= after_step <= traj.n_steps:
        raise RenderError(f"{traj.task_id}: after_step {after_step} out of range 0..{traj.n_steps}")
    template = tokenizer.chat_template or ""
    if not template:
        raise RenderError("tokenizer has no chat template; rendering needs the model's own template")
    mode = "native" if supports_tools(template) else "fallback"
    steps = traj.steps[:after_step]
    tools = _tool_defs(traj) if mode == "native" else None
    inline = False
    builder = _Builder()
    sentinel_text = _apply(tokenizer, _messages(traj, steps, mode, inline, builder), tools)
    n_reasoning = sum(1 for p in builder.pieces if p[1] == "reasoning_block")
    if mode == "native" and len({int(m) for m in _SENTINEL_RE.findall(sentinel_text)} & {
            i for i, p in enumerate(builder.pieces) if p[1] == "reasoning_block"}) < n_reasoning:
        inline = True  # the template drops historical reasoning: render it the way the agent saw it
        builder = _Builder()
        sentinel_text = _apply(tokenizer, _messages(traj, steps, mode, inline, builder), tools)

    out: list[str] = []
    spans: list[tuple[str, int, int, int | None, int | None]] = []
    names: list[tuple[str, int, int, int | None, int | None]] = []  # where each tool name was rendered
    pos, cursor = 0, 0
    seen: set[int] = set()
    for m in _SENTINEL_RE.finditer(sentinel_text):
        idx = int(m.group(1))
        text, kind, step, block = builder.pieces[idx]
        if idx in seen:
            raise RenderError(f"the chat template repeats a piece ({kind}); spans would be ambiguous")
        seen.add(idx)
        out.append(sentinel_text[cursor:m.start()])
        pos += m.start() - cursor
        (names if kind == "tool_name" else spans).append((kind, pos, pos + len(text), step, block))
        out.append(text)
        pos += len(text)
        cursor = m.end()
    out.append(sentinel_text[cursor:])
    text = "".join(out)
    missing = [builder.pieces[i][1] for i in range(len(builder.pieces)) if i not in seen]
    if missing:
        raise RenderError(f"the chat template dropped pieces of the history: {sorted(set(missing))}")
    real = _apply(tokenizer, _messages(traj, steps, mode, inline, None), tools)
    if real != text:
        raise RenderError("the chat template transforms message text (e.g. strips or escapes it); exact spans "
                          "are impossible with this template")
    if mode == "native":
        spans.extend(_native_spans(text, traj, steps, spans, names))
        spans.sort(key=lambda s: s[1])
    return text, spans, mode, "inline" if inline else "field"


def _native_spans(text: str, traj: Trajectory, steps: tuple[Step, ...], spans,
                  names) -> list[tuple[str, int, int, int | None, int | None]]:
    """Spans of template-rendered tool definitions and tool calls (``<tools>``/``<tool_call>`` regions).

    Call k of step t starts at the last ``<tool_call>`` before its rendered name
    and ends at the last ``</tool_call>`` before the next call's start (or the
    step's first observation), so arguments that quote the tags cannot cut it.
    """
    extra: list[tuple[str, int, int, int | None, int | None]] = []
    first_task = next(s for s in spans if s[0] == "task")
    if traj.tools:
        # The last </tools> before the task closes the definitions (instructions may quote the tags).
        end = text.rfind("</tools>", 0, first_task[1])
        start = text.rfind("<tools>", 0, end) if end >= 0 else -1
        if start < 0:
            raise RenderError("native template: no <tools>...</tools> region before the task")
        extra.append(("tools", start, end + len("</tools>"), None, None))
    name_at = {(n[3], n[4]): n[1] for n in names}
    for t, step in enumerate(steps, start=1):
        if step.action.is_text:
            continue
        lo = max(s[2] for s in spans if s[3] is None or s[3] < t or (s[3] == t and s[0] != "observation"))
        hi = min((s[1] for s in spans if s[3] is not None and (s[3] > t or (s[3] == t and s[0] == "observation"))),
                 default=len(text))
        starts = [text.rfind("<tool_call>", lo, name_at[(t, k)]) for k in range(len(step.action.calls))]
        for k, start in enumerate(starts):
            stop = starts[k + 1] if k + 1 < len(starts) else hi
            end = text.rfind("</tool_call>", start, stop) if start >= 0 else -1
            if start < 0 or end < 0:
                raise RenderError(f"native template: tool call {k} of step {t} not found as <tool_call>...</tool_call>")
            extra.append(("action", start, end + len("</tool_call>"), t, k))
    return extra


def render(traj: Trajectory, after_step: int, tokenizer: PreTrainedTokenizerBase, reuse: Rendered | None = None) -> Rendered:
    """Render the prompt at boundary ``after_step`` with exact token spans (see module docstring).

    ``reuse``: an earlier prompt of the same conversation under the same tokenizer (:class:`Renderer`); the
    tokens and spans of its longest part that the new prompt repeats byte for byte are taken over, and only the
    rest is tokenized (the result is the same as without it).
    """
    return _render(traj, after_step, tokenizer, reuse)[0]


def _render(traj: Trajectory, after_step: int, tokenizer: PreTrainedTokenizerBase, reuse: Rendered | None) -> tuple[Rendered, int]:
    """:func:`render`, and how many of its tokens were taken over from ``reuse``."""
    text, char_spans, mode, reasoning_mode = render_text(traj, after_step, tokenizer)
    pieces = [p for p in char_spans if p[2] > p[1]]
    cut = _reusable(reuse, text, pieces, tokenizer) if reuse is not None else None
    if cut is None:
        tok = char_cut = done = 0
        ids: list[int] = []
        offsets: list[tuple[int, int]] = []
        segments: list[Segment] = []
    else:
        assert reuse is not None
        tok, done = cut
        char_cut = reuse.offsets[tok][0]
        ids, offsets = reuse.input_ids[:tok], reuse.offsets[:tok]
        segments = [s for s in reuse.segments if s.kind != "glue"][:done]
    kept = tok
    enc = tokenizer(text[char_cut:], add_special_tokens=False, return_offsets_mapping=True)
    ids = ids + list(enc["input_ids"])
    offsets = offsets + [(a + char_cut, b + char_cut) for a, b in enc["offset_mapping"]]
    for kind, cs, ce, step, block in pieces[done:]:
        while tok < len(ids) and offsets[tok][1] <= cs:
            tok += 1
        first = tok
        while tok < len(ids) and offsets[tok][0] < ce:
            tok += 1
        if segments and first < segments[-1].end:
            raise RenderError(f"a token straddles two segments near char {cs} ({kind}); spans would overlap")
        segments.append(Segment(kind, first, tok, cs, ce, step, block))
    tiled: list[Segment] = []
    cursor = 0
    for s in segments:
        if s.start > cursor:
            tiled.append(Segment("glue", cursor, s.start, offsets[cursor][0], offsets[s.start - 1][1]))
        tiled.append(s)
        cursor = s.end
    if cursor < len(ids):
        tiled.append(Segment("glue", cursor, len(ids), offsets[cursor][0], len(text)))
    return Rendered(text, ids, offsets, tiled, after_step, mode, reasoning_mode), kept


def _split_tokens(tokenizer: Any) -> frozenset[int]:
    """Ids of the special tokens the tokenizer splits its input at before anything else (no ``lstrip``/``rstrip``:
    the text before such a token tokenizes the same whatever follows it)."""
    return frozenset(i for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()
                     if getattr(t, "special", False) and not getattr(t, "lstrip", True)
                     and not getattr(t, "rstrip", True))


def _reusable(prev: Rendered, text: str, pieces: list[tuple[str, int, int, int | None, int | None]],
              tokenizer: Any) -> tuple[int, int] | None:
    """Where ``text`` can continue ``prev``: (tokens of ``prev`` kept, its pieces kept), or None.

    The cut is the start of a special token of ``prev`` (the latest that works) such that ``text`` repeats
    ``prev.text`` before it byte for byte, no piece of either prompt crosses it, and the pieces before it are the
    same (kind, characters, step, block): the tokens before a split token do not depend on what follows it.
    """
    split = _split_tokens(tokenizer)
    if not split:
        return None
    old = [(s.kind, s.char_start, s.char_end, s.step, s.block) for s in prev.segments if s.kind != "glue"]
    for tok in reversed([i for i, t in enumerate(prev.input_ids) if t in split]):
        char = prev.offsets[tok][0]
        if char > len(text) or not text.startswith(prev.text[:char]):
            continue
        done = sum(1 for p in pieces if p[2] <= char)
        if any(p[1] < char < p[2] for p in (*pieces, *old)) or pieces[:done] != old[:done] or \
                any(p[2] > char for p in old[:done]) or (done < len(old) and old[done][1] < char):
            continue
        return tok, done
    return None


class Renderer:
    """:func:`render` for the successive prompts of one conversation (an agent run's requests): each reuses the
    previous prompt's tokens up to where the new one departs from it (``render(..., reuse=)``), so a request
    tokenizes its new messages, not the history. ``reused`` / ``tokenized`` count tokens taken over / run
    through the tokenizer."""

    def __init__(self) -> None:
        self.last: Rendered | None = None
        self.reused = 0
        self.tokenized = 0

    def __call__(self, traj: Trajectory, after_step: int, tokenizer: Any) -> Rendered:
        """The prompt at boundary ``after_step``, as :func:`render` gives it."""
        out, kept = _render(traj, after_step, tokenizer, self.last)
        self.reused, self.tokenized = self.reused + kept, self.tokenized + out.n_tokens - kept
        self.last = out
        return out
