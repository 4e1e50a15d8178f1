"""ATIF: the Agent Trajectory Interchange Format of Harbor and terminal-bench (``schema_version`` ATIF-v1.0 ... v1.7).

A run is one ATIF object: ``schema_version``, ``session_id``, ``agent``
(``name``, ``version``, ``model_name``), ``steps`` and optional ``notes``,
``final_metrics``, ``extra``, ``subagent_trajectories``. Each step has a
``source`` (``user``, ``agent`` or ``system``). What is mapped
(``docs/reference/importers.md`` lists it with what is dropped):

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
  screen for a step's N keystroke calls, mostly without ``source_call_id``,
  and for its finishing step, a keystroke call plus ``mark_task_complete``,
  one result naming only the keystroke call) are the step's observation,
  joined, and the step is marked ``observation_scope: "step"`` (counted,
  never refused);
* ``user`` steps after an agent step: the reply to a text action (its
  observation), see :class:`ChatSteps`; later ``system`` steps are dropped
  and counted;
* the task id: the run's ``task_id``/``id``, else the trial folder of a
  Harbor ``TRIAL/agent/trajectory.json`` (its ``result.json`` ``trial_name``
  when present), else ``session_id``; the reward: ``TRIAL/verifier/reward.txt``
  or ``TRIAL/result.json`` ``verifier_result.rewards.reward`` when present;
* ``agent``, ``session_id``, ``schema_version``, ``notes``, ``final_metrics``
  and ``extra`` go to ``metadata``;
* each embedded ``subagent_trajectories[]`` entry (v1.7) is a run of its own
  (:func:`convert_all`), task id ``PARENT/subagent-SESSION``, linked by
  ``metadata.parent_task_id``; a major version other than 1 (``ATIF-v2.0``)
  is refused, naming the version.

OpenAgents' ``tbench`` (a claude-code runner) writes a dialect of v1.4: a bare
``schema_version`` (``"1.4"``), calls as ``{id, name, arguments}``, and each
tool result as a ``system`` step of its own (``observation`` ``{type:
"tool_result", content, result: {success, output|error}}``, ``message``
``Tool result for <call id>``). It attaches the calls it has seen to the NEXT
agent text, so an agent step carries calls its model made before writing that
text (their results come earlier in the file). A run with such result steps
is read as the turns happened: each call becomes a step where its result
step is, with the agent text written just before it as the step's reasoning;
the carrying step's text starts the next turn (a text action when no result
follows it). ``result.success`` false is ``is_error``; ``result.output`` and
``.error`` repeat ``content`` (counted). Its ``extra.success`` is claude-code's
exit status, not the task's verdict, so it stays in ``metadata``, not
``outcome``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from interp.data.importers.common import (
    PART_JOIN, REASONING_JOIN, ChatSteps, RunContext, RunProblem, expect, field_pattern, holds_text, metadata_of,
    parse_arguments, text_of,
)

FORMAT = "atif"
DEFAULT_DOMAIN = "unknown"
USED = {"steps", "task_id", "id", "domain", "subagent_trajectories"}
STEP_USED = frozenset({"source", "message", "reasoning_content", "tool_calls", "observation"})
CALL_KNOWN = frozenset({"extra"})
RESULT_USED = frozenset({"source_call_id", "content", "subagent_trajectory_ref"})
RESULT_KNOWN = frozenset({"extra"})
# documented as dropped (counted): ids, timing, per-step model settings and token metrics
STEP_KNOWN = frozenset({"step_id", "timestamp", "model_name", "reasoning_effort", "metrics", "extra",
                        "is_copied_context", "llm_call_count"})
BARE_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?")  # tbench's schema_version ("1.4"), without "ATIF-v"
VERSION = re.compile(r"(?:ATIF-?v?)?(\d+)(?:\.\d+)*", re.IGNORECASE)  # ATIF-v1.7, 1.4: the major version
RESULT_STEP = "tool_result"  # observation.type of tbench's tool result steps
RESULT_FOR = re.compile(r"Tool result for (\S+)")  # their message, naming the call
RESULT_STEP_USED = frozenset({"type", "content", "result"})


def looks_like(record: object) -> bool:
    """Sniff (``interp import auto``): an object with ``steps`` whose ``schema_version`` starts with ``ATIF``, or
    is a bare version number beside an ``agent`` object and a ``session_id`` (tbench)."""
    if not isinstance(record, dict) or not isinstance(record.get("steps"), list):
        return False
    version = str(record.get("schema_version", ""))
    return version.upper().startswith("ATIF") or (BARE_VERSION.fullmatch(version) is not None
                                                  and isinstance(record.get("agent"), dict) and "session_id" in record)


def convert_all(record: dict[str, Any], ctx: RunContext) -> list[dict[str, Any] | RunProblem]:
    """The run and each of its embedded ``subagent_trajectories`` (ATIF v1.7) as a run of its own, linked to it by
    ``metadata.parent_task_id``; a subagent that cannot be converted is its own problem, the parent still comes."""
    main = convert(record, ctx)
    runs: list[dict[str, Any] | RunProblem] = [main]
    subagents = record.get("subagent_trajectories")
    for k, sub in enumerate(subagents if isinstance(subagents, list) else [], start=1):
        at = f"subagent_trajectories[{k - 1}]"
        try:
            expect(sub, dict, at, "an embedded ATIF trajectory object")
            runs.append(_convert(sub, ctx, (main["task_id"], k)))
        except RunProblem as exc:
            runs.append(RunProblem(f"{at}.{exc.where}", exc.message))
    return runs


def _check_version(record: dict[str, Any]) -> None:
    """Refuse a major version other than 1 (``ATIF-v2.0``), naming it: its fields may mean something else."""
    version = record.get("schema_version")
    if version is None:
        return
    found = VERSION.fullmatch(str(version).strip())
    if found is None:
        raise RunProblem("schema_version", f"unrecognised ATIF version {version!r}; expected ATIF-v1.x")
    if found.group(1) != "1":
        raise RunProblem("schema_version", f"ATIF major version {found.group(1)} ({version}) is not supported; "
                                           "this importer reads ATIF-v1.0 ... v1.x")


def convert(record: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """One ATIF run as a trajectory record (see the module docstring); its subagents: :func:`convert_all`."""
    return _convert(record, ctx, None)


def _convert(record: dict[str, Any], ctx: RunContext, parent: tuple[str, int] | None) -> dict[str, Any]:
    """A run, or the K-th subagent of run ``parent`` = (task id, K): task id ``PARENT/subagent-SESSION`` (or K), no
    reward of its own (the trial's verdict is the parent's)."""
    expect(record, dict, "(record)", "an ATIF object with 'steps'")
    _check_version(record)
    steps = expect(record.get("steps"), list, "steps", "a list of steps")
    system: list[str] = []
    chat = ChatSteps(ctx)
    for i, step in enumerate(steps):
        expect(step, dict, f"steps[{i}]", "a step object")
    turns = _ResultSteps(chat, steps, ctx) if any(_is_result_step(s) for s in steps) else None
    for i, step in enumerate(steps):
        where = f"steps[{i}]"
        ctx.unmapped(step, where, STEP_USED, STEP_KNOWN)
        source = step.get("source")
        if turns is not None and _is_result_step(step):
            turns.result(step, where)
        elif source == "agent":
            if turns is not None:
                turns.agent(step, where)
            else:
                _agent(chat, step, where, ctx)
        elif source == "user":
            if turns is not None:
                turns.flush()
            _agent_fields_on(step, where, ctx)
            chat.user_text(text_of(step.get("message"), f"{where}.message", ctx))
        elif source == "system":
            if chat.steps:
                ctx.drop("steps[] (source system, after the first agent step)")
            else:
                _agent_fields_on(step, where, ctx)
                system.append(text_of(step.get("message"), f"{where}.message", ctx))
        else:
            raise RunProblem(f"{where}.source", f"unknown source {source!r}; expected user, agent or system")
    if turns is not None:
        turns.finish()
    trial = _trial(Path(ctx.file)) if parent is None else None
    meta = metadata_of(record, USED)
    if parent is None:
        task_id = _task_id(record, trial, ctx)
    else:
        own = record.get("session_id")
        task_id = f"{parent[0]}/subagent-{own if isinstance(own, str) and own else parent[1]}"
        meta["parent_task_id"] = parent[0]
    out = {"task_id": task_id, "domain": ctx.domain_of(record, DEFAULT_DOMAIN),
           "system_prompt": REASONING_JOIN.join(system), "tools": [], **chat.trajectory("steps"),
           "outcome": _reward(trial)}
    return {**out, "metadata": meta} if meta else out


def _agent(chat: ChatSteps, step: dict[str, Any], where: str, ctx: RunContext) -> None:
    text = text_of(step.get("message"), f"{where}.message", ctx)
    reasoning = text_of(step.get("reasoning_content"), f"{where}.reasoning_content", ctx)
    calls = [_call(call, f"{where}.tool_calls[{j}]", ctx) for j, call in enumerate(step.get("tool_calls") or [])]
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
            ctx.drop(f"{field_pattern(at)}.subagent_trajectory_ref (a reference to another run: embedded ones are "
                     "imported as runs linked by metadata.parent_task_id)")
        texts.append(_content(result.get("content"), f"{at}.content", ctx))
    if calls and results and not _one_per_call(calls, results):
        # one result for the step's N calls (Terminus-2: the terminal screen after a batch of keystrokes, and its
        # finishing step: a keystroke call plus mark_task_complete, the one result naming the keystroke call)
        chat.step_result(PART_JOIN.join(texts))
        ctx.drop(f"{field_pattern(where)}.observation (results not one per call: kept whole as the step's "
                 "observation, observation_scope step)")
    elif calls:
        for k, (result, text) in enumerate(zip(results, texts)):
            chat.tool_result(result.get("source_call_id"), text, f"{where}.observation.results[{k}]")
    elif texts:  # results of an action that is no tool call: the observation of the text action
        chat.user_text(PART_JOIN.join(texts))


def _one_per_call(calls: list[tuple[Any, dict[str, Any]]], results: list[dict[str, Any]]) -> bool:
    """Whether the results answer the calls one each: as many, each naming a distinct call of the step (or none
    naming any, answered in order)."""
    named = [r.get("source_call_id") for r in results]
    if len(results) != len(calls):
        return False
    if all(n is None for n in named):
        return True
    return sorted(map(str, named)) == sorted(str(c[0]) for c in calls)


def _agent_fields_on(step: dict[str, Any], where: str, ctx: RunContext) -> None:
    """Count the agent-step fields a user or system step carries (only its message is kept): by path, a problem
    under ``--strict`` when they hold text."""
    for key in ("reasoning_content", "tool_calls", "observation"):
        value = step.get(key)
        if value is not None and value not in ("", [], {}):
            path = f"{field_pattern(where)}.{key}"
            ctx.drop(f"{path} (on a {step.get('source')} step)")
            if holds_text(value):
                ctx.dropped_text[path] += 1


def _call(call: object, at: str, ctx: RunContext) -> tuple[Any, dict[str, Any]]:
    """``(id, {"tool", "arguments"})`` of one call: ATIF's ``tool_call_id``/``function_name``, else tbench's
    ``id``/``name``."""
    obj: dict[str, Any] = expect(call, dict, at, "a tool call object")
    name_key = "name" if "function_name" not in obj and "name" in obj else "function_name"
    id_key = "id" if "tool_call_id" not in obj and "id" in obj else "tool_call_id"
    ctx.unmapped(obj, at, {id_key, name_key, "arguments"}, CALL_KNOWN)
    name = expect(obj.get(name_key), str, f"{at}.{name_key}", "the tool name as a string")
    return obj.get(id_key), {"tool": name, "arguments": parse_arguments(obj.get("arguments"), f"{at}.arguments")}


def _content(content: Any, at: str, ctx: RunContext) -> str:  # Any: a result's JSON content
    """A result's content as text: a string as is, a list of parts as text, another value as JSON; null is
    counted."""
    if content is None:
        ctx.null(at)
        return ""
    if isinstance(content, str):
        return content
    return text_of(content, at, ctx) if isinstance(content, list) else json.dumps(content)


def _is_result_step(step: object) -> bool:
    """Whether a step is one of tbench's tool result steps (``source: system``, observation type ``tool_result``)."""
    observation = step.get("observation") if isinstance(step, dict) else None
    return (isinstance(step, dict) and step.get("source") == "system" and isinstance(observation, dict)
            and observation.get("type") == RESULT_STEP)


class _ResultSteps:
    """tbench's dialect: each call becomes a step where its result step is, with the agent text before it."""

    def __init__(self, chat: ChatSteps, steps: list[Any], ctx: RunContext):
        self.chat, self.ctx = chat, ctx
        self.calls: dict[str, tuple[dict[str, Any], str]] = {}  # call id: (call, where it is carried)
        for i, step in enumerate(steps):
            for j, raw in enumerate((step.get("tool_calls") or []) if step.get("source") == "agent" else []):
                at = f"steps[{i}].tool_calls[{j}]"
                call_id, call = _call(raw, at, ctx)
                if not isinstance(call_id, str) or not call_id:
                    raise RunProblem(f"{at}.id", "expected the call id as a string (its result step names it)")
                if call_id in self.calls:
                    raise RunProblem(f"{at}.id", f"a second call with id {call_id!r} (first at "
                                                 f"{self.calls[call_id][1]})")
                self.calls[call_id] = (call, at)
        self.answered: set[str] = set()
        self.turn: tuple[str, str, str] | None = None  # (reasoning, text, where) of agent text not yet a step

    def agent(self, step: dict[str, Any], where: str) -> None:
        """An agent step: its text opens the next turn (its calls were read up front)."""
        if step.get("observation") is not None:
            raise RunProblem(f"{where}.observation", "an agent step's observation in a run whose tool results are "
                                                     "steps of their own (source system, type tool_result)")
        self.flush()
        self.turn = (text_of(step.get("reasoning_content"), f"{where}.reasoning_content", self.ctx),
                     text_of(step.get("message"), f"{where}.message", self.ctx), where)

    def result(self, step: dict[str, Any], where: str) -> None:
        """A tool result step: its call, with the open turn's text, as one step answered by this result."""
        message = step.get("message")
        found = RESULT_FOR.fullmatch(message) if isinstance(message, str) else None
        if found is None:
            raise RunProblem(f"{where}.message", f"expected 'Tool result for <call id>', got {message!r}")
        call_id = found.group(1)
        if call_id not in self.calls:
            raise RunProblem(f"{where}.message", f"tool result for call id {call_id!r} answers no tool call of "
                                                 "the run")
        if call_id in self.answered:
            raise RunProblem(f"{where}.message", f"a second tool result for call id {call_id!r}")
        self.answered.add(call_id)
        at = f"{where}.observation"
        observation = step["observation"]
        self.ctx.unmapped(observation, at, RESULT_STEP_USED, set())
        content = observation.get("content")
        status = observation.get("result") or {}
        expect(status, dict, f"{at}.result", "an object with 'success'")
        success = status.get("success")
        if success is not None:
            expect(success, bool, f"{at}.result.success", "a boolean")
        same = {k for k in ("output", "error") if content and status.get(k) == content}
        self.ctx.unmapped(status, f"{at}.result", {"success", *same}, set())
        for key in sorted(same):
            self.ctx.drop(f"{field_pattern(at)}.result.{key} (the same text as content)")
        reasoning, text, _ = self.turn or ("", "", where)
        self.turn = None
        self.chat.assistant(reasoning, text, [(call_id, self.calls[call_id][0])], where)
        self.chat.tool_result(call_id, _content(content, f"{at}.content", self.ctx), where, is_error=success is False)

    def flush(self) -> None:
        """The open turn's text, when no result followed it, as a text action."""
        if self.turn is not None:
            reasoning, text, where = self.turn
            self.turn = None
            self.chat.assistant(reasoning, text, [], where)

    def finish(self) -> None:
        """End of the run: the open text is the last step; a call no result step answers is refused."""
        self.flush()
        missing = [at for call_id, (_, at) in self.calls.items() if call_id not in self.answered]
        if missing:
            raise RunProblem(missing[0], "no tool result step ('Tool result for <call id>') answers this call")


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
