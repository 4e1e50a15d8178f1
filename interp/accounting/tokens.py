"""Request-level token accounting of history policies with a prefix cache, and the amplification decomposition.

An agent that ran ``n`` steps sent ``n`` requests: request k (k = 1..n) is the
prompt rendered at boundary k-1 (``interp.data.render``, the tokenizer's own
chat template) under the policy's history as it stood then, and it produced
step k. A **policy** is a history condition (``interp.data.conditions``) with
its parameters, written ``name`` or ``name:key=value,...`` (``random:r=0.1``,
``keep_last_k_reasoning:k=5``), or a step policy, ``sliding_window:k=K`` or
``keep_last_m_tool_exchanges:m=M`` (whole steps may be dropped; rendered at its moved boundary). Each request's history is the
condition applied at that boundary; ICLR's online write-back is the
condition's own (step t is compressed once, at boundary t, on the history
with steps 1..t-1 already compressed, and stays so in every later request).
Per request k:

- ``input_tokens``: tokens of the prompt;
- ``output_tokens``: the recorded next output, step k's assistant turn as the
  agent produced it (its reasoning and action, the render at boundary k under
  the same history between the end of the prompt and the end of step k's last
  reasoning/action span);
- ``cache_read_tokens``: under the **cache model** (``CacheModel``): the
  provider keeps request k-1's prompt followed by its output and serves the
  longest exact token prefix request k shares with it, rounded down to a
  multiple of ``block`` tokens and 0 when shorter than ``min_prefix``
  (``block = 1, min_prefix = 0``: exact token-prefix reuse; providers cache
  in blocks, e.g. 128 tokens from a 1024-token minimum); request 1 reads none;
- ``cache_write_tokens``: the prompt tokens not read from the cache, written
  to it (``input - cache_read``);
- ``direct_removal_cumulative_tokens``: the policy's own edit of that
  request, net: input tokens under ``full`` minus under the policy
  (``[SKIP]`` markers count against it). A token deleted at request k and
  missing from every later request counts again in each of them;
- ``direct_removal_tokens``: the same edits counted **once**, at the first
  request a token is missing from (DRSR's "Direct", most likely): each
  request's net removal is attributed to the step its tokens belong to
  (the render's segments of the step and the template tokens before them,
  its turn headers and think tags; the system prompt, task and generation
  prompt form one more bucket; ``sliding_window``'s renumbered steps mapped
  back), and a bucket adds only what exceeds the most it removed in an
  earlier request. Summed over a run: per bucket, the most it
  ever lost. Equal to the cumulative column when every edit shows in one
  request only.

So an edit of an old step breaks the cache at the edited token: everything
after it is written again; a policy that only ever edits the step just
completed (ICLR) keeps every later request's cache intact up to that step.

ICLR needs block entropies, which need the model; the accounting runs no
forward (``drsr_gate`` aside: its set gate, ``patching.gate.SetGate``, runs the sensor once per step and
decides online with memory as the condition does; ``interp tokens --gate-scorer FILE``), so ``iclr`` and
``iclr_step_only`` take their decisions from a table
of block entropies (the CSV of ``interp entropy``, ``DROP_TABLE_FIELDS`` of
``interp.extraction.entropy``: rows of context ``online`` for ``iclr``,
``step_only`` for ``iclr_step_only``): :func:`table_scorer`. Online scores
were computed on exactly the compressed history the condition builds, so the
table's decisions are the condition's. Without a table those policies are
skipped (listed under ``skipped``).

**Paired runs** (:func:`decompose_pair`): a base run (accounted under ``full``)
and a compressed run of the same tasks (accounted under its policy), matched
by ``task_id``. With T the tokens a run sends and receives (input + output
over its requests), n its requests, and the compressed run's own trajectory
accounted under ``full`` (T_full: the same steps with nothing removed):

    total change  = T_B - T_A
                  = -(T_B_full - T_B)                    direct removal (removal D = T_B_full - T_B)
                    + (n_B - n_A) * T_A / n_A              change in the number of requests
                    + n_B * (T_B_full / n_B - T_A / n_A)   change in per-request context

which sums exactly (computed in rationals, per task and in total). The
**amplification factor** is ``|total change| / D``: 1 when the run changes by
exactly what was removed; above 1 when the trajectory amplifies the local
deletion (more requests, longer contexts, or fewer); ``saving_ratio = -total
change / D`` keeps the sign (1: the saving is the removal; below 0: the
policy costs more than it removes). Both over tasks as ratios of sums, with
task-bootstrap percentile CIs (``interp.stats.task_resamples``).

Fields of ``tokens.json`` (``FIELDS``; :func:`tokens_document` writes them):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``tokenizer`` | ``[]`` | str | - | the tokenizer counted (name_or_path) |
| ``cache_model`` | ``{...}`` | object | tokens | {block, min_prefix, rule}: the prefix-cache model of cache_read_tokens |
| ``policies`` | ``[n_policies]`` | str | - | the policies accounted, in order (skipped ones excluded) |
| ``skipped`` | ``[n_skipped] of {policy, reason}`` | object | - | policies not accounted and why (ICLR without an entropy table) |
| ``requests`` | ``[n_requests] of {task_id, domain, policy, request, boundary, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, total_tokens, direct_removal_tokens, direct_removal_cumulative_tokens}`` | object | tokens | one row per (task, policy, request k = 1..n); boundary = k - 1; total = input + output; direct removal counted once (at the first request a token is missing from) and cumulative (in every request) |
| ``per_task`` | ``[n_task_rows] of {task_id, domain, policy, n_requests, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, total_tokens, direct_removal_tokens, direct_removal_cumulative_tokens}`` | object | tokens | sums over a task's requests, per policy |
| ``per_domain`` | ``[n_domain_rows] of {domain, policy, n_tasks, n_requests, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, total_tokens, direct_removal_tokens, direct_removal_cumulative_tokens}`` | object | tokens | sums over the tasks of a domain, per policy |
| ``totals`` | ``[n_policies] of {policy, n_tasks, n_requests, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, total_tokens, direct_removal_tokens, direct_removal_cumulative_tokens, rel_input, rel_cache_read, rel_output, rel_total, domain_mean: {input_tokens, output_tokens, total_tokens, direct_removal_tokens, n_domains}}`` | object | tokens; rel_*: fraction | sums over all tasks; rel_* = (policy - full) / full (null without full or when full is 0); domain_mean: the equal-domain mean per task (each domain's mean per task, averaged over domains: the papers' Overall) |
| ``pair`` | ``{...}`` | object or null | tokens | decompose_pair's document (null when no paired run was given) |
| ``entropy_table`` | ``[]`` | str or null | - | the block-entropy CSV ICLR's decisions were read from (null: none given) |
| ``seconds`` | ``[]`` | float | s | wall time of the accounting |
| ``config`` | ``{...}`` | object | - | the frozen config of the analysis that made this file: dataclasses.asdict, tuples as lists (interp.record.config_from builds it back) |
| ``provenance`` | ``{...}`` | object | - | what ran (interp.record): model, revision, dtype (resolved), device, seeds, package, version, inputs (name -> sha256) |
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pandas as pd

from interp.data.conditions import STEP_POLICIES, BlockScorer, apply_condition, check_condition_name, \
    validate_condition
from interp.data.render import Rendered, RenderError, render
from interp.data.trajectory import Trajectory
from interp.sensor.prefix import lcp
from interp.record import RECORD_FIELDS
from interp.schema import Field, schema_dict
from interp.stats import task_resamples
from interp.params import N_BOOT, Check, Integer, Items, param, validate

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

FIELDS = (
    Field("schema", "{...}", "object", "-", "this table: {field: {shape, dtype, units, doc}}"),
    Field("tokenizer", "[]", "str", "-", "the tokenizer counted (name_or_path)"),
    Field("cache_model",
          "{...}",
          "object", "tokens",
          "{block, min_prefix, rule}: the prefix-cache model of cache_read_tokens"),
    Field("policies", "[n_policies]", "str", "-", "the policies accounted, in order (skipped ones excluded)"),
    Field("skipped",
          "[n_skipped] of {policy, reason}",
          "object", "-",
          "policies not accounted and why (ICLR without an entropy table)"),
    Field("requests",
          "[n_requests] of {task_id, domain, policy, request, boundary, input_tokens, cache_read_tokens, "
          "cache_write_tokens, output_tokens, total_tokens, direct_removal_tokens, direct_removal_cumulative_tokens}",
          "object", "tokens",
          "one row per (task, policy, request k = 1..n); boundary = k - 1; total = input + output; direct removal "
          "counted once (at the first request a token is missing from) and cumulative (in every request)"),
    Field("per_task",
          "[n_task_rows] of {task_id, domain, policy, n_requests, input_tokens, cache_read_tokens, cache_write_tokens, "
          "output_tokens, total_tokens, direct_removal_tokens, direct_removal_cumulative_tokens}",
          "object", "tokens",
          "sums over a task's requests, per policy"),
    Field("per_domain",
          "[n_domain_rows] of {domain, policy, n_tasks, n_requests, input_tokens, cache_read_tokens, cache_write_tokens, "
          "output_tokens, total_tokens, direct_removal_tokens, direct_removal_cumulative_tokens}",
          "object", "tokens",
          "sums over the tasks of a domain, per policy"),
    Field("totals",
          "[n_policies] of {policy, n_tasks, n_requests, input_tokens, cache_read_tokens, cache_write_tokens, "
          "output_tokens, total_tokens, direct_removal_tokens, direct_removal_cumulative_tokens, rel_input, "
          "rel_cache_read, rel_output, rel_total, domain_mean: {input_tokens, output_tokens, total_tokens, "
          "direct_removal_tokens, n_domains}}",
          "object", "tokens; rel_*: fraction",
          "sums over all tasks; rel_* = (policy - full) / full (null without full or when full is 0); domain_mean: "
          "the equal-domain mean per task (each domain's mean per task, averaged over domains: the papers' "
          "Overall)"),
    Field("pair", "{...}", "object or null", "tokens", "decompose_pair's document (null when no paired run was given)"),
    Field("entropy_table",
          "[]",
          "str or null", "-",
          "the block-entropy CSV ICLR's decisions were read from (null: none given)"),
    Field("seconds", "[]", "float", "s", "wall time of the accounting"),
    *RECORD_FIELDS,
)
TOKEN_COLUMNS = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "total_tokens",
                 "direct_removal_tokens", "direct_removal_cumulative_tokens")
DOMAIN_MEAN_COLUMNS = ("input_tokens", "output_tokens", "total_tokens", "direct_removal_tokens")
DEFAULT_POLICIES = ("full", "iclr", "iclr_step_only", "delete_all_reasoning", "delete_latest_reasoning",
                    "keep_latest_reasoning", "random:r=0.1", "sliding_window:k=5", "keep_last_k_reasoning:k=5")
ICLR_CONTEXT = {"iclr": "online", "iclr_step_only": "step_only"}  # the entropy-table rows each ICLR policy reads


@dataclass(frozen=True)
class CacheModel:
    """Exact token-prefix reuse of the previous request's prompt + output, in ``block``-token units from ``min_prefix``."""

    block: int = 1
    min_prefix: int = 0

    def __post_init__(self) -> None:
        if self.block < 1 or self.min_prefix < 0:
            raise ValueError(f"cache model: block must be >= 1 and min_prefix >= 0; got {self.block}, {self.min_prefix}")

    def served(self, shared: int) -> int:
        """Tokens served from the cache when ``shared`` leading tokens match."""
        return 0 if shared < self.min_prefix else shared // self.block * self.block

    def to_json(self) -> dict[str, Any]:
        """JSON form with the rule in words."""
        return {"block": self.block, "min_prefix": self.min_prefix,
                "rule": "longest exact token prefix shared with the previous request's prompt + output, rounded down "
                        "to a multiple of block, 0 below min_prefix"}


@dataclass(frozen=True)
class Policy:
    """A history condition with its parameters, labelled as written (``random:r=0.1``)."""

    label: str
    condition: str
    params: tuple[tuple[str, Any], ...] = ()


def _value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_policy(spec: str) -> Policy:
    """``name`` or ``name:key=value,...`` -> Policy, checked (unknown condition or parameter: ValueError naming it)."""
    name, _, rest = spec.strip().partition(":")
    params = []
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"policy {spec!r}: parameter {item!r} is not key=value")
        params.append((key.strip(), _value(value.strip())))
    if name in STEP_POLICIES:  # sliding_window:k=K, keep_last_m_tool_exchanges:m=M
        window = next(iter(set(inspect.signature(STEP_POLICIES[name]).parameters) - {"traj", "after_step", "counter"}))
        unknown = [k for k, _ in params if k != window]
        if unknown:
            raise ValueError(f"policy {spec!r}: {name} takes only {window}")
        STEP_POLICIES[name](Trajectory("x", "x", "", "", ()), 0, **dict(params))  # checks the window
    else:
        check_condition_name(name)
        if name not in ICLR_CONTEXT and name != "drsr_gate":  # their scorer / gate come with the accounting
            validate_condition(name, dict(params))
    return Policy(spec.strip(), name, tuple(params))


def table_scorer(blocks: pd.DataFrame, context: str) -> BlockScorer:
    """A block scorer reading ``mean_entropy_bits`` of ``context`` rows of an entropy table (task_id, step, block);
    a step without scores (null or absent) is unscored (None: ICLR leaves it whole); also answers step-only calls."""
    rows = blocks[blocks["context"] == context] if "context" in blocks else blocks
    scores: dict[tuple[str, int], list[float] | None] = {}
    for (task_id, step), group in rows.groupby(["task_id", "step"], sort=False):
        values = group.sort_values("block")["mean_entropy_bits"].tolist()
        scores[(str(task_id), int(step))] = None if any(pd.isna(v) for v in values) else [float(v) for v in values]

    def scorer(history: Trajectory, t: int) -> list[float] | None:
        task_id, at, step = history.task_id.rpartition("@step")
        key = (task_id, int(step)) if at and step.isdigit() and t == 1 else (history.task_id, t)
        return scores.get(key)

    return scorer


def read_entropy_table(path: str | Path) -> pd.DataFrame:
    """The block-entropy CSV of ``interp entropy`` (task_id, step, block, mean_entropy_bits; context optional),
    checked: a missing column or a non-numeric value is a ValueError naming the file, line and column."""
    try:
        table = pd.read_csv(path, dtype={"task_id": str})
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a readable CSV ({str(exc).splitlines()[0]})") from None
    missing = [c for c in ("task_id", "step", "block", "mean_entropy_bits") if c not in table]
    if missing:
        raise ValueError(f"{path}: no column(s) {', '.join(missing)} (expected the CSV of `interp entropy`)")
    for col in ("step", "block", "mean_entropy_bits"):
        bad = pd.to_numeric(table[col], errors="coerce").isna() & table[col].notna()
        if col != "mean_entropy_bits":
            bad |= table[col].isna()
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0])
            raise ValueError(f"{path}:{row + 2}: {col}: not a number: {table[col].iloc[row]!r}")
        table[col] = pd.to_numeric(table[col])
    return table


def _history(policy: Policy, traj: Trajectory, b: int, extra: dict[str, Any]) -> tuple[Trajectory, int]:
    """The history request b+1 sees under ``policy`` and the boundary to render it at."""
    if policy.condition in STEP_POLICIES:
        edited, boundary, _ = STEP_POLICIES[policy.condition](traj, b, **dict(policy.params))
        return edited, boundary
    if b == 0 or policy.condition == "full":
        return traj, b
    return apply_condition(policy.condition, traj, b, **dict(policy.params), **extra)[0], b


def _step_tokens(prompt: Rendered, shift: int) -> dict[int | None, int]:
    """The prompt's tokens per step (renumbered by ``shift``: steps sliding_window dropped before the kept ones):
    a step's own segments and the template tokens before them back to the previous step's (its turn headers and
    think tags); tokens before the first step and after the last (system, task, generation prompt) under None."""
    owner = np.full(prompt.n_tokens, -1)
    for seg in prompt.segments:
        if seg.step is not None:
            owner[seg.start:seg.end] = seg.step + shift
    mine = np.flatnonzero(owner >= 0)
    if len(mine):
        inner = owner[mine[0]:mine[-1] + 1]
        filled = inner[::-1].copy()
        filled = filled[np.maximum.accumulate(np.where(filled >= 0, np.arange(len(filled)), 0))]
        owner[mine[0]:mine[-1] + 1] = filled[::-1]
    steps, counts = np.unique(owner, return_counts=True)
    return {(None if t < 0 else int(t)): int(c) for t, c in zip(steps, counts)}


def request_tokens(traj: Trajectory, policy: Policy, tokenizer: PreTrainedTokenizerBase,
                   cache: CacheModel = CacheModel(), extra: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Per request k = 1..n of ``traj`` under ``policy``: input, cache-read, cache-write, output and total tokens,
    and ``step_tokens``: the prompt's tokens per original step (None: tokens of no step)."""
    out: list[dict[str, Any]] = []
    previous: list[int] | None = None
    last: tuple[Trajectory, int, Rendered] | None = None
    for k in range(1, traj.n_steps + 1):
        hist, boundary = _history(policy, traj, k - 1, extra or {})
        # an unchanged history one step on is the last request's render with its output: rendered once
        same = last is not None and last[1] + 1 == boundary and last[0] == hist
        rendered = last[2] if same and last is not None else render(hist, boundary, tokenizer)
        prompt = rendered.input_ids
        after = render(hist, boundary + 1, tokenizer)
        last = (hist, boundary, after)
        if after.input_ids[:len(prompt)] != prompt:
            raise RenderError(f"{traj.task_id}: request {k} ({policy.label}): the prompt is not a token prefix of the "
                              "render with its output; the output cannot be counted exactly with this template")
        ends = [s.end for s in after.spans(step=boundary + 1) if s.kind in ("reasoning_block", "action")]
        output = after.input_ids[len(prompt):max(ends, default=len(prompt))]
        read = cache.served(lcp(prompt, previous)) if previous is not None else 0
        out.append({"request": k, "boundary": k - 1, "input_tokens": len(prompt), "cache_read_tokens": read,
                    "cache_write_tokens": len(prompt) - read, "output_tokens": len(output),
                    "total_tokens": len(prompt) + len(output),
                    "step_tokens": _step_tokens(rendered, k - 1 - boundary)})
        previous = prompt + output
    return out


def _extras(policy: Policy, entropy: pd.DataFrame | None, tokenizer: PreTrainedTokenizerBase,
            gate: object = None) -> dict[str, Any] | str:
    """What a policy needs beyond its parameters (a table scorer, the tokenizer, the set gate), or why it cannot
    run."""
    if policy.condition == "drsr_gate":
        return {"gate": gate} if gate is not None else "no set gate given (--gate-scorer FILE of `interp gate train`)"
    if policy.condition in ICLR_CONTEXT:
        context = ICLR_CONTEXT[policy.condition]
        if entropy is None:
            return "no entropy table given (ICLR decisions need block entropies; pass the CSV of `interp entropy`)"
        if "context" in entropy and not (entropy["context"] == context).any():
            return f"the entropy table has no rows of context {context!r} (`interp entropy --context {context}`)"
        return {"scorer": table_scorer(entropy, context)}
    return {"tokenizer": tokenizer} if policy.condition == "random" else {}


def account(trajectories: Sequence[Trajectory], policies: Iterable[str | Policy], tokenizer: PreTrainedTokenizerBase,
            cache: CacheModel = CacheModel(), entropy: pd.DataFrame | None = None,
            gate: object = None) -> tuple[pd.DataFrame, list[dict]]:
    """One row per (task, policy, request) (``requests`` of ``FIELDS``, with direct removal against ``full``),
    and the policies skipped with their reason; no model forward but the set gate's (``gate``: the
    ``patching.gate.SetGate`` of the ``drsr_gate`` policy)."""
    parsed = [p if isinstance(p, Policy) else parse_policy(p) for p in policies]
    full = Policy("full", "full")
    rows, skipped = [], []
    needs: dict[str, tuple[Policy, dict[str, Any]]] = {}
    for p in parsed:
        need = _extras(p, entropy, tokenizer, gate)
        if isinstance(need, str):
            skipped.append({"policy": p.label, "reason": need})
        else:
            needs[p.label] = (p, need)
    if entropy is not None:
        known = set(entropy["task_id"].astype(str))
        missing = [t.task_id for t in trajectories if t.task_id not in known and any(s.blocks for s in t.steps)]
        if missing and any(p.condition in ICLR_CONTEXT for p, _ in needs.values()):
            raise ValueError(f"the entropy table has no rows for task(s) {', '.join(missing[:5])}; "
                             "run `interp entropy` on the same trajectories")
    for traj in trajectories:
        base = request_tokens(traj, full, tokenizer, cache)
        for p, need in needs.values():
            reqs = base if p.condition == "full" and not p.params else request_tokens(traj, p, tokenizer, cache, need)
            counted: dict[int | None, int] = {}  # per step bucket: the most it lost in an earlier request
            for r, f in zip(reqs, base):
                once = 0
                for key in set(f["step_tokens"]) | set(r["step_tokens"]):
                    lost = f["step_tokens"].get(key, 0) - r["step_tokens"].get(key, 0)
                    once += max(0, lost - counted.get(key, 0))
                    counted[key] = max(counted.get(key, 0), lost)
                rows.append({"task_id": traj.task_id, "domain": traj.domain, "policy": p.label,
                             **{k: v for k, v in r.items() if k != "step_tokens"}, "direct_removal_tokens": once,
                             "direct_removal_cumulative_tokens": f["input_tokens"] - r["input_tokens"]})
    columns = ["task_id", "domain", "policy", "request", "boundary", *TOKEN_COLUMNS]
    return pd.DataFrame(rows, columns=columns), skipped


def _sums(requests: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    grouped = requests.groupby(keys, sort=False)
    out = grouped[list(TOKEN_COLUMNS)].sum()
    out.insert(0, "n_requests", grouped.size())
    if "task_id" not in keys:
        out.insert(0, "n_tasks", grouped["task_id"].nunique())
    return out.reset_index()


def _rel(value: float, ref: float | None) -> float | None:
    return None if ref is None or ref == 0 else (value - ref) / ref


def totals(requests: pd.DataFrame) -> list[dict[str, Any]]:
    """Sums per policy over all tasks, with relative changes of input, cache read and output against ``full``."""
    table = _sums(requests, ["policy"])
    ref = table[table["policy"] == "full"]
    out = []
    per_domain = _sums(requests, ["domain", "policy"])
    for row in table.to_dict("records"):
        for col, name in (("input_tokens", "rel_input"), ("cache_read_tokens", "rel_cache_read"),
                          ("output_tokens", "rel_output"), ("total_tokens", "rel_total")):
            row[name] = _rel(row[col], float(ref[col].iloc[0]) if len(ref) else None)
        mine = per_domain[per_domain["policy"] == row["policy"]]
        row["domain_mean"] = {col: float((mine[col] / mine["n_tasks"]).mean()) for col in DOMAIN_MEAN_COLUMNS}
        row["domain_mean"]["n_domains"] = int(len(mine))
        out.append(_plain(row))
    return out


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """JSON-able scalars (numpy ints and floats to Python)."""
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()}


def _run_totals(requests: pd.DataFrame) -> dict[str, tuple[int, int, str]]:
    """Per task: (tokens sent and received = input + output, requests, domain)."""
    return {tid: (int(g["input_tokens"].sum() + g["output_tokens"].sum()), len(g), str(g["domain"].iloc[0]))
            for tid, g in requests.groupby("task_id", sort=False)}


def decomposition(t_a: int, n_a: int, t_b: int, t_b_full: int, n_b: int) -> dict[str, Fraction]:
    """The exact split of ``t_b - t_a`` into direct removal, request-count and per-request-context changes."""
    direct = -Fraction(t_b_full - t_b)
    count = (n_b - n_a) * Fraction(t_a, n_a)
    context = n_b * (Fraction(t_b_full, n_b) - Fraction(t_a, n_a))
    return {"total_change": Fraction(t_b - t_a), "direct_change": direct, "request_count_change": count,
            "context_change": context}


def _ratio_ci(total: np.ndarray, removal: np.ndarray, groups: np.ndarray, n_boot: int, seed: int,
              sign: float | None) -> list[float] | None:
    """Percentile 95 % CI over task resamples of |sum total| / sum removal (``sign`` None) or sign * sum / sum."""
    values = []
    for rows in task_resamples(groups, n_boot, np.random.default_rng(seed)):
        d = removal[rows].sum()
        if d > 0:
            values.append(abs(total[rows].sum()) / d if sign is None else sign * total[rows].sum() / d)
    return [float(q) for q in np.quantile(values, [0.025, 0.975])] if values else None


def decompose_pair(base: Sequence[Trajectory], compressed: Sequence[Trajectory], policy: str | Policy,
                   tokenizer: PreTrainedTokenizerBase, cache: CacheModel = CacheModel(),
                   entropy: pd.DataFrame | None = None,
                   *, n_boot: int, seed: int = 0) -> dict[str, Any]:
    """The paired-run document: per task and in total, the exact split of the token change (module docstring),
    the amplification factor and saving ratio with task-bootstrap CIs; tasks in one run only are listed."""
    policy = policy if isinstance(policy, Policy) else parse_policy(policy)
    b_ids = {t.task_id for t in compressed}
    matched = [t for t in base if t.task_id in b_ids]
    if not matched:
        raise ValueError("paired runs: no task_id is in both trajectory files")
    keep = {t.task_id for t in matched}
    a_req, _ = account(matched, ["full"], tokenizer, cache)
    b_req, skipped = account([t for t in compressed if t.task_id in keep], ["full", policy], tokenizer, cache, entropy)
    if skipped:
        raise ValueError(f"paired runs: policy {policy.label} cannot be accounted: {skipped[-1]['reason']}")
    a_tot = _run_totals(a_req)
    b_full = _run_totals(b_req[b_req["policy"] == "full"])
    b_pol = _run_totals(b_req[b_req["policy"] == policy.label])
    per_task: list[dict[str, Any]] = []
    changes: list[tuple[float, float]] = []  # (total change, direct removal) per task, for the bootstrap
    sums = dict.fromkeys(("total_change", "direct_change", "request_count_change", "context_change"),
                                       Fraction(0))
    for tid in (t.task_id for t in matched):
        (t_a, n_a, domain), (t_b, n_b, _), (t_bf, _, _) = a_tot[tid], b_pol[tid], b_full[tid]
        parts = decomposition(t_a, n_a, t_b, t_bf, n_b)
        sums = {k: sums[k] + v for k, v in parts.items()}
        removal = -parts["direct_change"]
        changes.append((float(parts["total_change"]), float(removal)))
        per_task.append({"task_id": tid, "domain": domain, "base_tokens": t_a, "base_requests": n_a,
                         "compressed_tokens": t_b, "compressed_requests": n_b, "compressed_full_tokens": t_bf,
                         **{k: float(v) for k, v in parts.items()},
                         "amplification": float(abs(parts["total_change"]) / removal) if removal > 0 else None})
    total = np.array([c[0] for c in changes])
    removals = np.array([c[1] for c in changes])
    groups = np.array([r["task_id"] for r in per_task])
    d = float(-sums["direct_change"])
    return {"policy": policy.label, "measure": "input + output tokens over a run's requests",
            "n_tasks": len(per_task), "unmatched": sorted(({t.task_id for t in base} ^ b_ids)),
            "totals": {k: float(v) for k, v in sums.items()},
            "amplification": abs(float(sums["total_change"])) / d if d > 0 else None,
            "amplification_ci": _ratio_ci(total, removals, groups, n_boot, seed, None),
            "saving_ratio": -float(sums["total_change"]) / d if d > 0 else None,
            "saving_ratio_ci": _ratio_ci(total, removals, groups, n_boot, seed, -1.0),
            "n_boot": n_boot, "per_task": per_task}


def tokens_document(requests: pd.DataFrame, skipped: list[dict], tokenizer: PreTrainedTokenizerBase, cache: CacheModel,
                    pair: dict[str, Any] | None = None, seconds: float = 0.0,
                    entropy_table: str | None = None) -> dict[str, Any]:
    """The ``tokens.json`` document (``FIELDS``) from :func:`account`'s rows; pure."""
    records = lambda frame: [_plain(r) for r in frame.to_dict("records")]  # noqa: E731
    return {"schema": schema_dict(FIELDS), "tokenizer": str(getattr(tokenizer, "name_or_path", "") or "?"),
            "cache_model": cache.to_json(), "policies": list(dict.fromkeys(requests["policy"])),
            "skipped": skipped, "requests": records(requests),
            "per_task": records(_sums(requests, ["task_id", "domain", "policy"])),
            "per_domain": records(_sums(requests, ["domain", "policy"])), "totals": totals(requests),
            "pair": pair, "entropy_table": entropy_table, "seconds": float(seconds)}


def _policy(spec: str) -> None:
    """ValueError with the reason unless ``spec`` is a history policy (:func:`parse_policy`)."""
    parse_policy(spec)


@dataclass(frozen=True)
class TokensConfig:
    """Token accounting (``interp tokens``): the history policies accounted (each a condition or
    ``name:key=value,...``; default the benchmark's nine), the prefix cache (``cache_block``: served in multiples of
    this many tokens; ``min_prefix``: shorter shared prefixes are not served) and the policy a ``--paired`` run used.

    ``precision``: float32 under ``--dtype auto`` on CUDA; only the ``drsr_gate`` policy runs a model (its set
    gate, DRSR's measurement, in DRSR's precision)."""

    analysis: ClassVar[str] = "tokens"
    precision: ClassVar[str] = "float32"

    policies: tuple[str, ...] = param(DEFAULT_POLICIES, Items(Check(_policy, "a policy (a condition or "
                                      "name:key=value;...)"), unique=True),
                                      "History policies accounted: comma list of conditions or name:key=value "
                                      "(';' separates one policy's parameters: random:r=0.1;seed=2).")
    cache_block: int = param(1, Integer(1), "Prefix cache: served in multiples of this many tokens.", "tokens")
    min_prefix: int = param(0, Integer(0), "Prefix cache: shorter shared prefixes are not served.", "tokens")
    paired_policy: str = param("iclr", Check(_policy, "a policy"), "The policy a --paired run used.")

    def __post_init__(self) -> None:
        # the command line's comma list: ';' separates the parameters of one policy (random:r=0.1;seed=2)
        if isinstance(self.policies, str):
            object.__setattr__(self, "policies", tuple(p.replace(";", ",").strip()
                                                       for p in self.policies.split(",") if p.strip()))
        validate(self)

    @property
    def cache(self) -> CacheModel:
        """The prefix cache these settings describe."""
        return CacheModel(self.cache_block, self.min_prefix)

    def uses(self, condition: str) -> bool:
        """Whether a policy of ``condition`` is accounted (``drsr_gate`` needs its scorer file)."""
        return any(p.partition(":")[0].strip() == condition for p in self.policies)


def run_accounting(trajectories: Sequence[Trajectory], policies: Iterable[str], tokenizer: PreTrainedTokenizerBase,
                   cache: CacheModel = CacheModel(), entropy: pd.DataFrame | None = None,
                   paired: tuple[Sequence[Trajectory], str] | None = None,
                   entropy_table: str | None = None, gate: object = None) -> dict[str, Any]:
    """Account ``trajectories`` under ``policies`` (and a paired run: (compressed trajectories, its policy),
    ``trajectories`` being the base run) and return the timed ``tokens.json`` document (``entropy_table``: the
    name of the entropy CSV, recorded)."""
    start = time.perf_counter()
    requests, skipped = account(trajectories, policies, tokenizer, cache, entropy, gate)
    pair = decompose_pair(trajectories, paired[0], paired[1], tokenizer, cache, entropy,
                          n_boot=N_BOOT) if paired else None
    return tokens_document(requests, skipped, tokenizer, cache, pair, time.perf_counter() - start, entropy_table)


__all__ = ["CacheModel", "DEFAULT_POLICIES", "FIELDS", "Policy", "TokensConfig", "account", "decompose_pair", "decomposition",
           "parse_policy", "read_entropy_table", "request_tokens", "run_accounting", "table_scorer", "tokens_document", "totals"]
