"""ATIF: the Agent Trajectory Interchange Format of Harbor and terminal-bench (``schema_version`` ATIF-v1.0 ... v1.7).

A run is one ATIF object: ``schema_version``, ``session_id``, ``agent``
(``name``, ``version``, ``model_name``), ``steps`` and optional ``notes``,
``final_metrics``, ``extra``, ``subagent_trajectories``. Each step has a
``source`` (``user``, ``agent`` or ``system``). What is mapped
(``data/README.md`` lists it with what is dropped):

* ``system`` steps before the first agent step: the system prompt; ``user``
  steps before it: the task (an ATIF run that never reaches an agent step has
  no step and is skipped with that reason);
* each ``agent`` step: one step. ``reasoning_content`` is the reasoning;
  ``tool_calls`` (``tool_call_id``, ``function_name``, ``arguments``) the
  action, one call or a parallel ``{"calls": [...]}``; ``message`` beside
  calls is the reasoning when there is none (a ReAct thought, the
  Analysis/Plan text of terminus agents), else the step's ``assistant_text``;
  with no call, ``message`` is a text action (the last one the final answer);
* ``observation.results[]`` answer the calls by ``source_call_id`` (in order
  when absent); the results of a step without calls are its observation;
  results that are not one per call (Harbor's Terminus-2 writes one terminal
  screen for a step's N keystroke calls, mostly without ``source_call_id``)
  are the step's observation, joined, and the step is marked
  ``observation_scope: "step"`` (counted, never refused);
* ``user`` steps after an agent step: the reply to a text action (its
  observation), see :class:`ChatSteps`; later ``system`` steps are dropped
  and counted;
* the task id: the run's ``task_id``/``id``, else the trial folder of a
  Harbor ``TRIAL/agent/trajectory.json`` (its ``result.json`` ``trial_name``
  when present), else ``session_id``; the reward: ``TRIAL/verifier/reward.txt``
  or ``TRIAL/result.json`` ``verifier_result.rewards.reward`` when present;
* ``agent``, ``session_id``, ``schema_version``, ``notes``, ``final_metrics``
  and ``extra`` go to ``metadata``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from interp.data.importers.common import (
    PART_JOIN, REASONING_JOIN, ChatSteps, RunContext, RunProblem, expect, field_pattern, metadata_of,
    parse_arguments, text_of,
)

FORMAT = "atif"
DEFAULT_DOMAIN = "unknown"
USED = {"steps", "task_id", "id", "domain", "subagent_trajectories"}
STEP_USED = frozenset({"source", "message", "reasoning_content", "tool_calls", "observation"})
CALL_USED = frozenset({"tool_call_id", "function_name", "arguments"})
CALL_KNOWN = frozenset({"extra"})
RESULT_USED = frozenset({"source_call_id", "content", "subagent_trajectory_ref"})
RESULT_KNOWN = frozenset({"extra"})
# documented as dropped (counted): ids, timing, per-step model settings and token metrics
STEP_KNOWN = frozenset({"step_id", "timestamp", "model_name", "reasoning_effort", "metrics", "extra",
                        "is_copied_context", "llm_call_count"})


def looks_like(record: object) -> bool:
    """Sniff (``interp import auto``): an object whose ``schema_version`` starts with ``ATIF``, with ``steps``."""
    return (isinstance(record, dict) and str(record.get("schema_version", "")).upper().startswith("ATIF")
            and isinstance(record.get("steps"), list))


def convert(record: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """One ATIF run as a trajectory record (see the module docstring)."""
    expect(record, dict, "(record)", "an ATIF object with 'steps'")
    steps = expect(record.get("steps"), list, "steps", "a list of steps")
    system: list[str] = []
    chat = ChatSteps(ctx)
    for i, step in enumerate(steps):
        where = f"steps[{i}]"
        expect(step, dict, where, "a step object")
        ctx.unmapped(step, where, STEP_USED, STEP_KNOWN)
        source = step.get("source")
        if source == "agent":
            _agent(chat, step, where, ctx)
        elif source == "user":
            chat.user_text(text_of(step.get("message"), f"{where}.message", ctx))
        elif source == "system":
            if chat.steps:
                ctx.drop("steps[] (source system, after the first agent step)")
            else:
                system.append(text_of(step.get("message"), f"{where}.message", ctx))
        else:
            raise RunProblem(f"{where}.source", f"unknown source {source!r}; expected user, agent or system")
    subagents = record.get("subagent_trajectories")
    if isinstance(subagents, list) and subagents:
        ctx.drop("subagent_trajectories[] (runs of their own, not imported)", len(subagents))
    trial = _trial(Path(ctx.file))
    out = {"task_id": _task_id(record, trial, ctx), "domain": ctx.domain_of(record, DEFAULT_DOMAIN),
           "system_prompt": REASONING_JOIN.join(system), "tools": [], **chat.trajectory("steps"),
           "outcome": _reward(trial)}
    meta = metadata_of(record, USED)
    return {**out, "metadata": meta} if meta else out


def _agent(chat: ChatSteps, step: dict[str, Any], where: str, ctx: RunContext) -> None:
    text = text_of(step.get("message"), f"{where}.message", ctx)
    reasoning = text_of(step.get("reasoning_content"), f"{where}.reasoning_content", ctx)
    calls = []
    for j, call in enumerate(step.get("tool_calls") or []):
        at = f"{where}.tool_calls[{j}]"
        expect(call, dict, at, "a tool call object")
        ctx.unmapped(call, at, CALL_USED, CALL_KNOWN)
        name = expect(call.get("function_name"), str, f"{at}.function_name", "the tool name as a string")
        calls.append((call.get("tool_call_id"), {"tool": name, "arguments": parse_arguments(call.get("arguments"),
                                                                                             f"{at}.arguments")}))
    chat.assistant(reasoning, text, calls, where)
    observation = step.get("observation")
    if observation is None:
        return
    expect(observation, dict, f"{where}.observation", "an object with 'results'")
    ctx.unmapped(observation, f"{where}.observation", {"results"}, set())
    results = expect(observation.get("results"), list, f"{where}.observation.results", "a list of results")
    texts = []
    for k, result in enumerate(results):
        at = f"{where}.observation.results[{k}]"
        expect(result, dict, at, "a result object")
        ctx.unmapped(result, at, RESULT_USED, RESULT_KNOWN)
        if result.get("subagent_trajectory_ref"):
            ctx.drop(f"{field_pattern(at)}.subagent_trajectory_ref (a reference to another run)")
        content = result.get("content")
        if content is None:
            ctx.null(f"{at}.content")
        texts.append("" if content is None else content if isinstance(content, str) else (
            text_of(content, f"{at}.content", ctx) if isinstance(content, list) else json.dumps(content)))
    ids = {c[0] for c in calls if c[0] is not None}
    if calls and len(results) != len(calls) and not all(r.get("source_call_id") in ids for r in results):
        # one result for the step's N calls (Terminus-2: the terminal screen after a batch of keystrokes)
        chat.step_result(PART_JOIN.join(texts))
        ctx.drop(f"{field_pattern(where)}.observation (results not one per call: kept whole as the step's "
                 "observation, observation_scope step)")
    elif calls:
        for k, (result, text) in enumerate(zip(results, texts)):
            chat.tool_result(result.get("source_call_id"), text, f"{where}.observation.results[{k}]")
    elif texts:  # results of an action that is no tool call: the observation of the text action
        chat.user_text(PART_JOIN.join(texts))


def _trial(file: Path) -> Path | None:
    """The Harbor trial folder of ``TRIAL/agent/trajectory.json``, else None."""
    return file.parent.parent if file.parent.name == "agent" else None


def _result(trial: Path | None) -> dict[str, Any]:
    path = trial / "result.json" if trial is not None else None
    if path is None or not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError):
        raise RunProblem(f"{path}", "the trial's result.json is not valid JSON") from None
    return value if isinstance(value, dict) else {}


def _task_id(record: dict[str, Any], trial: Path | None, ctx: RunContext) -> str:
    if ctx.id_from or any(isinstance(record.get(k), (str, int)) and str(record[k]) for k in ("task_id", "id")):
        return ctx.task_id(record)
    name = _result(trial).get("trial_name") or (trial.name if trial is not None else None)
    if isinstance(name, str) and name:
        return name
    session = record.get("session_id")
    return session if isinstance(session, str) and session else ctx.task_id(record)


def _reward(trial: Path | None) -> dict[str, Any]:
    """``{reward}`` from the trial's ``verifier/reward.txt`` or ``result.json``, when either is there."""
    if trial is None:
        return {}
    txt = trial / "verifier" / "reward.txt"
    if txt.is_file():
        try:
            return {"reward": float(txt.read_text(encoding="utf-8").strip())}
        except ValueError:
            raise RunProblem(str(txt), "reward.txt does not hold a number") from None
    verifier = _result(trial).get("verifier_result")
    rewards = verifier.get("rewards") if isinstance(verifier, dict) else None
    reward = rewards.get("reward") if isinstance(rewards, dict) else None
    return {"reward": reward} if isinstance(reward, (int, float)) and not isinstance(reward, bool) else {}
