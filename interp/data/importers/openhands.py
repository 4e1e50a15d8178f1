"""OpenHands event streams (a saved trajectory: a JSON list of action and observation events): one file, one run.

OpenHands (V0 event stream, as ``save_trajectory_path`` and the UI's trajectory
download write it) logs each agent action and each observation as an event
``{id, timestamp, source, message, action | observation, args | content +
extras, cause, tool_call_metadata}``. The list is read whole
(:mod:`.session`: its first event claims the file). What is mapped
(``docs/reference/importers.md`` lists it with what is dropped):

* the ``system`` action (``args.content``, written by later versions): the
  system prompt; ``user`` ``message`` actions before the first agent action:
  the task; later ones are the reply to a text action;
* an agent action with ``tool_call_metadata`` is a call as the model wrote it:
  the tool call ``tool_call_id`` of the model response (``function.name`` and
  its JSON ``arguments``); actions from one model response
  (``model_response.id``) are one step, their calls parallel. The response
  message's ``reasoning_content`` is the reasoning; its ``content`` (the thought
  OpenHands also copies to ``args.thought``) is the thought when there is no
  reasoning, else ``assistant_text``;
* an agent action without ``tool_call_metadata`` (agents that do not use
  function calling) is a call ``{"tool": action, "arguments": args}`` with
  ``args.thought`` as its reasoning; an agent ``message`` action is a text
  action (the last is ``final_answer``);
* an observation answers the action it names in ``cause`` (its ``content``);
  observations of the environment (``agent_state_changed``, ``null``,
  ``recall``) and actions of the environment are counted by kind;
* the system event's ``args.tools`` (OpenAI function schemas) are the
  trajectory's ``tools``; the model each response names
  (``tool_call_metadata.model_response.model``) is kept in
  ``metadata.models``, the response's other fields (usage, ids) counted.

An evaluation's ``output.jsonl`` (SWE-bench style, one row per instance:
``instance_id``, ``instruction``, ``history``, ``metadata``, ``test_result``,
``metrics``, ``error``, ``instance``) is read row by row: its ``history`` is
the event stream above, ``instance_id`` the task id; ``metadata`` (agent
class, LLM config), ``test_result`` (the patch), ``metrics`` and ``error`` go
to the trajectory's ``metadata``; ``instance`` (the dataset's row, gold patch
included) and ``instruction`` (the task again) are counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from interp.data.importers.common import (
    ChatSteps, RunContext, RunProblem, expect, join_reasoning, parse_arguments, provider_reasoning, tool_spec,
)
from interp.data.importers.session import LineProblem, entries_of

FORMAT = "openhands"
DEFAULT_DOMAIN = "code"
SOURCES = ("user", "agent", "environment")
EVENT_USED = frozenset({"id", "source", "action", "observation", "args", "content", "cause", "tool_call_metadata"})
# event fields the format documents dropping: the UI's rendering of the event, timings, costs, flags
EVENT_KNOWN = frozenset({"timestamp", "message", "extras", "timeout", "success", "llm_metrics", "hidden",
                         "security_risk", "confirmation_state", "is_confirmed", "action_risk"})
ARGS_BOOKKEEPING = frozenset({"thought", "is_input", "blocking", "hidden", "confirmation_state", "security_risk",
                              "impl_source", "translated_ipython_code", "is_confirmed", "image_urls",
                              "wait_for_response", "include_extra", "kernel_init_code"})
AGENT_INTERNAL = frozenset({"system", "change_agent_state", "condensation", "recall", "agent_state_changed"})
RESPONSE_USED = frozenset({"id", "choices", "model"})  # of tool_call_metadata.model_response; the rest is counted
ROW_USED = frozenset({"instance_id", "history", "instance", "instruction", "metadata", "test_result", "metrics",
                      "error"})
ROW_KEPT = ("metadata", "test_result", "metrics", "error")  # row fields kept in the trajectory's metadata
SILENT_OBSERVATIONS = frozenset({"null", "agent_state_changed", "recall", "user_rejected"})


def claims_line(value: object) -> bool:
    """Whether a JSON list (or JSON Lines file) starting with ``value`` is an OpenHands event stream."""
    return (isinstance(value, Mapping) and value.get("source") in SOURCES and "id" in value
            and ("action" in value or "observation" in value) and "timestamp" in value)


def looks_like(record: object) -> bool:
    """Sniff (``interp import auto``): an event stream gathered for this format, or an evaluation output row."""
    return entries_of(record, FORMAT) is not None or _history(record) is not None


def _history(record: object) -> list[Any] | None:
    """The events of an evaluation output row (``output.jsonl``: ``{instance_id, history, ...}``); None for any
    other record."""
    history = record.get("history") if isinstance(record, Mapping) else None
    if not isinstance(history, list) or not history:
        return None
    first = history[0]
    if not (isinstance(first, Mapping) and first.get("source") in SOURCES
            and ("action" in first or "observation" in first)):
        return None
    return history


@dataclass
class _Step:
    """The agent actions of one model response (reasoning, text, calls) and the observations of its calls."""

    response: Any
    line: int
    reasoning: str = ""
    text: str = ""
    calls: list[tuple[str | None, dict[str, Any]]] = field(default_factory=list)
    ids: dict[Any, str | None] = field(default_factory=dict)  # action event id -> call id
    results: list[tuple[str | None, str]] = field(default_factory=list)  # (call id, observation content)


def convert(record: object, ctx: RunContext) -> dict[str, Any]:
    """One saved event stream, or one evaluation output row, as a trajectory record (see the module docstring)."""
    entries = entries_of(record, FORMAT)
    history = _history(record) if entries is None else None
    if history is not None:
        assert isinstance(record, dict)  # a row with a history
        return _row(record, history, ctx)
    if entries is None:
        raise RunProblem("(record)", "not an OpenHands event stream: expected a JSON list of events with id, "
                                     "source and action or observation, or an evaluation output row with a "
                                     "'history' list of them")
    return _events([(e.line, "", e.value) for e in entries], ctx, {"task_id": ctx.task_id({})})


def _row(row: dict[str, Any], history: list[Any], ctx: RunContext) -> dict[str, Any]:
    """An ``output.jsonl`` row: its ``history`` events; ``instance_id`` the task id; the run's ``metadata``
    (agent class, LLM config), ``test_result``, ``metrics`` and ``error`` kept in ``metadata``; the dataset's
    ``instance`` and the ``instruction`` (the task again) counted."""
    for key, what in (("instance", "the benchmark's dataset row"), ("instruction", "the task again")):
        if row.get(key) not in (None, "", {}, []):
            ctx.drop(f"{key} ({what}: not kept)")
    for key in set(row) - ROW_USED:
        ctx.unmapped({key: row[key]}, "(row)", set(), set())
    kept = {k: row[k] for k in ROW_KEPT if row.get(k) is not None}
    return _events([(ctx.line, f"history[{i}].", e) for i, e in enumerate(history)], ctx,
                   {"task_id": ctx.task_id(row), "metadata": kept})


def _events(events: list[tuple[int, str, Any]], ctx: RunContext, run: dict[str, Any]) -> dict[str, Any]:
    """The trajectory of events ``(line, field prefix, event)``; ``run`` holds the task id and metadata."""
    chat, system, tools, models = ChatSteps(ctx), list[str](), list[dict[str, Any]](), list[str]()
    step: _Step | None = None
    for line, prefix, value in events:
        try:
            event = expect(value, dict, "(event)", "an event object")
            ctx.unmapped(event, "(event)", EVENT_USED, EVENT_KNOWN)
            model = _model(event, ctx)
            if model is not None and model not in models:
                models.append(model)
            if "observation" in event:
                _observation(step, event, ctx)
                continue
            kind, source = event.get("action"), event.get("source")
            if source == "agent" and kind not in AGENT_INTERNAL:
                response = _response_id(event)
                if step is None or response is None or step.response != response or kind == "message":
                    _flush(chat, step)
                    step = None
                step = _action(chat, step, event, line, ctx)
            else:
                _flush(chat, step)
                step = None
                _other(chat, event, system, tools, ctx)
        except RunProblem as exc:
            raise exc if isinstance(exc, LineProblem) else LineProblem(line, prefix + exc.where,
                                                                       exc.message) from None
    _flush(chat, step)
    try:
        steps = chat.trajectory("(file)")
    except RunProblem as exc:
        where, _, at = exc.where.partition(STEP_AT)
        raise LineProblem(int(at) if at else events[0][0], where or "(event)", exc.message) from None
    meta = {**run.get("metadata", {}), **({"models": models} if models else {})}
    return {"task_id": run["task_id"], "domain": ctx.domain or DEFAULT_DOMAIN, "system_prompt": "\n\n".join(system),
            "tools": tools, **steps, "outcome": {}, **({"metadata": meta} if meta else {})}


STEP_AT = "(event)@"  # a step's location for ChatSteps: the line of its first action follows


def _model(event: dict[str, Any], ctx: RunContext) -> str | None:
    """The model named by an agent action's ``tool_call_metadata.model_response`` (kept in ``metadata.models``);
    the response's other fields (ids, usage, timing) are counted by path."""
    meta = event.get("tool_call_metadata")
    response = meta.get("model_response") if isinstance(meta, dict) and "action" in event else None
    if not isinstance(response, dict):
        return None
    ctx.unmapped(response, "(event).tool_call_metadata.model_response", RESPONSE_USED, frozenset(response))
    model = response.get("model")
    return model if isinstance(model, str) and model else None


def _response_id(event: dict[str, Any]) -> Any:
    """The id of the model response an action came from (None without ``tool_call_metadata``)."""
    meta = event.get("tool_call_metadata")
    response = meta.get("model_response") if isinstance(meta, dict) else None
    return response.get("id") if isinstance(response, dict) else None


def _action(chat: ChatSteps, step: _Step | None, event: dict[str, Any], line: int,
            ctx: RunContext) -> _Step | None:
    """An agent action: a text action (None: no open step), or a call added to ``step`` (a new one when None)."""
    kind = str(event.get("action"))
    args = expect(event.get("args", {}), dict, "args", "an object")
    meta = event.get("tool_call_metadata")
    thought = expect(args.get("thought", ""), str, "args.thought", "a string")
    if kind == "message":  # a text action (with the model response's reasoning, when it is kept)
        content = expect(args.get("content"), str, "args.content", "a string")
        ctx.unmapped(args, "(event).args", {"content", "thought"}, frozenset(args))
        if isinstance(meta, dict) and isinstance(meta.get("model_response"), dict):
            reasoning, _ = provider_reasoning(_message(meta["model_response"]),
                                              "tool_call_metadata.model_response.choices[].message", ctx)
            thought = join_reasoning([reasoning, thought])
        chat.assistant(thought, content, [], f"{STEP_AT}{line}")
        return None
    if meta is None:  # an agent that does not call functions: the action and its arguments as OpenHands parsed them
        step = _Step(response=None, line=line, reasoning=thought)
        step.calls.append((None, {"tool": kind, "arguments": {k: v for k, v in args.items()
                                                              if k not in ARGS_BOOKKEEPING}}))
        step.ids[event.get("id")] = None
        ctx.unmapped(args, "(event).args", set(args) - ARGS_BOOKKEEPING | {"thought"}, frozenset(args))
        return step
    meta = expect(meta, dict, "tool_call_metadata", "an object")
    response = expect(meta.get("model_response"), dict, "tool_call_metadata.model_response", "an object")
    if step is None:
        step = _Step(response=response.get("id"), line=line)
        message = _message(response)
        step.reasoning, _ = provider_reasoning(message, "tool_call_metadata.model_response.choices[].message", ctx)
        content = message.get("content")
        step.text = content if isinstance(content, str) else ""
    call_id = expect(meta.get("tool_call_id"), str, "tool_call_metadata.tool_call_id", "a string")
    step.calls.append((call_id, _call(meta, response, call_id)))
    step.ids[event.get("id")] = call_id
    # OpenHands' parse of the call (kept as the model wrote it) and its bookkeeping: counted by path
    ctx.unmapped(args, "(event).args", set(), frozenset(args))
    return step


def _message(response: dict[str, Any]) -> dict[str, Any]:
    choices = response.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = first.get("message")
    return message if isinstance(message, dict) else {}


def _call(meta: dict[str, Any], response: dict[str, Any], call_id: str) -> dict[str, Any]:
    """The call the model wrote: its tool call ``call_id`` in the model response."""
    calls = _message(response).get("tool_calls") or []
    found = next((c for c in calls if isinstance(c, dict) and c.get("id") == call_id), None)
    if found is None:
        raise RunProblem("tool_call_metadata.model_response", f"no tool call {call_id!r} in the model response")
    function = expect(found.get("function"), dict, "tool_call_metadata.model_response.choices[].message."
                                                   "tool_calls[].function", "an object")
    name = function.get("name", meta.get("function_name"))
    return {"tool": expect(name, str, "tool_call_metadata.function_name", "the tool name as a string"),
            "arguments": parse_arguments(function.get("arguments"), "tool_call_metadata.model_response.choices[]."
                                                                    "message.tool_calls[].function.arguments")}


def _flush(chat: ChatSteps, step: _Step | None) -> None:
    """The open step to ``chat``, then the observations of its calls."""
    if step is None:
        return
    chat.assistant(step.reasoning, step.text, step.calls, f"{STEP_AT}{step.line}")
    for call_id, content in step.results:
        chat.tool_result(call_id, content, "(event).content")


def _observation(step: _Step | None, event: dict[str, Any], ctx: RunContext) -> None:
    """An observation: the result of an open action it names in ``cause``; any other is counted by kind."""
    kind = str(event.get("observation"))
    cause = event.get("cause")
    if step is None or cause not in step.ids or kind in SILENT_OBSERVATIONS:
        ctx.drop(f"{kind} observations" + ("" if kind in SILENT_OBSERVATIONS else " (answering no open action)"))
        return
    content = event.get("content")
    if content is None:
        ctx.null("(event).content")
    step.results.append((step.ids.pop(cause), expect(content, str, "content", "a string") if content else ""))


def _other(chat: ChatSteps, event: dict[str, Any], system: list[str], tools: list[dict[str, Any]],
           ctx: RunContext) -> None:
    """A user or environment action, or the system prompt and the tools it declares (``args.tools``, in OpenAI's
    ``{type: function, function: {name, description, parameters}}`` form)."""
    kind = event.get("action")
    args: dict[str, Any] = expect(event.get("args", {}), dict, "args", "an object")
    if kind == "system":
        system.append(expect(args.get("content"), str, "args.content", "a string"))
        for k, tool in enumerate(expect(args.get("tools") or [], list, "args.tools", "a list of tool schemas")):
            at = f"args.tools[{k}]"
            function = expect(expect(tool, dict, at, "a tool schema object").get("function", tool), dict,
                              f"{at}.function", "an object")
            tools.append(tool_spec(function.get("name"), function.get("description"), function.get("parameters"),
                                   f"{at}.function"))
        ctx.unmapped(args, "(event).args", {"content", "tools"}, frozenset(args))
    elif kind == "message" and event.get("source") == "user":
        chat.user_text(expect(args.get("content"), str, "args.content", "a string"))
        ctx.unmapped(args, "(event).args", {"content"}, frozenset(args))
    else:
        ctx.drop(f"{event.get('source')} {kind} actions")
