"""An OpenAI Responses request (``POST /v1/responses``: Codex CLI, the OpenAI Agents SDK) as a trajectory, and a
policy's edit written back into its input items under the provider's rules.

:func:`history_of` maps ``instructions``, ``input`` and ``tools`` through the codex importer's own mapping
(``interp.data.importers.codex.convert_items``, the mapping of a rollout's ``response_item`` lines: ``reasoning``
items are a step's reasoning (their raw ``content`` text, else their ``summary`` texts; ``encrypted_content``
counted), assistant ``message`` items its text, ``function_call`` / ``custom_tool_call`` / ``local_shell_call``
items the action, ``*_output`` items the observations; one home) and records each step's items
(:class:`TurnItems`). :func:`write_back` changes only what the policy changed, with the ``openai-responses`` rules
(``interp.serve.providers``):

| what changed | written back as |
|---|---|
| a step's reasoning | whole ``reasoning`` items dropped: an item whose text the policy kept verbatim stays as received (``id``, ``encrypted_content`` and all), an item it changed is dropped whole (``coarsened``); an item with no text (encrypted only) goes only when the step's whole reasoning goes. When a turn loses a reasoning item, its other items (calls, messages) lose their ``id``: the API pairs a stored call's id with its reasoning item ("Item 'fc_...' of type 'function_call' was provided without its required 'reasoning' item") and takes an item without id as new input |
| an observation | the ``output`` of the output item answering that call (a string) |
| a tool exchange removed | its call item and its output item go |
| a whole step removed | its items, their outputs and a text action's reply go |

**``previous_response_id``** (or ``conversation``): the history is held by the upstream and the request carries only
its new items, so the proxy cannot see, let alone edit, what the policy would change: such a request is forwarded
unedited and logged with that reason (``failure``). Agents that send the whole history each time (Codex CLI with
``store: false``; the Agents SDK without ``previous_response_id``) are edited.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from interp.data.conditions import EditLog
from interp.data.importers.codex import CALLS, OUTPUTS, STEP_AT, convert_items, reasoning_text
from interp.data.importers.common import REASONING_JOIN, RunContext
from interp.data.importers.openai import tools_of
from interp.data.trajectory import Trajectory
from interp.serve.messages import History, WriteBackError, changed_observations, removed_calls, removed_steps
from interp.serve.providers import Capability, whole_units


@dataclass(frozen=True)
class TurnItems:
    """Where step t lives in ``input``: its reasoning items, its call items in order, each call's output item (None:
    not answered yet), a text action's reply item."""

    reasoning: tuple[int, ...]
    items: tuple[int, ...]  # every item of the turn (reasoning, assistant messages, calls)
    calls: tuple[int, ...]
    results: tuple[int | None, ...]
    reply: int | None


def _tools(raw: Any) -> list[dict[str, Any]]:
    """Function tools (``{"type": "function", "name", ...}``); built-in tools (shell, web search) have no schema."""
    if not isinstance(raw, list):
        return tools_of(raw)
    return tools_of([t for t in raw if isinstance(t, dict) and "name" in t])


def history_of(body: Mapping[str, Any], task_id: str) -> History[TurnItems] | None:
    """The trajectory of a Responses request's ``input`` (None when it has no step yet: a string, or no model
    turn); a ``RunProblem`` (a ValueError naming the field) when the importer cannot map it."""
    items = body.get("input")
    if not isinstance(items, list):
        return None
    ctx = RunContext(file="request", line=0, stem=task_id, single=True)
    system, chat = convert_items(items, "input", ctx)
    if not chat.steps or not chat.task:
        return None
    instructions = body.get("instructions")
    system = [instructions, *system] if isinstance(instructions, str) and instructions.strip() else system
    record = {"task_id": task_id, "domain": "serve", "system_prompt": REASONING_JOIN.join(system),
              "tools": _tools(body.get("tools")), **chat.trajectory("input")}
    traj = Trajectory.from_json(record)
    starts = [int(s.where.removeprefix(STEP_AT)) for s in chat.steps]
    sources = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(items)
        kinds = [(j, _kind(items[j])) for j in range(start, end)]
        turn = tuple(j for j, kind in kinds if kind in ("reasoning", "assistant", *CALLS))
        calls = tuple(j for j, kind in kinds if kind in CALLS)
        outputs = {items[j].get("call_id"): j for j, kind in kinds if kind in OUTPUTS}
        results = tuple(outputs.get(items[j].get("call_id")) for j in calls)
        reply = next((j for j, kind in kinds if kind == "user"), None) if not calls else None
        sources.append(TurnItems(tuple(j for j, kind in kinds if kind == "reasoning"), turn, calls, results, reply))
    return History(traj, tuple(sources))


def _kind(item: Mapping[str, Any]) -> str:
    """An item's type; a message's role (``assistant``, ``user``, ...) for messages."""
    kind = item.get("type", "message" if "role" in item else None)
    return str(item.get("role")) if kind == "message" else str(kind)


def write_back(body: Mapping[str, Any], history: History[TurnItems], edited: Trajectory, log: EditLog,
               capability: Capability, notes: list[str]) -> dict[str, Any]:
    """``body`` with the policy's edit in its ``input`` items (module table); a new object. Coarsenings the rules
    forced are appended to ``notes``."""
    items: list[Any] = list(body["input"])
    drop: set[int] = set()
    gone_steps = removed_steps(log)
    kept = iter(edited.steps)
    ctx = RunContext(file="request", line=0, stem="write-back", single=True)
    for t, (old, src) in enumerate(zip(history.trajectory.steps, history.sources), start=1):
        if t in gone_steps:
            drop |= set(src.items) | {j for j in src.results if j is not None}
            drop |= {src.reply} if src.reply is not None else set()
            continue
        new = next(kept)
        if new.reasoning != old.reasoning:
            if not src.reasoning:
                raise WriteBackError(f"step {t}: its reasoning is an assistant message's text, not a reasoning item")
            texts = [reasoning_text(items[j], f"input[{j}]", ctx) for j in src.reasoning]
            keep, exact = whole_units(texts, new.reasoning)
            drop |= {j for j, k in zip(src.reasoning, keep) if not k}
            if not all(keep):  # a stored item's id names its reasoning: the turn's items go as new ones
                for j in set(src.items) - set(src.reasoning):
                    if "id" in items[j]:
                        items[j] = {key: v for key, v in items[j].items() if key != "id"}
            if not exact:
                notes.append(f"step {t}: the policy edited inside a reasoning item ({capability.kind}: whole items "
                             f"only); dropped whole ({sum(keep)} of {len(keep)} items kept)")
        calls_gone = removed_calls(log, t)
        for k in calls_gone:
            drop.add(src.calls[k])
            drop |= {src.results[k]} if src.results[k] is not None else set()  # type: ignore[arg-type]
        for j, after in changed_observations(old, new, src.results, calls_gone, t):
            items[j] = {**items[j], "output": after}
    return {**body, "input": [it for j, it in enumerate(items) if j not in drop]}


def unedited_reason(body: Mapping[str, Any]) -> str | None:
    """Why a Responses request is forwarded unedited although the policy should run (None: it can be edited)."""
    for key in ("previous_response_id", "conversation"):
        if body.get(key):
            return (f"{key}: the history is held by the upstream; the request carries only its new items, so the "
                    "policy cannot edit it (forwarded unedited)")
    return None


def usage_of(answer: object) -> dict[str, int | None]:
    """Token usage of a Responses answer (or a stream event holding its ``response``), in the run log's terms."""
    if isinstance(answer, dict) and isinstance(answer.get("response"), dict):
        answer = answer["response"]
    found = answer.get("usage") if isinstance(answer, dict) else None
    usage: dict[str, Any] = found if isinstance(found, dict) else {}
    details = usage.get("input_tokens_details")

    def num(v: object) -> int | None:
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    return {"prompt_tokens": num(usage.get("input_tokens")),
            "cached_tokens": num(details.get("cached_tokens")) if isinstance(details, dict) else None,
            "cache_write_tokens": None, "completion_tokens": num(usage.get("output_tokens"))}
