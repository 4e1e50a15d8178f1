"""tau2-bench result files: ``{info, tasks, simulations}``, one trajectory per simulation.

A result file is one JSON object written by ``tau2 run`` (or a bare list of
simulations, as leaderboard submissions hold them: each item one run, with no
``info`` or ``tasks``): ``info`` (the
agent, user simulator and environment: ``environment_info.domain_name``,
``policy``, ``tool_defs``), ``tasks`` (each with ``id`` and ``user_scenario``)
and ``simulations`` (each with ``task_id``, ``trial``, ``messages``,
``reward_info``, ``termination_reason``). What is mapped (``docs/reference/importers.md``
lists it with what is dropped):

* each simulation: one trajectory. Its ``messages`` are OpenAI-style chat
  messages (:func:`interp.data.importers.openai.convert_messages`): assistant
  ``tool_calls`` ``{id, name, arguments}``, tool results by their ``id``, the
  thinking of Claude agents in ``raw_data.thinking_blocks`` (every step that
  has it keeps it as its reasoning), ``reasoning_content`` of others;
* the agent's greeting that opens every chat comes before the task (the
  user's first message): dropped and counted (:class:`ChatSteps`);
* the system prompt: ``info.environment_info.policy`` (the domain policy the
  agent was given), else the simulation's own ``policy``; tools:
  ``info.environment_info.tool_defs`` when written;
* the domain: ``info.environment_info.domain_name``; the outcome:
  ``reward_info.reward``; the task id: the simulation's ``task_id``, with
  ``/trial-N`` when the file holds several trials;
* ``metadata``: the simulation's ``id``, ``trial``, ``termination_reason``,
  the agent and user models, and the task's ``user_scenario`` (when the file
  lists the task).

One problem skips its simulation only; the others of the file convert.
"""

from __future__ import annotations

from typing import Any

from interp.data.importers import openai
from interp.data.importers.common import REASONING_JOIN, RunContext, RunProblem, expect, object_at

FORMAT = "tau2"
INFO_USED = frozenset({"environment_info", "agent_info", "user_info"})
ENV_USED = frozenset({"policy", "tool_defs", "domain_name"})
SIM_USED = frozenset({"task_id", "trial", "messages", "reward_info", "termination_reason", "id", "policy"})
# documented as dropped: timings, costs, seeds; the rest of reward_info (checks behind the reward)
SIM_KNOWN = frozenset({"timestamp", "start_time", "end_time", "duration", "agent_cost", "user_cost", "seed",
                       "mode", "states", "ticks", "speech_environment", "review", "user_only_review", "info",
                       "auth_classification", "hallucination_retries_used", "hallucination_check",
                       "provider_session_id", "effect_timeline"})


def looks_like(record: object) -> bool:
    """Sniff (``interp import auto``): an object with a ``simulations`` list and an ``info`` object (or, without
    ``info``, whose first simulation is one: leaderboard submissions), or one
    simulation (``task_id``, ``messages``, ``reward_info``: an item of a bare list of simulations, as tau2-bench
    leaderboard submissions hold them)."""
    if not isinstance(record, dict):
        return False
    sims = record.get("simulations")
    if isinstance(sims, list):  # a result file; submissions without ``info``: known by their first simulation
        return "info" in record or (bool(sims) and looks_like(sims[0]) and "simulations" not in sims[0])
    return isinstance(record.get("messages"), list) and {"task_id", "reward_info"} <= set(record)


def _at(where: str, key: str) -> str:
    """The input path of ``key`` in the simulation at ``where`` (empty: the record is the simulation)."""
    return f"{where}.{key}" if where else key


def convert(record: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """The first simulation's trajectory (one run); :func:`convert_all` converts every one."""
    first = convert_all(record, ctx)[0]
    if isinstance(first, RunProblem):
        raise first
    return first


def convert_all(record: dict[str, Any], ctx: RunContext) -> list[dict[str, Any] | RunProblem]:
    """Every simulation of a result file as a trajectory, or the problem that skips it."""
    expect(record, dict, "(record)", "a tau2-bench result object with 'simulations'")
    if "simulations" not in record and looks_like(record):  # one simulation of a bare list: no info, no tasks
        try:
            return [_simulation(record, "", {}, {}, {}, False, ctx)]
        except RunProblem as exc:
            return [exc]
    sims = expect(record.get("simulations"), list, "simulations", "a list of simulations")
    if not sims:
        raise RunProblem("simulations", "no simulations in the result file")
    info = object_at(record, "info")
    env = object_at(info, "environment_info")
    tasks = {str(t.get("id")): t for t in record.get("tasks") or [] if isinstance(t, dict)}
    _count_file_fields(record, info, env, ctx)
    trials = len({s.get("trial") for s in sims if isinstance(s, dict)})
    out: list[dict[str, Any] | RunProblem] = []
    for i, sim in enumerate(sims):
        try:
            out.append(_simulation(expect(sim, dict, f"simulations[{i}]", "a simulation object"),
                                   f"simulations[{i}]", info, env, tasks, trials > 1, ctx))
        except RunProblem as exc:
            out.append(exc)
    return out


def _count_file_fields(record: dict[str, Any], info: dict[str, Any], env: dict[str, Any], ctx: RunContext) -> None:
    """Count, once per file, what of ``info`` and ``tasks`` no trajectory keeps (by path; documented drops)."""
    ctx.unmapped(info, "info", INFO_USED, set(info))
    ctx.unmapped(env, "info.environment_info", ENV_USED, set(env))
    for key in ("agent_info", "user_info"):
        if isinstance(info.get(key), dict):
            ctx.unmapped(info[key], f"info.{key}", {"llm"}, set(info[key]))
    for i, task in enumerate(record.get("tasks") or []):
        if isinstance(task, dict):
            ctx.unmapped(task, f"tasks[{i}]", {"id", "user_scenario"}, set(task))
    ctx.unmapped(record, "(file)", {"info", "tasks", "simulations"}, set(record))


def _simulation(sim: dict[str, Any], where: str, info: dict[str, Any], env: dict[str, Any],
                tasks: dict[str, Any], several_trials: bool, ctx: RunContext) -> dict[str, Any]:
    system, chat = openai.convert_messages(sim.get("messages"), _at(where, "messages"), ctx)
    ctx.unmapped(sim, where or "(simulation)", SIM_USED, SIM_KNOWN)
    reward_info = object_at(sim, "reward_info")
    ctx.unmapped(reward_info, _at(where, "reward_info"), {"reward"}, set(reward_info))  # the checks behind it
    reward = reward_info.get("reward")
    own_id = ctx.task_id(sim) if ctx.id_from else str(sim.get("task_id", ""))
    if not own_id:
        raise RunProblem(_at(where, "task_id"), "expected the simulation's task id")
    if several_trials and not ctx.id_from:
        own_id = f"{own_id}/trial-{sim.get('trial')}"
    task = tasks.get(str(sim.get("task_id")))
    agent, user = info.get("agent_info") or {}, info.get("user_info") or {}
    meta = {"simulation_id": sim.get("id"), "trial": sim.get("trial"),
            "termination_reason": sim.get("termination_reason"),
            "agent_llm": agent.get("llm") if isinstance(agent, dict) else None,
            "user_llm": user.get("llm") if isinstance(user, dict) else None}
    if isinstance(task, dict) and task.get("user_scenario") is not None:
        meta["user_scenario"] = task["user_scenario"]
    policy = env.get("policy") if isinstance(env.get("policy"), str) else sim.get("policy")  # newer: per simulation
    policy = policy if isinstance(policy, str) else ""
    domain = env.get("domain_name") if isinstance(env.get("domain_name"), str) and env["domain_name"] else "unknown"
    return {"task_id": own_id, "domain": ctx.domain or domain,
            "system_prompt": REASONING_JOIN.join([policy, *system]) if system else policy,
            "tools": openai.tools_of(env.get("tool_defs"), "info.environment_info.tool_defs"),
            **chat.trajectory(_at(where, "messages")),
            "outcome": {"reward": reward} if isinstance(reward, (int, float)) and not isinstance(reward, bool) else {},
            "metadata": {k: v for k, v in meta.items() if v is not None}}
