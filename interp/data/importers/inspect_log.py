"""Inspect AI evaluation logs (``.eval`` and ``.json``): one trajectory per sample and epoch.

The log is read with the ``inspect_ai`` package's own reader
(``inspect_ai.log.read_eval_log``; the optional extra ``inspect``), never by
hand, so every log version it reads is read. What is mapped
(``docs/reference/importers.md`` lists it with what is dropped):

* each sample and epoch: one trajectory, its ``messages`` a chat
  (:class:`ChatSteps`): ``system`` messages before the first assistant turn
  are the system prompt, ``user`` text before it the task;
* each assistant message: one step. ``ContentReasoning`` parts are the
  reasoning (redacted ones hold no readable text: dropped, counted),
  ``ContentText`` parts the visible text, ``tool_calls`` (``function``,
  ``arguments``) the action;
* ``ChatMessageTool`` results answer the calls by ``tool_call_id``; a result
  with an ``error`` marks the step ``is_error``;
* scores: the first scorer's value is the outcome (``C``/``I``/``P``/``N``
  as reward 1, 0, 0.5, 0 and success for ``C``/``I``; a number as the
  reward); every score, the sample's ``target``, ``metadata``, ``epoch`` and
  the eval's task and model go to ``metadata``;
* the task id: the sample id, with ``/epoch-N`` when the log has several epochs;
* tools: the ``tools`` offered in the sample's model events (``ToolInfo``:
  name, description, parameters), each name once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from interp.data.importers.common import (
    PART_JOIN, REASONING_JOIN, ChatSteps, RunContext, RunProblem, field_pattern, join_reasoning, tool_spec,
)
from interp.data.importers.reader import EVAL_FILE

FORMAT = "inspect"
DEFAULT_DOMAIN = "unknown"
LETTERS = {"C": (1.0, True), "I": (0.0, False), "P": (0.5, None), "N": (0.0, False)}  # inspect_ai's score letters
# sample fields with no trajectory field, counted when present: the event transcript, the raw model output,
# the solver store, usage and timing, sandbox and limit records
SAMPLE_DROPPED = ("events", "output", "store", "model_usage", "total_time", "working_time", "attachments",
                  "error_retries", "limit", "sandbox", "files", "setup", "error")
CALL_DROPPED = ("parse_error", "view")  # tool-call fields with no trajectory field: counted when set
NEEDS = "reading Inspect logs needs the inspect_ai package: pip install 'reasoning-persistence[inspect]'"


def looks_like(record: object) -> bool:
    """Sniff (``interp import auto``): a ``.eval`` file, or a JSON log with ``version``, ``eval`` and ``status``."""
    return isinstance(record, dict) and (EVAL_FILE in record or {"version", "eval", "status"} <= set(record))


def convert(record: object, ctx: RunContext) -> dict[str, Any]:
    """The first sample's trajectory (one run); :func:`convert_all` converts every one."""
    first = convert_all(record, ctx)[0]
    if isinstance(first, RunProblem):
        raise first
    return first


def convert_all(record: object, ctx: RunContext) -> list[dict[str, Any] | RunProblem]:
    """Every sample (and epoch) of the log file ``ctx.file`` as a trajectory, or the problem that skips it."""
    try:
        from inspect_ai.log import read_eval_log
    except ImportError:
        raise RunProblem("(file)", NEEDS) from None
    try:
        log = read_eval_log(str(Path(ctx.file)))
    except Exception as exc:  # noqa: BLE001 - the reader's own validation errors, whatever their type
        raise RunProblem("(file)", f"inspect_ai could not read the log: {str(exc).splitlines()[0][:200]}") from None
    samples = log.samples or []
    if not samples:
        raise RunProblem("samples", "the log holds no samples (written with log_samples off?)")
    epochs = len({s.epoch for s in samples}) > 1
    out: list[dict[str, Any] | RunProblem] = []
    for i, sample in enumerate(samples):
        try:
            out.append(_sample(sample, f"samples[{i}]", log, epochs, ctx))
        except RunProblem as exc:
            out.append(exc)
    return out


def _sample(sample: Any, where: str, log: Any, epochs: bool, ctx: RunContext) -> dict[str, Any]:
    system: list[str] = []
    chat = ChatSteps(ctx)
    for j, msg in enumerate(sample.messages):
        at = f"{where}.messages[{j}]"
        if msg.role == "system":
            if chat.steps:
                ctx.drop("system messages after the first assistant turn")
            else:
                system.append(_text(msg.content, at, ctx)[1])
        elif msg.role == "user":
            chat.user_text(_text(msg.content, at, ctx)[1])
        elif msg.role == "assistant":
            reasoning, text = _text(msg.content, at, ctx)
            calls = [(c.id, {"tool": c.function, "arguments": dict(c.arguments or {})})
                     for c in (msg.tool_calls or [])]
            for c in msg.tool_calls or []:
                for name in CALL_DROPPED:
                    if getattr(c, name, None) not in (None, "", {}, []):
                        ctx.drop(f"samples[].messages[].tool_calls[].{name}")
            chat.assistant(reasoning, text, calls, at)
        elif msg.role == "tool":
            chat.tool_result(msg.tool_call_id, _text(msg.content, at, ctx)[1], at, is_error=msg.error is not None)
    for name in SAMPLE_DROPPED:
        if getattr(sample, name, None) not in (None, [], {}, "", 0):
            ctx.drop(f"samples[].{name}")
    scores = {name: score.model_dump(mode="json") for name, score in (sample.scores or {}).items()}
    sid = str(sample.id)
    meta = {"task": log.eval.task, "model": log.eval.model, "epoch": sample.epoch, "target": sample.target,
            "scores": scores, "sample_metadata": sample.metadata or {}}
    return {"task_id": ctx.task_id({"id": sid}) if ctx.id_from else (f"{sid}/epoch-{sample.epoch}" if epochs else sid),
            "domain": ctx.domain or DEFAULT_DOMAIN, "system_prompt": REASONING_JOIN.join(system),
            "tools": _tools(sample.events or []),
            **chat.trajectory(f"{where}.messages"), "outcome": _outcome(scores),
            "metadata": {k: v for k, v in meta.items() if v not in (None, {}, "")}}


def _tools(events: list[Any]) -> list[dict[str, Any]]:
    """The tools offered to the model: the ``tools`` of the sample's model events, each name once, first seen
    first (a ``ToolInfo``: name, description, parameters as JSON Schema)."""
    seen: dict[str, dict[str, Any]] = {}
    for event in events:
        if getattr(event, "event", None) != "model":
            continue
        for info in getattr(event, "tools", None) or []:
            if info.name not in seen:
                params = info.parameters.model_dump(mode="json", exclude_none=True)
                seen[info.name] = tool_spec(info.name, info.description, params, "samples[].events[].tools[]")
    return list(seen.values())


def _text(content: Any, where: str, ctx: RunContext) -> tuple[str, str]:
    """``(reasoning, text)`` of a message content: a string, or ``ContentReasoning`` and ``ContentText`` parts."""
    if isinstance(content, str):
        return "", content
    reasoning, texts = [], []
    for part in content:
        if part.type == "reasoning":
            if getattr(part, "redacted", False):
                ctx.drop(f"{field_pattern(where)}.content[] (redacted reasoning)")
            else:
                reasoning.append(part.reasoning)
        elif part.type == "text":
            texts.append(part.text)
        else:
            ctx.drop(f"{part.type} content parts")
    return join_reasoning(reasoning), PART_JOIN.join(texts)


def _outcome(scores: dict[str, Any]) -> dict[str, Any]:
    """``{reward, success}`` from the first scorer's value (a letter or a number)."""
    if not scores:
        return {}
    value = next(iter(scores.values())).get("value")
    if isinstance(value, str) and value in LETTERS:
        reward, success = LETTERS[value]
        return {"reward": reward, **({"success": success} if success is not None else {})}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"reward": float(value)}
    return {}
