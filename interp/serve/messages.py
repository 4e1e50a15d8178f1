"""A chat request's messages as a trajectory, and a policy's edit of that trajectory written back into them.

:func:`history_of` maps the ``messages`` (and ``tools``) of an OpenAI chat
completions request through the openai importer's own mapping
(``interp.data.importers.openai.convert_messages``: ``reasoning_content``,
``reasoning``, ``<think>`` sections, tool calls and results; one home), and
records where each step came from (:class:`StepSource`). :func:`write_back`
takes the edited trajectory and changes only what the policy changed, in the
place it was read from:

| what changed                      | written back as                                                          |
|-----------------------------------|--------------------------------------------------------------------------|
| a step's reasoning                | the provider field it came from (``reasoning_content`` / ``reasoning``, a string), the inside of its one ``<think>`` section, or, for a ReAct turn (tool calls, no reasoning: the visible text is the step's reasoning), its ``content`` string |
| an observation                    | the ``content`` of the tool message answering that call                  |
| a tool exchange removed           | the call leaves the assistant message's ``tool_calls`` (the key goes when none is left) and its tool message goes |
| a whole step removed              | its assistant message, its tool messages and a text action's reply go    |

Under the ``deepseek`` rules (``interp.serve.providers``) a tool-call turn's ``reasoning_content`` /
``reasoning`` is never emptied: an edit that would empty it leaves it whole, listed in ``notes``.

A turn whose provider reasoning is removed whole keeps its visible text: read again by the importer, that
text is the reasoning of a ReAct turn (the session always maps the agent's own, unedited messages, so its
state never sees this). Every other message, and every other field of an edited message, is passed
as received (the same JSON value). A change that has no such place (reasoning
from two sources, from a list-form ``reasoning_details``/``thinking_blocks``,
content given as parts, a text action's reply) is a :class:`WriteBackError`: the proxy then forwards the request
unedited and logs it (fail safe).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from interp.data.conditions import EditLog
from interp.data.importers.common import REASONING_JOIN, THINK, RunContext, provider_reasoning, split_think
from interp.data.importers.openai import convert_messages, tools_of
from interp.data.trajectory import Step, Trajectory
from interp.serve.providers import PROVIDERS, Capability

# where a step's reasoning was read from: a provider field (str), the <think> section, the ReAct content,
# nothing, or a form that cannot be written back
FIELD_KINDS = ("reasoning_content", "reasoning")


class WriteBackError(ValueError):
    """The policy changed something the request has no single place for (the request goes unedited)."""


@dataclass(frozen=True)
class StepSource:
    """Where step t lives in the messages: its assistant message, its reasoning's place, its results and reply."""

    message: int
    reasoning: str  # "reasoning_content", "reasoning", "think", "content", "none" or "fixed: <why>"
    results: tuple[int | None, ...]  # message index of each call's result (None: not answered yet)
    reply: int | None  # a text action: the message index of the user's reply


S = TypeVar("S")
R = TypeVar("R")


@dataclass(frozen=True)
class History(Generic[S]):
    """A request's history as a trajectory, with where each step came from (chat: :class:`StepSource`)."""

    trajectory: Trajectory
    sources: tuple[S, ...]


def history_of(body: Mapping[str, Any], task_id: str) -> History[StepSource] | None:
    """The trajectory of a chat request's ``messages`` (None when no assistant turn made a step yet);
    a ``RunProblem`` (a ValueError naming the field) when the importer cannot map them."""
    messages = body.get("messages")
    ctx = RunContext(file="request", line=0, stem=task_id, single=True)
    if not isinstance(messages, list) or not any(isinstance(m, dict) and m.get("role") == "assistant"
                                                 for m in messages):
        return None
    system, chat = convert_messages(messages, "messages", ctx)
    if not chat.steps or not chat.task:
        return None
    record = {"task_id": task_id, "domain": "serve", "system_prompt": REASONING_JOIN.join(system),
              "tools": tools_of(body.get("tools")), **chat.trajectory("messages")}
    traj = Trajectory.from_json(record)
    sources = []
    for step, raw in zip(traj.steps, chat.steps):
        i = int(raw.where.removeprefix("messages[").removesuffix("]"))
        sources.append(StepSource(i, _reasoning_place(messages[i], step.reasoning, bool(raw.calls), ctx),
                                  _results(messages, i, [c.id for c in raw.calls]),
                                  _reply(messages, i) if not raw.calls else None))
    return History(traj, tuple(sources))


def _reasoning_place(msg: Mapping[str, Any], reasoning: str, has_calls: bool, ctx: RunContext) -> str:
    """Where the importer read this assistant turn's reasoning (module table)."""
    content = msg.get("content")
    thought, rest = split_think(content) if isinstance(content, str) else ("", "")
    own, read = provider_reasoning(msg, "message", ctx)
    if own.strip() and thought.strip():
        return "fixed: reasoning from a provider field and a <think> section"
    if own.strip():
        key = next(iter(read))
        return key if key in FIELD_KINDS and isinstance(msg.get(key), str) else f"fixed: reasoning in {key} form"
    if thought.strip():
        matches = list(THINK.finditer(content)) if isinstance(content, str) else []
        if len(matches) == 1 and matches[0].group(1) == reasoning:
            return "think"
        return "fixed: several or unclosed <think> sections"
    if has_calls and isinstance(content, str) and reasoning and rest == reasoning:
        return "content"
    return "none" if not reasoning else "fixed: content given as parts"


def _turn_end(messages: Sequence[Any], i: int) -> int:
    return next((j for j in range(i + 1, len(messages))
                 if isinstance(messages[j], dict) and messages[j].get("role") == "assistant"), len(messages))


def _results(messages: Sequence[Any], i: int, call_ids: list[str | None]) -> tuple[int | None, ...]:
    """Message index of each call's result, matched as the importer matches them (by id, else in order)."""
    found: list[int | None] = [None] * len(call_ids)
    for j in range(i + 1, _turn_end(messages, i)):
        msg = messages[j]
        if msg.get("role") not in ("tool", "function") or msg.get("requestor") == "user":
            continue
        cid = msg.get("tool_call_id", msg.get("id"))
        open_calls = [k for k in range(len(call_ids)) if found[k] is None]
        k = next((k for k in open_calls if cid is not None and call_ids[k] == cid), None)
        if k is None and cid is None and open_calls:
            k = open_calls[0]
        if k is not None:
            found[k] = j
    return tuple(found)


def _reply(messages: Sequence[Any], i: int) -> int | None:
    return next((j for j in range(i + 1, _turn_end(messages, i)) if messages[j].get("role") == "user"), None)


def removed_steps(log: EditLog) -> set[int]:
    """Steps a policy removed whole (``step`` edits; ``params["removed_steps"]`` of keep_last_m_tool_exchanges)."""
    return {e.step for e in log.edits if e.what == "step"} | set(log.params.get("removed_steps", []))


def write_back(body: Mapping[str, Any], history: History[StepSource], edited: Trajectory, log: EditLog,
               capability: Capability = PROVIDERS["openai-chat"], notes: list[str] | None = None) -> dict[str, Any]:
    """``body`` with the policy's edit of ``history`` (``edited``, its ``log``) in its messages (module table);
    a new object: ``body`` itself is not changed. A :class:`WriteBackError` when a change has no place."""
    messages: list[Any] = list(body["messages"])
    gone_steps = removed_steps(log)
    drop: set[int] = set()
    kept = iter(edited.steps)
    for t, (old, src) in enumerate(zip(history.trajectory.steps, history.sources), start=1):
        if t in gone_steps:
            drop |= {src.message, *(j for j in src.results if j is not None)}
            drop |= {src.reply} if src.reply is not None else set()
            continue
        new = next(kept)
        if new.reasoning != old.reasoning and (capability.required == "tool_call_turns" and old.action.calls
                                               and src.reasoning in FIELD_KINDS and not new.reasoning.strip()):
            if notes is not None:
                notes.append(f"step {t}: {src.reasoning} kept whole ({capability.kind} requires it on tool-call "
                             "turns)")
        elif new.reasoning != old.reasoning:
            messages[src.message] = _with_reasoning(messages[src.message], src, new.reasoning, t)
        calls_gone = removed_calls(log, t)
        if calls_gone:
            msg = dict(messages[src.message])
            if not isinstance(msg.get("tool_calls"), list):
                raise WriteBackError(f"step {t}: a tool exchange removed from a turn without a tool_calls list")
            calls = [c for k, c in enumerate(msg["tool_calls"]) if k not in calls_gone]
            if calls:
                msg["tool_calls"] = calls
            else:
                del msg["tool_calls"]
            messages[src.message] = msg
            drop |= {src.results[k] for k in calls_gone if src.results[k] is not None}  # type: ignore[misc]
        for j, after in changed_observations(old, new, src.results, calls_gone, t):
            messages[j] = {**messages[j], "content": after}
    return {**body, "messages": [m for j, m in enumerate(messages) if j not in drop]}


def removed_calls(log: EditLog, t: int) -> list[int]:
    """Indices of step t's calls whose tool exchange the policy removed."""
    return sorted({e.block for e in log.edits if e.step == t and e.what == "tool_exchange" and e.block is not None})


def changed_observations(old: Step, new: Step, results: Sequence[R | None], calls_gone: list[int], t: int
                         ) -> list[tuple[R, str]]:
    """Each observation of step t the policy changed: where its call's result is (``results``, per call) and its
    new text; a text action's reply (no place in a request) is a :class:`WriteBackError`."""
    # calls still in the turn that have a result (the newest turn's calls may not have one yet)
    remaining = [k for k in range(len(results)) if k not in calls_gone and k < len(old.observations)]
    old_obs = [old.observations[k] for k in remaining] if old.action.calls else list(old.observations)
    out = []
    for pos, (before, after) in enumerate(zip(old_obs, new.observations)):
        if before == after:
            continue
        where = results[remaining[pos]] if old.action.calls else None
        if where is None:
            raise WriteBackError(f"step {t}: the observation of a text action (the user's reply) cannot be edited "
                                 "in a request")
        out.append((where, after))
    return out


def _with_reasoning(msg: Mapping[str, Any], src: StepSource, reasoning: str, t: int) -> dict[str, Any]:
    """The assistant message with its reasoning replaced where it was read from."""
    out = dict(msg)
    if src.reasoning in FIELD_KINDS:
        out[src.reasoning] = reasoning
    elif src.reasoning == "think":
        m = next(THINK.finditer(out["content"]))
        out["content"] = out["content"][:m.start(1)] + reasoning + out["content"][m.end(1):]
    elif src.reasoning == "content":
        out["content"] = reasoning
    else:
        raise WriteBackError(f"step {t}: its reasoning cannot be written back ({src.reasoning.removeprefix('fixed: ')})")
    return out
