"""``interp study``: a paired online study. One task set runs through the proxy (``interp.serve.app``) once per
history policy, with the same agent, tasks and seed; the table reports each policy's reward, tokens by kind, cost
under a price table and, against ``full``, the reward change and the amplification decomposition of the token
change (``interp.serve.runlog.paired_document``), all with task-bootstrap CIs: the papers' online tables, for
one's own agent and provider.

**Agents** (``StudyConfig.agent``):

- ``python:MODULE:FUNCTION``: a callable ``FUNCTION(call: AgentCall) -> float`` run once per task of the tasks
  file (JSON Lines, one object per line with a unique string ``task_id``; the rest is the agent's). It talks to
  ``call.base_url`` with ``call.api_key``, sends ``call.headers`` (``X-Interp-Session: <task_id>``: one task is
  one session of the run log) on every request, samples with ``call.seed``, and returns the task's reward.
  :func:`chat_agent` is a scripted one (a tool loop that answers each tool call from the task's list).
- ``inspect:TASK``: an Inspect AI task (``file.py@name`` or a registered name) evaluated once per policy through
  Inspect's OpenAI-compatible provider (``openai-api/interp/<policy>``) with ``seed``; its solver is wrapped so
  every model call carries ``X-Interp-Session: <sample id>#<epoch>`` (:func:`named_sessions`: without it the
  epochs of a sample share one session, the hash of their common opening). A task is a (sample, epoch); its
  reward is the sample's first score as a float (``inspect_ai.scorer.value_to_float``).

**Output folder**: ``runs/<policy stem>/log`` (the proxy's run log), ``runs/<policy stem>/rewards.json``
(``REWARDS_FIELDS``, written when that policy's run completes: a rerun with the same agent, seed and tasks
reuses it, a run without it is started again from scratch) and ``study.json`` (``STUDY_FIELDS``). Every file is
written atomically.

``rewards.json`` (``REWARDS_FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``policy`` | ``[]`` | str | - | the policy the run used |
| ``agent`` | ``[]`` | str | - | the agent spec |
| ``seed`` | ``[]`` | int | - | the seed given to the agent |
| ``rewards`` | ``{...}`` | object | reward | task id -> reward |

``study.json`` (``STUDY_FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``agent`` | ``[]`` | str | - | the agent spec (python:MODULE:FUNCTION or inspect:TASK) |
| ``upstream`` | ``[]`` | str | - | the upstream base URL |
| ``policies`` | ``[n_policies]`` | str | - | the policies run, full first |
| ``tasks`` | ``[n_tasks]`` | str | - | task ids (sessions) of the study, in every policy's run |
| ``per_task`` | ``[n_rows] of {task_id, policy, reward, requests, prompt_tokens, completion_tokens}`` | object | reward; tokens | one row per (task, policy): its reward and the usage the upstream reported over its answered requests |
| ``table`` | ``[n_policies] of {policy, n_tasks, reward, reward_ci, reward_change, reward_change_ci, requests, uncached_input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, total_tokens, cost_usd, total_change, direct_change, request_count_change, context_change, amplification, amplification_ci, saving_ratio, saving_ratio_ci, refused}`` | object | reward; tokens; USD | per policy: mean reward over tasks and its change from full (paired by task), each with its task-bootstrap percentile 95 % CI; token sums by kind over the tasks (uncached input = prompt - cache read - cache write, total = prompt + completion); cost under the prices (null without); the decomposition of the token change from full and the amplification and saving ratio with CIs (paired.json of interp tokens; null for full, or refused with the reason) |
| ``paired`` | ``{...}`` | object | - | policy -> its paired document against full (PAIRED_FIELDS of interp.serve.runlog, without schema) |
| ``prices`` | ``{...}`` | object or null | USD / 1M tokens | the price table given (null: none) |
| ``n_boot`` | ``[]`` | int | - | bootstrap resamples |
| ``config`` | ``{...}`` | object | - | the frozen config of the analysis that made this file: dataclasses.asdict, tuples as lists (interp.record.config_from builds it back) |
| ``provenance`` | ``{...}`` | object | - | what ran (interp.record): model, revision, dtype (resolved), device, seeds, package, version, inputs (name -> sha256) |
"""

from __future__ import annotations

import importlib
import json
import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from interp.io import atomic_write_json, read_json, safe_stem
from interp.params import N_BOOT, Check, ConfigError, Integer, Items, param, validate
from interp.record import RECORD_FIELDS, record
from interp.schema import Field, schema_dict
from interp.stats import task_bootstrap_ci

SESSION_HEADER = "X-Interp-Session"
BASE_POLICY = "full"
SCRIPTED_AGENT = "python:interp.serve.study:chat_agent"
REWARDS_FIELDS = (
    Field("policy", "[]", "str", "-", "the policy the run used"),
    Field("agent", "[]", "str", "-", "the agent spec"),
    Field("seed", "[]", "int", "-", "the seed given to the agent"),
    Field("rewards", "{...}", "object", "reward", "task id -> reward"),
)
TABLE_KEYS = ("policy", "n_tasks", "reward", "reward_ci", "reward_change", "reward_change_ci", "requests",
              "uncached_input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "total_tokens",
              "cost_usd", "total_change", "direct_change", "request_count_change", "context_change", "amplification",
              "amplification_ci", "saving_ratio", "saving_ratio_ci", "refused")
STUDY_FIELDS = (
    Field("schema", "{...}", "object", "-", "this table: {field: {shape, dtype, units, doc}}"),
    Field("agent", "[]", "str", "-", "the agent spec (python:MODULE:FUNCTION or inspect:TASK)"),
    Field("upstream", "[]", "str", "-", "the upstream base URL"),
    Field("policies", "[n_policies]", "str", "-", "the policies run, full first"),
    Field("tasks", "[n_tasks]", "str", "-", "task ids (sessions) of the study, in every policy's run"),
    Field("per_task", "[n_rows] of {task_id, policy, reward, requests, prompt_tokens, completion_tokens}", "object",
          "reward; tokens", "one row per (task, policy): its reward and the usage the upstream reported over its "
          "answered requests"),
    Field("table", f"[n_policies] of {{{', '.join(TABLE_KEYS)}}}", "object", "reward; tokens; USD",
          "per policy: mean reward over tasks and its change from full (paired by task), each with its "
          "task-bootstrap percentile 95 % CI; token sums by kind over the tasks (uncached input = prompt - cache "
          "read - cache write, total = prompt + completion); cost under the prices (null without); the "
          "decomposition of the token change from full and the amplification and saving ratio with CIs "
          "(paired.json of interp tokens; null for full, or refused with the reason)"),
    Field("paired", "{...}", "object", "-", "policy -> its paired document against full (PAIRED_FIELDS of "
          "interp.serve.runlog, without schema)"),
    Field("prices", "{...}", "object or null", "USD / 1M tokens", "the price table given (null: none)"),
    Field("n_boot", "[]", "int", "-", "bootstrap resamples"),
    *RECORD_FIELDS,
)


def _serve_policy(spec: str) -> None:
    """ValueError with the reason unless ``spec`` is a policy the proxy runs."""
    from interp.serve.policy import parse_serve_policy

    parse_serve_policy(spec)


def _agent_spec(spec: str) -> None:
    """ValueError unless ``spec`` is ``python:MODULE:FUNCTION`` or ``inspect:TASK``."""
    kind, _, rest = spec.partition(":")
    if kind == "python" and all(p.strip() for p in rest.partition(":")[::2]) and ":" in rest:
        return
    if kind == "inspect" and rest.strip():
        return
    raise ValueError(f"agent {spec!r}: expected python:MODULE:FUNCTION or inspect:TASK")


@dataclass(frozen=True)
class StudyConfig:
    """A paired online study (``interp study``): the agent, the policies it runs under (``full``, the base, among
    them), the seed every run's agent gets and the bootstrap resamples of the CIs."""

    analysis: ClassVar[str] = "study"
    precision: ClassVar[str] = "float32"  # only an iclr policy runs a model (the proxy's sensor)

    agent: str = param(SCRIPTED_AGENT, Check(_agent_spec, "python:MODULE:FUNCTION or inspect:TASK"),
                       "The agent: python:MODULE:FUNCTION (called per task of --tasks; default the scripted "
                       "chat_agent) or inspect:TASK (an Inspect AI task, file.py@name).")
    policies: tuple[str, ...] = param((BASE_POLICY, "delete_all_reasoning", "observation_masking:m=5"),
                                      Items(Check(_serve_policy, "a policy of interp serve"), unique=True),
                                      "Policies to run, comma list (';' separates one policy's parameters); full, "
                                      "the base, must be among them.")
    seed: int = param(0, Integer(0), "Seed every run's agent samples with (the same under each policy).")
    n_boot: int = param(N_BOOT, Integer(0), "Task-bootstrap resamples of the CIs (0: none).")

    def __post_init__(self) -> None:
        if isinstance(self.policies, str):  # the command line's comma list, ';' inside one policy
            object.__setattr__(self, "policies", tuple(p.replace(";", ",").strip()
                                                       for p in self.policies.split(",") if p.strip()))
        validate(self)
        if BASE_POLICY not in self.policies:
            raise ConfigError("policies", f"must include {BASE_POLICY} (the base every other policy is paired with)")
        object.__setattr__(self, "policies", (BASE_POLICY, *(p for p in self.policies if p != BASE_POLICY)))


@dataclass(frozen=True)
class AgentCall:
    """What a Python agent gets for one task: the task, where to send its requests and with what, its seed."""

    task: Mapping[str, Any]
    base_url: str
    api_key: str
    headers: Mapping[str, str]
    seed: int


Agent = Callable[[AgentCall], float]


def read_tasks(path: Path) -> list[dict[str, Any]]:
    """The tasks file (JSON Lines of objects with a unique string ``task_id``), checked: a bad line is a
    ValueError naming file, line and field."""
    tasks, seen = [], set()
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            task = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not JSON ({exc.msg})") from None
        tid = task.get("task_id") if isinstance(task, dict) else None
        if not isinstance(tid, str) or not tid.strip():
            raise ValueError(f"{path}:{n}: task_id: expected a non-blank string")
        if tid in seen:
            raise ValueError(f"{path}:{n}: task_id: {tid!r} repeated")
        seen.add(tid)
        tasks.append(task)
    if not tasks:
        raise ValueError(f"{path}: no tasks")
    return tasks


def load_agent(spec: str) -> Agent:
    """The callable a ``python:MODULE:FUNCTION`` spec names (a ValueError naming what is missing)."""
    module, _, name = spec.removeprefix("python:").partition(":")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"agent {spec!r}: {exc}") from None
    if not callable(found):
        raise ValueError(f"agent {spec!r}: not callable")
    return found


def _reward(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: the agent's reward must be a finite number, got {value!r}")
    return float(value)


def run_python(agent: Agent, tasks: Sequence[Mapping[str, Any]], url: str, token: str, seed: int
               ) -> dict[str, float]:
    """Each task through ``agent`` against the proxy at ``url``: task id -> reward."""
    return {t["task_id"]: _reward(agent(AgentCall(t, url, token, {SESSION_HEADER: t["task_id"]}, seed)),
                                  f"task {t['task_id']}") for t in tasks}


def session_name(sample_id: object, epoch: int) -> str:
    """The session (task id) of an Inspect sample's epoch."""
    return f"{sample_id}#{epoch}"


def named_sessions(inner: Any) -> Any:  # Any: Inspect's Solver (an optional dependency)
    """An Inspect solver running ``inner`` with every model call carrying ``X-Interp-Session: <sample>#<epoch>``."""
    from inspect_ai.solver import Generate, TaskState, solver

    @solver("interp_named_sessions")
    def wrap() -> Any:  # Any: Inspect's Solver (an optional dependency)
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            header = {SESSION_HEADER: session_name(state.sample_id, state.epoch)}

            async def named(state: TaskState, tool_calls: Any = "loop",  # Any: Inspect's generate arguments
                            **kwargs: Any) -> TaskState:  # Any: passed through to Inspect's generate
                kwargs["extra_headers"] = {**(kwargs.get("extra_headers") or {}), **header}
                return await generate(state, tool_calls=tool_calls, **kwargs)

            return await inner(state, named)

        return solve

    return wrap()


def run_inspect(spec: str, url: str, token: str, seed: int, log_dir: Path, policy: str) -> dict[str, float]:
    """The Inspect task ``spec`` evaluated through the proxy at ``url``: ``<sample>#<epoch>`` -> reward."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai import task_with
    from inspect_ai._eval.loader import load_tasks
    from inspect_ai.scorer import value_to_float

    loaded = load_tasks([spec.removeprefix("inspect:")])
    if len(loaded) != 1:
        raise ValueError(f"agent {spec!r}: names {len(loaded)} Inspect tasks; give one (file.py@name)")
    task = task_with(loaded[0], solver=named_sessions(loaded[0].solver))
    log = inspect_eval(task, model=f"openai-api/interp/{safe_stem(policy)}", model_base_url=url,
                       model_args={"api_key": token}, seed=seed, log_dir=str(log_dir), display="none")[0]
    if log.status != "success" or not log.samples:
        raise ValueError(f"agent {spec!r} under {policy}: Inspect ended {log.status}: {log.error}")
    to_float = value_to_float()
    rewards = {}
    for s in log.samples:
        if not s.scores:
            raise ValueError(f"agent {spec!r}: sample {s.id} epoch {s.epoch} has no score")
        rewards[session_name(s.id, s.epoch)] = _reward(to_float(next(iter(s.scores.values())).value),
                                                       f"sample {s.id} epoch {s.epoch}")
    return rewards


def chat_agent(call: AgentCall) -> float:
    """A scripted tool-calling agent: the task's ``prompt`` (and ``system``), each tool call answered by the next
    of the task's ``observations`` (cycled), until an answer without tool calls or ``max_steps`` requests;
    reward 1.0 when the task's ``target`` is in the final answer, else 0.0."""
    import httpx

    task = call.task
    messages: list[dict[str, Any]] = [{"role": "system", "content": task.get("system", "You are an agent.")},
                                      {"role": "user", "content": task["prompt"]}]
    observations = task.get("observations") or ["ok"]
    answer, step = "", 0
    headers = {"authorization": f"Bearer {call.api_key}", **call.headers}
    with httpx.Client(timeout=600) as client:
        for step in range(int(task.get("max_steps", 20))):
            body = {"model": task.get("model", "agent"), "messages": messages, "seed": call.seed,
                    "max_tokens": int(task.get("max_tokens", 512)), **({"tools": task["tools"]} if "tools" in task
                                                                      else {})}
            r = client.post(f"{call.base_url}/chat/completions", json=body, headers=headers)
            r.raise_for_status()
            message = r.json()["choices"][0]["message"]
            messages.append(message)
            answer = message.get("content") or ""
            if not message.get("tool_calls"):
                break
            for k, tc in enumerate(message["tool_calls"]):
                messages.append({"role": "tool", "tool_call_id": tc["id"],
                                 "content": observations[(step + k) % len(observations)]})
    return 1.0 if str(task.get("target", "")) and str(task["target"]) in answer else 0.0


@dataclass
class Study:
    """One study's inputs (module docstring): the config, the output folder, the upstream and how to serve it."""

    config: StudyConfig
    out: Path
    upstream: str
    tasks: Sequence[Mapping[str, Any]] | None = None  # the Python agent's tasks
    prices: Mapping[str, float] | None = None
    proxy_args: Mapping[str, Any] = field(default_factory=dict)  # sensor, tokenizer, upstream_key, ...
    inputs: Mapping[str, Path | str | None] = field(default_factory=dict)

    def run_dir(self, policy: str) -> Path:
        """Where a policy's run lives."""
        return self.out / "runs" / safe_stem(policy)

    def _reuse(self, policy: str) -> dict[str, float] | None:
        path = self.run_dir(policy) / "rewards.json"
        if not path.is_file():
            return None
        doc = read_json(path)
        same = (isinstance(doc, dict) and doc.get("policy") == policy and doc.get("agent") == self.config.agent
                and doc.get("seed") == self.config.seed and isinstance(doc.get("rewards"), dict))
        if same and (self.tasks is None or set(doc["rewards"]) == {t["task_id"] for t in self.tasks}):
            return {str(k): float(v) for k, v in doc["rewards"].items()}
        return None

    def run_policy(self, policy: str) -> dict[str, float]:
        """Run the agent over the tasks through a proxy under ``policy`` (or reuse a completed run): rewards."""
        from interp.serve.app import Proxy, start
        from interp.serve.policy import parse_serve_policy

        done = self._reuse(policy)
        if done is not None:
            return done
        folder = self.run_dir(policy)
        if folder.exists():  # an interrupted or different run: started again
            shutil.rmtree(folder)
        chosen = parse_serve_policy(policy)
        args = {k: v for k, v in self.proxy_args.items() if k != "gate_factory" or chosen.condition == "drsr_gate"}
        proxy = Proxy(self.upstream, chosen, folder / "log", **args)
        running = start(proxy.build())
        try:
            if self.config.agent.startswith("inspect:"):
                rewards = run_inspect(self.config.agent, running.url, proxy.token, self.config.seed,
                                      folder / "inspect", policy)
            else:
                if self.tasks is None:
                    raise ValueError(f"agent {self.config.agent}: a Python agent needs --tasks")
                rewards = run_python(load_agent(self.config.agent), self.tasks, running.url, proxy.token,
                                     self.config.seed)
        finally:
            running.stop()
        atomic_write_json(folder / "rewards.json", {"policy": policy, "agent": self.config.agent,
                                                    "seed": self.config.seed, "rewards": rewards})
        return rewards

    def run(self) -> dict[str, Any]:
        """Every policy's run, then ``study.json`` (written atomically); the document."""
        rewards = {p: self.run_policy(p) for p in self.config.policies}
        doc = study_document(self, rewards)
        atomic_write_json(self.out / "study.json", {"schema": schema_dict(STUDY_FIELDS), **doc})
        return doc


def _ci(values: np.ndarray, groups: np.ndarray, n_boot: int, seed: int) -> list[float] | None:
    """Task-bootstrap percentile 95 % CI of the mean of ``values`` (one per task); None without resamples."""
    if not n_boot or not len(values):
        return None
    return [float(v) for v in task_bootstrap_ci(values[:, None], groups, n_boot, seed)[0]]


def study_document(study: Study, rewards: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """``study.json`` (``STUDY_FIELDS``) from the runs' rewards and run logs; the tasks are those every run has."""
    from interp.serve.runlog import answered, paired_document, read_requests, run_cost, token_kinds

    config, prices = study.config, study.prices
    tasks = sorted(set.intersection(*(set(r) for r in rewards.values())))
    if not tasks:
        raise ValueError("study: no task was run under every policy")
    logs = {p: study.run_dir(p) / "log" for p in config.policies}
    base = np.array([rewards[BASE_POLICY][t] for t in tasks])
    groups = np.array(tasks)
    per_task, table, paired = [], [], {}
    for p in config.policies:
        rows = [r for r in answered(read_requests(logs[p]), logs[p]) if r["session"] in set(tasks)]
        mine = np.array([rewards[p][t] for t in tasks])
        for t in tasks:
            own = [r for r in rows if r["session"] == t]
            per_task.append({"task_id": t, "policy": p, "reward": rewards[p][t], "requests": len(own),
                             "prompt_tokens": sum(r["prompt_tokens"] for r in own),
                             "completion_tokens": sum(r["completion_tokens"] for r in own)})
        kinds = {f"{k}_tokens": v for k, v in token_kinds(rows).items()}
        row: dict[str, Any] = {
            "policy": p, "n_tasks": len(tasks), "reward": float(mine.mean()),
            "reward_ci": _ci(mine, groups, config.n_boot, config.seed),
            "reward_change": float((mine - base).mean()),
            "reward_change_ci": _ci(mine - base, groups, config.n_boot, config.seed) if p != BASE_POLICY else None,
            "requests": len(rows), **kinds,
            "total_tokens": sum(r["prompt_tokens"] + r["completion_tokens"] for r in rows),
            "cost_usd": run_cost(rows, prices)["cost_usd"] if prices else None,
            **dict.fromkeys(("total_change", "direct_change", "request_count_change", "context_change",
                             "amplification", "amplification_ci", "saving_ratio", "saving_ratio_ci", "refused"))}
        if p != BASE_POLICY:
            doc = paired_document(logs[BASE_POLICY], logs[p], prices, n_boot=config.n_boot, seed=config.seed)
            paired[p] = doc
            row.update({**doc["totals"], **{k: doc[k] for k in ("amplification", "amplification_ci",
                                                                "saving_ratio", "saving_ratio_ci", "refused")}})
        table.append(row)
    inputs = {**study.inputs, **{f"log:{p}": logs[p] / "requests.jsonl" for p in config.policies}}
    return {"agent": config.agent, "upstream": study.upstream, "policies": list(config.policies), "tasks": tasks,
            "per_task": per_task, "table": table, "paired": paired, "prices": dict(prices) if prices else None,
            "n_boot": config.n_boot, **record(config, inputs=inputs)}


def table_lines(doc: Mapping[str, Any]) -> list[str]:
    """The study's table as text lines (what ``interp study`` prints)."""

    def ci(v: Sequence[float] | None) -> str:
        return "" if v is None else f" [{v[0]:.3g}, {v[1]:.3g}]"

    out = []
    for r in doc["table"]:
        cost = "" if r["cost_usd"] is None else f", ${r['cost_usd']:.4f}"
        line = (f"{r['policy']}: reward {r['reward']:.3f}{ci(r['reward_ci'])}; {r['requests']} requests, tokens "
                f"{r['total_tokens']:,} (uncached input {r['uncached_input_tokens']:,.0f}, cache read "
                f"{r['cache_read_tokens']:,.0f}, cache write {r['cache_write_tokens']:,.0f}, output "
                f"{r['output_tokens']:,.0f}){cost}")
        if r["policy"] != BASE_POLICY:
            amp = "-" if r["amplification"] is None else f"{r['amplification']:.2f}{ci(r['amplification_ci'])}"
            line += (f"; vs full: reward {r['reward_change']:+.3f}{ci(r['reward_change_ci'])}, tokens "
                     f"{r['total_change']:+,.0f} = direct {r['direct_change']:+,.0f} + requests "
                     f"{r['request_count_change']:+,.0f} + context {r['context_change']:+,.0f}, amplification {amp}")
            if r["refused"]:
                line += f" (REFUSED: {r['refused']})"
        out.append(line)
    return out


__all__ = ["AgentCall", "STUDY_FIELDS", "Study", "StudyConfig", "chat_agent", "load_agent", "named_sessions",
           "read_tasks", "run_inspect", "run_python", "session_name", "study_document", "table_lines"]
