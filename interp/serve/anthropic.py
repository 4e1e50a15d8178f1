"""An Anthropic Messages request (``POST /v1/messages``: Claude Code, the Anthropic SDKs) as a trajectory, and a
policy's edit written back into its content blocks under the provider's rules.

:func:`history_of` maps ``system``, ``messages`` and ``tools`` through the anthropic importer's own mapping
(``interp.data.importers.anthropic.convert_messages``: ``thinking`` blocks are a step's reasoning, joined with
``"\\n\\n"``; ``redacted_thinking`` blocks are counted; ``tool_use`` blocks the action; ``tool_result`` blocks the
observations; one home) and records where each step's blocks are (:class:`TurnSource`). :func:`write_back` changes
only what the policy changed, with the ``anthropic`` rules (``interp.serve.providers``):

| what changed | written back as |
|---|---|
| a step's reasoning | whole ``thinking`` blocks dropped: a block whose text the policy kept verbatim stays as received (signature and all), a block it changed is dropped whole (``coarsened``); ``redacted_thinking`` blocks go only when the step's whole reasoning goes. The latest assistant turn keeps its blocks when it calls tools and the request has ``thinking`` on (the API requires them). Without thinking blocks, a tool turn's one ``text`` block is its reasoning (ReAct) and is edited in place |
| an observation | the ``content`` of the ``tool_result`` block answering that call (a string) |
| a tool exchange removed | its ``tool_use`` block and its ``tool_result`` block go (a user message left empty goes) |
| a whole step removed | its assistant message, its ``tool_result`` blocks and a text action's reply go |

No block is ever altered inside: a ``thinking`` block is kept byte for byte or dropped. A change with no such place
is a :class:`~interp.serve.messages.WriteBackError` (the request goes unedited, logged).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from interp.data.conditions import EditLog
from interp.data.importers.anthropic import convert_messages, tools_of
from interp.data.importers.common import RunContext, text_of
from interp.data.trajectory import Trajectory
from interp.serve.messages import History, WriteBackError, changed_observations, removed_calls, removed_steps
from interp.serve.providers import Capability, whole_units


@dataclass(frozen=True)
class TurnSource:
    """Where step t lives: its assistant message, its thinking / redacted / text blocks, each call's result block
    ``(message, block)`` (None: not answered yet) and a text action's reply message."""

    message: int
    thinking: tuple[int, ...]
    redacted: tuple[int, ...]
    texts: tuple[int, ...]
    calls: tuple[int, ...]
    results: tuple[tuple[int, int] | None, ...]
    reply: int | None


def _blocks(msg: Mapping[str, Any]) -> list[Any]:
    content = msg.get("content")
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def history_of(body: Mapping[str, Any], task_id: str) -> History[TurnSource] | None:
    """The trajectory of a Messages request (None when no assistant turn made a step yet); a ``RunProblem`` (a
    ValueError naming the field) when the importer cannot map it."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not any(isinstance(m, dict) and m.get("role") == "assistant"
                                                 for m in messages):
        return None
    ctx = RunContext(file="request", line=0, stem=task_id, single=True)
    chat = convert_messages(messages, "messages", ctx)
    if not chat.steps or not chat.task:
        return None
    record = {"task_id": task_id, "domain": "serve", "system_prompt": text_of(body.get("system", ""), "system", ctx),
              "tools": tools_of(body.get("tools")), **chat.trajectory("messages")}
    traj = Trajectory.from_json(record)
    sources = []
    for raw in chat.steps:
        i = int(raw.where.removeprefix("messages[").removesuffix("]"))
        blocks = _blocks(messages[i])
        kinds = [b.get("type") if isinstance(b, dict) else None for b in blocks]
        calls = tuple(j for j, k in enumerate(kinds) if k == "tool_use")
        sources.append(TurnSource(
            i, tuple(j for j, k in enumerate(kinds) if k == "thinking"),
            tuple(j for j, k in enumerate(kinds) if k == "redacted_thinking"),
            tuple(j for j, k in enumerate(kinds) if k == "text"), calls,
            _results(messages, i, [blocks[j].get("id") for j in calls]),
            _reply(messages, i) if not calls else None))
    return History(traj, tuple(sources))


def _turn_end(messages: list[Any], i: int) -> int:
    return next((j for j in range(i + 1, len(messages))
                 if isinstance(messages[j], dict) and messages[j].get("role") == "assistant"), len(messages))


def _results(messages: list[Any], i: int, ids: list[Any]) -> tuple[tuple[int, int] | None, ...]:
    """The ``(message, block)`` of each call's ``tool_result``, matched by ``tool_use_id`` as the importer does."""
    found: dict[Any, tuple[int, int]] = {}
    for j in range(i + 1, _turn_end(messages, i)):
        for k, block in enumerate(_blocks(messages[j])):
            if isinstance(block, dict) and block.get("type") == "tool_result" and block.get("tool_use_id") in ids:
                found.setdefault(block["tool_use_id"], (j, k))
    return tuple(found.get(cid) for cid in ids)


def _reply(messages: list[Any], i: int) -> int | None:
    return next((j for j in range(i + 1, _turn_end(messages, i)) if messages[j].get("role") == "user"), None)


def thinking_on(body: Mapping[str, Any]) -> bool:
    """Whether the request turns extended thinking on (``thinking.type`` enabled or adaptive)."""
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def write_back(body: Mapping[str, Any], history: History[TurnSource], edited: Trajectory, log: EditLog,
               capability: Capability, notes: list[str]) -> dict[str, Any]:
    """``body`` with the policy's edit in its content blocks (module table); a new object. Coarsenings the rules
    forced are appended to ``notes``."""
    messages: list[Any] = list(body["messages"])
    blocks: dict[int, list[Any]] = {}  # message index -> its blocks, once changed

    def own(i: int) -> list[Any]:
        if i not in blocks:
            blocks[i] = _blocks(messages[i])
        return blocks[i]

    gone_blocks: dict[int, set[int]] = {}
    drop: set[int] = set()
    gone_steps = removed_steps(log)
    kept = iter(edited.steps)
    last = history.trajectory.n_steps
    for t, (old, src) in enumerate(zip(history.trajectory.steps, history.sources), start=1):
        if t in gone_steps:
            drop.add(src.message)
            for r in src.results:
                if r is not None:
                    gone_blocks.setdefault(r[0], set()).add(r[1])
            drop |= {src.reply} if src.reply is not None else set()
            continue
        new = next(kept)
        if new.reasoning != old.reasoning:
            required = (capability.required == "latest_tool_turn" and t == last and src.calls and thinking_on(body))
            if required and (src.thinking or src.redacted):
                notes.append(f"step {t}: reasoning kept whole (the latest tool turn's thinking blocks are required)")
            else:
                gone_blocks.setdefault(src.message, set()).update(
                    _reasoning_blocks(own(src.message), src, new.reasoning, t, notes))
        calls_gone = removed_calls(log, t)
        for k in calls_gone:
            gone_blocks.setdefault(src.message, set()).add(src.calls[k])
            if src.results[k] is not None:
                j, b = src.results[k]  # type: ignore[misc]
                gone_blocks.setdefault(j, set()).add(b)
        for (j, b), after in changed_observations(old, new, src.results, calls_gone, t):
            own(j)[b] = {**own(j)[b], "content": after}
    for i, gone in gone_blocks.items():
        own(i)[:] = [b for k, b in enumerate(own(i)) if k not in gone]
    out = []
    for i, msg in enumerate(messages):
        if i in drop:
            continue
        if i in blocks:
            if not blocks[i]:
                if msg.get("role") == "assistant":
                    raise WriteBackError(f"messages[{i}]: the edit would leave an assistant message empty")
                continue  # a user message whose every tool_result went
            msg = {**msg, "content": blocks[i]}
        out.append(msg)
    return {**body, "messages": out}


def _reasoning_blocks(blocks: list[Any], src: TurnSource, reasoning: str, t: int, notes: list[str]) -> set[int]:
    """The blocks of step t's message to drop for its edited reasoning (a ReAct text block edited in place)."""
    if not src.thinking and not src.redacted:
        if src.calls and len(src.texts) == 1:  # a ReAct thought: plain text, not signed
            j = src.texts[0]
            if reasoning.strip():
                blocks[j] = {**blocks[j], "text": reasoning}
                return set()
            return {j}
        raise WriteBackError(f"step {t}: its reasoning cannot be written back (no thinking block, "
                             f"{len(src.texts)} text blocks)")
    texts = [b.get("thinking") if isinstance(b.get("thinking"), str) else "" for b in (blocks[j] for j in src.thinking)]
    keep, exact = whole_units(texts, reasoning)
    gone = {j for j, k in zip(src.thinking, keep) if not k}
    if not reasoning.strip():
        gone |= set(src.redacted)
    if not exact:
        notes.append(f"step {t}: the policy edited inside a signed thinking block; dropped whole "
                     f"({sum(keep)} of {len(keep)} blocks kept)")
    return gone


def usage_of(answer: object) -> dict[str, int | None]:
    """Token usage of a Messages answer (or a stream event: ``message_start``'s message, ``message_delta``), in the
    run log's terms: prompt = input + cache reads + cache writes."""
    if isinstance(answer, dict) and isinstance(answer.get("message"), dict):
        answer = answer["message"]
    found = answer.get("usage") if isinstance(answer, dict) else None
    usage: dict[str, Any] = found if isinstance(found, dict) else {}

    def num(v: object) -> int | None:
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    fresh, read, write = (num(usage.get(k)) for k in ("input_tokens", "cache_read_input_tokens",
                                                      "cache_creation_input_tokens"))
    prompt = None if fresh is None else fresh + (read or 0) + (write or 0)
    return {"prompt_tokens": prompt, "cached_tokens": read if prompt is not None else None,
            "cache_write_tokens": write if prompt is not None else None,
            "completion_tokens": num(usage.get("output_tokens"))}
