"""Set-level deletion harm (DRSR): exact, joint, and not additive over singletons.

At boundary b the recorded next output ``y`` is step b+1's assistant turn as
the agent produced it (its reasoning and action, in the template's own
format), taken from the render at b+1 between the end of the prompt at b and
the end of step b+1's last action span. For a set ``A`` of history units of
steps 1..b (``interp.data.deletions``: reasoning blocks, observations, tool
exchanges = a call with its result, whole steps; any mix, chosen by ``units``;
by default DRSR's kinds, reasoning, observation and tool_exchange,
``DRSR_UNIT_KINDS``, and sets up to ``DRSR_MAX_K`` = 4 as DRSR reports;
``--units reasoning --max-k 3`` is the cheaper setting), deleted so that the
history stays protocol-valid:

    NLL(y | H)     = mean over y's tokens of -log p(token | everything before it)   [nats/token]
    harm(A)        = NLL(y | H \\ A) - NLL(y | H)
    interaction(A) = harm(A) - sum of harm({a}) over a in A

The tokens of ``y`` are the same under every deletion (checked: a template
that re-renders the next turn differently raises). Sets: every singleton unit,
plus ``budget`` seeded samples per cardinality 2..``max_k`` of sets of
non-overlapping units; with ``max_k >= 3`` every pair inside a sampled triple
is measured as well (after the sampled pairs), so each triple can be
reconstructed from its pairs. The render of ``H \\ A`` shares every token
before the earliest deleted unit with the full render, so one forward of the
full render, advanced from one such point to the next, snapshots the cache
there and each set only runs its suffix from it (the prefix scheduler,
``interp.sensor.prefix``; exact; tested against recomputation from scratch
with ``share_prefix=False``). The sets leaving at one point share more than
that point: a set ``{a, b}`` reads like ``{a}`` up to ``b``, and ``{a, b, c}``
like ``{a, b}`` up to ``c``; with ``nest`` (default) such a set rides on the
forward of the set it shares 32 tokens or more with and leaves it where they
differ (the scheduler's nesting, the same rule applied again from there), so
a triple costs only the tokens after its last deleted unit when its pairs are
measured. The sets still leaving at one point run as padded batches from its
snapshot, sized to ``batch_bytes`` of working memory (default
``DEFAULT_BATCH_BYTES``, 512 MiB; 0: one forward each; the scheduler's
batches). ``batch_bytes=0, nest=False`` is the one-set-per-forward path;
every path gives the same harms within float rounding
(``tests/patching/test_harm_batch.py``). Memory is bounded in the number of
sets: one snapshot per nesting level (at most ``max_k``) and one batch are held
at a time, and a set is kept only as int32 tokens until it runs.

A boundary whose teacher-forced render (history and y, the longest forward:
deletions only remove) exceeds ``max_tokens`` or the model's positions is not
run; it is listed under ``skipped`` (``interp.sensor.limits``). A step
without reasoning has no ``reasoning`` unit, so a boundary whose steps 1..b
have none has no reasoning candidates (its record has no sets).

Aggregates (``summarize_harm``, no model) are the rows compared with DRSR's
Tables 1 and 2, so they read only sets of DRSR's block kinds
(``interp.data.deletions.drsr_compared``):
a set holding a whole step (the toolkit's granularity addition, drawn by
``interp drsr`` by default) is left out of ``aggregates`` and
``per_cardinality`` and reported apart, labelled, under ``step_sets``
(the same rows over every set, those included). A set's harm is predicted from its
members' singleton harms by each ``AGGREGATORS`` rule: ``sum`` (the additive
prediction), ``mean``, ``max``, ``min``. For each aggregator and each
cardinality k >= 2 (and ``all``: every set of two or more units, sizes mixed):

- ``pair_accuracy``: pairs of distinct sets of the same boundary (both of size
  k, or both of size >= 2 for ``all``); a pair is counted when its exact harms
  differ by at least the margin, ``abs(harm_a - harm_b) >= margin`` and
  ``harm_a != harm_b`` (default ``MARGIN`` = 0.020 nats/token); it scores 1
  when the predictions differ with the sign of the harm difference, 0.5 when
  the predictions tie, 0 otherwise; accuracy = score / counted pairs, pooled
  over boundaries (null when no pair is counted);
- ``mae``: mean over those sets of ``abs(harm - prediction)``.

Reconstruction of a triple from singletons plus pairwise interactions:
``harm(abc) ~ h(a) + h(b) + h(c) + I(ab) + I(ac) + I(bc)`` with I the measured
pairs' interactions; ``mae_pairwise`` is its mean absolute error over triples
whose three pairs were measured (the additive reconstruction is the ``sum``
aggregator's ``mae``).

Fields of ``harm.json`` (``FIELDS``; ``summarize_harm`` writes them):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``units`` | ``[n_kinds]`` | str | - | the unit kinds the candidate sets were drawn from (reasoning, observation, tool_exchange, step), in that order |
| ``cardinalities`` | ``[n_cardinalities]`` | int | units per set | the set sizes measured (1 = singletons) |
| ``margin`` | ``[]`` | float | nats/token | pairs of sets whose exact harms differ by less than this are not counted in pair_accuracy |
| ``aggregates`` | ``[n_aggregates] of {aggregator, cardinality, n_sets, n_pairs, n_tasks, pair_accuracy, ci, mae}`` | object | accuracy: fraction; mae: nats/token | one row per aggregator (sum, mean, max, min) and cardinality ("2", "3", ... and "all" = sets of size >= 2): n_sets with all singletons measured, n_pairs counted at the margin over n_tasks tasks, pair_accuracy (pooled over boundaries; null without a counted pair) and its 95% task-bootstrap ci [lo, hi] (the pooled ratio over resampled tasks; null with fewer than 3 tasks counted), mae of predicting set harm by the aggregate of singleton harms (null without sets) |
| ``per_cardinality`` | ``{k: {mean_interaction, n_sets, mae_pairwise, n_pairwise}}`` | object | interaction, mae: nats/token | per set size k >= 2 (keys are strings): mean interaction over sets (null without sets), n_sets (sets with an interaction); for k = 3 mae_pairwise of the reconstruction from singletons plus pairwise interactions over the n_pairwise triples with all three pairs measured (null otherwise) |
| ``step_sets`` | ``{n_sets, aggregates, per_cardinality}`` | object or null | as aggregates | the toolkit's addition, apart from the rows compared with DRSR: n_sets of 2+ units holding a whole step, and aggregates / per_cardinality recomputed over every set, those included (null when no set holds a step) |
| ``boundaries`` | ``[n_boundaries] of {task_id, after_step, units, target, target_tokens, nll_full, sets}`` | object | nats/token | one boundary_harm record per boundary: units = kinds drawn from; target = the recorded next output y (text) and target_tokens its token count; nll_full = NLL(y given H); sets = [{members: [[kind, step, index], ...], tokens_removed, nll, harm, interaction}] (index null for a step unit), harm = NLL(y given H minus A) - NLL(y given H), interaction = harm - sum of its singleton harms (null for singletons) |
| ``skipped`` | ``[n_skipped] of {task_id, after_step, n_tokens, reason}`` | object | n_tokens: tokens | boundaries not run: the teacher-forced render (n_tokens) exceeds max_tokens or the model's positions; in no aggregate |
| ``model`` | ``{...}`` | object or null | - | the sensor's describe() (null when not given) |
| ``source`` | ``[]`` | str or null | - | the DRSR parts folder the boundary records were read from (the demo: harm and DRSR share one set of forwards); null when harm ran its own forwards |
| ``config`` | ``{...}`` | object | - | the frozen config of the analysis that made this file: dataclasses.asdict, tuples as lists (interp.record.config_from builds it back) |
| ``provenance`` | ``{...}`` | object | - | what ran (interp.record): model, revision, dtype (resolved), device, seeds, package, version, inputs (name -> sha256) |"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from interp.data.deletions import (DRSR_UNIT_KINDS, UNIT_KINDS, Unit, delete_units, drsr_compared, history_units,
                                   parse_unit_kinds, units_overlap)
from interp.sensor.limits import DEFAULT_MAX_TOKENS, context_limit, over_limit, skip_record
from interp.record import RECORD_FIELDS
from interp.schema import Field, schema_dict
from interp.stats import percentile_ci, task_resamples
from interp.sensor.forward import Plan
from interp.sensor.prefix import DEFAULT_BATCH_BYTES, Branch, run_branches
from interp.data.render import Rendered, render
from interp.data.trajectory import Trajectory
from interp.sensor.protocol import Sensor
from patching.config import DrsrConfig

FIELDS = (
    Field("schema", "{...}", "object", "-", "this table: {field: {shape, dtype, units, doc}}"),
    Field("units", "[n_kinds]", "str", "-",
          "the unit kinds the candidate sets were drawn from (reasoning, observation, tool_exchange, step), in "
          "that order"),
    Field("cardinalities", "[n_cardinalities]", "int", "units per set", "the set sizes measured (1 = singletons)"),
    Field("margin", "[]", "float", "nats/token",
          "pairs of sets whose exact harms differ by less than this are not counted in pair_accuracy"),
    Field("aggregates", "[n_aggregates] of {aggregator, cardinality, n_sets, n_pairs, n_tasks, pair_accuracy, ci, mae}", "object", "accuracy: fraction; mae: nats/token",
          'one row per aggregator (sum, mean, max, min) and cardinality ("2", "3", ... and "all" = sets of '
          "size >= 2): n_sets with all singletons measured, n_pairs counted at the margin over n_tasks tasks, "
          "pair_accuracy (pooled over boundaries; null without a counted pair) and its 95% task-bootstrap ci "
          "[lo, hi] (the pooled ratio over resampled tasks; null with fewer than 3 tasks counted), mae of "
          "predicting set harm by the aggregate of singleton harms (null without sets)"),
    Field("per_cardinality", "{k: {mean_interaction, n_sets, mae_pairwise, n_pairwise}}", "object", "interaction, mae: nats/token",
          "per set size k >= 2 (keys are strings): mean interaction over sets (null without sets), n_sets "
          "(sets with an interaction); for k = 3 mae_pairwise of the reconstruction from singletons plus "
          "pairwise interactions over the n_pairwise triples with all three pairs measured (null otherwise)"),
    Field("step_sets", "{n_sets, aggregates, per_cardinality}", "object or null", "as aggregates",
          "the toolkit's addition, apart from the rows compared with DRSR: n_sets of 2+ units holding a whole "
          "step, and aggregates / per_cardinality recomputed over every set, those included (null when no set "
          "holds a step)"),
    Field("boundaries", "[n_boundaries] of {task_id, after_step, units, target, target_tokens, nll_full, sets}", "object", "nats/token",
          "one boundary_harm record per boundary: units = kinds drawn from; target = the recorded next output "
          "y (text) and target_tokens its token count; nll_full = NLL(y given H); sets = [{members: [[kind, "
          "step, index], ...], tokens_removed, nll, harm, interaction}] (index null for a step unit), harm = "
          "NLL(y given H minus A) - NLL(y given H), interaction = harm - sum of its singleton harms (null for "
          "singletons)"),
    Field("skipped", "[n_skipped] of {task_id, after_step, n_tokens, reason}", "object", "n_tokens: tokens",
          "boundaries not run: the teacher-forced render (n_tokens) exceeds max_tokens or the model's "
          "positions; in no aggregate"),
    Field("model", "{...}", "object or null", "-", "the sensor's describe() (null when not given)"),
    Field("source", "[]", "str or null", "-",
          "the DRSR parts folder the boundary records were read from (the demo: harm and DRSR share one set of "
          "forwards); null when harm ran its own forwards"),
    *RECORD_FIELDS,
)
MARGIN = DrsrConfig.margin  # nats/token: the reference study's pair-ordering margin (one home: patching.config)
DRSR_MAX_K = DrsrConfig.max_k  # DRSR reports sets up to 4 units
DEFAULT_BUDGET = DrsrConfig.budget  # sampled sets per cardinality >= 2
AGGREGATORS: dict[str, Callable[[Sequence[float]], float]] = {
    "sum": lambda h: float(np.sum(h)), "mean": lambda h: float(np.mean(h)),
    "max": lambda h: float(np.max(h)), "min": lambda h: float(np.min(h)),
}
_ENUMERATE = 50_000  # up to this many combinations of one size are enumerated and shuffled; above, sampled


def default_boundaries(trajectories: Iterable[Trajectory]) -> list[str]:
    """The one default boundary rule of set-level harm: ``task_id@b`` with ``b = max(1, n_steps // 2)``.

    Harm teacher-forces the recorded next output, so ``b`` must have a next
    step (``b < n_steps``): trajectories with fewer than two steps have no
    boundary and are left out. The middle boundary has history blocks to
    delete before it and a recorded step after it, and is one fixed,
    model-independent choice per trajectory (in the order given).
    """
    return [f"{t.task_id}@{max(1, t.n_steps // 2)}" for t in trajectories if t.n_steps >= 2]


def check_boundaries(keys: Sequence[str], trajectories: Iterable[Trajectory]) -> list[str]:
    """``keys`` (``task_id@b``) without repeats, in order; ValueError unless each names a trajectory and a
    boundary with a recorded next step (``1 <= b < n_steps``)."""
    by_id = {t.task_id: t for t in trajectories}
    for key in keys:
        task_id, at, b = key.rpartition("@")
        if not at or not b.isdigit():
            raise ValueError(f"{key!r}: expected task_id@b (e.g. {next(iter(by_id), 'task')}@2)")
        if task_id not in by_id:
            raise ValueError(f"{key!r}: no trajectory {task_id!r} in the trajectory file")
        if not 1 <= int(b) < by_id[task_id].n_steps:
            raise ValueError(f"{key!r}: b must be in 1..{by_id[task_id].n_steps - 1} (a later step is the recorded "
                             "next output)")
    return list(dict.fromkeys(keys))


@dataclass
class SetHarm:
    """Harm of deleting one set of units."""

    members: tuple[Unit, ...]
    tokens_removed: int
    nll: float
    harm: float
    interaction: float | None = None


def _target(traj: Trajectory, b: int, units: Iterable[Unit], tok: Any) -> tuple[Rendered, int, int]:
    """Render H minus ``units`` at its boundary + 1; return it with y's token range ``[y0, y1)``."""
    edited, b2, _ = delete_units(traj, b, units)
    prompt = render(edited, b2, tok)
    nxt = render(edited, b2 + 1, tok)
    if nxt.input_ids[: prompt.n_tokens] != prompt.input_ids:
        raise ValueError(f"{traj.task_id}@{b}: the prompt at b is not a token prefix of the render at b+1; "
                         "the recorded next output cannot be teacher-forced exactly with this template")
    ends = [s.end for s in nxt.spans(step=b2 + 1) if s.kind in ("reasoning_block", "action")]
    if not ends:
        raise ValueError(f"{traj.task_id}@{b}: step {b + 1} has neither reasoning nor an action to teacher-force")
    return nxt, prompt.n_tokens, max(ends)


def _nll(out_logprob: dict[int, float], y0: int, y1: int) -> float:
    return -sum(out_logprob[p - 1] for p in range(y0, y1)) / (y1 - y0)


def _disjoint(units: Sequence[Unit]) -> bool:
    return not any(units_overlap(a, c) for a, c in itertools.combinations(units, 2))


def _sample(units: list[Unit], size: int, budget: int, rng: random.Random) -> list[tuple[Unit, ...]]:
    """Up to ``budget`` distinct sets of ``size`` non-overlapping units (enumerated and shuffled when few)."""
    if math.comb(len(units), size) <= _ENUMERATE:
        combos = [c for c in itertools.combinations(units, size) if _disjoint(c)]
        rng.shuffle(combos)
        return combos[:budget]
    chosen: dict[tuple[Unit, ...], None] = {}
    for _ in range(50 * budget):
        if len(chosen) >= budget:
            break
        combo = tuple(units[i] for i in sorted(rng.sample(range(len(units)), size)))
        if _disjoint(combo):
            chosen.setdefault(combo, None)
    return list(chosen)


def candidate_sets(traj: Trajectory, b: int, max_k: int = DRSR_MAX_K, budget: int = DEFAULT_BUDGET, seed: int = 0,
                   units: Sequence[str] = DRSR_UNIT_KINDS) -> list[tuple[Unit, ...]]:
    """Every singleton unit of steps 1..b, ``budget`` sampled sets per size 2..max_k, and the pairs inside sampled triples."""
    pool = history_units(traj, b, units)
    sets: list[tuple[Unit, ...]] = [(x,) for x in pool]
    rng = random.Random(f"{seed}:{traj.task_id}:{b}")
    for size in range(2, max_k + 1):
        sets.extend(_sample(pool, size, budget, rng))
    have = set(sets)
    for s in [s for s in sets if len(s) == 3]:
        for pair in itertools.combinations(s, 2):
            if pair not in have:
                have.add(pair)
                sets.append(pair)
    return sets


def set_harms(sensor: Sensor, traj: Trajectory, b: int, sets: list[tuple[Unit, ...]],
              share_prefix: bool = True, target: tuple[Any, int, int] | None = None,
              batch_bytes: int = DEFAULT_BATCH_BYTES, nest: bool = True) -> tuple[float, list[SetHarm]]:
    """``NLL(y | H)`` and the harm of every set at boundary ``b`` (b < n_steps).

    Each set is one branch of the prefix scheduler (``interp.sensor.prefix``)
    with the full render up to y's end as its base; its targets are y's
    tokens, so it departs at its first changed token or at y's first target
    position, whichever is earlier. Memory stays bounded in the number of sets:
    the full run advances from one departure point to the next holding one
    cache snapshot at a time, and a set's render is held as int32 tokens. ``nest``: sets ride on the forward of a
    set they share tokens with past their point; the rest leaving at one point run as padded batches within
    ``batch_bytes`` (module docstring; ``batch_bytes=0, nest=False``: one forward per set).
    """
    if not 1 <= b < traj.n_steps:
        raise ValueError(f"{traj.task_id}: harm needs a recorded next step: b in 1..{traj.n_steps - 1}, got {b}")
    tok = sensor.tokenizer
    full, y0, y1 = target or _target(traj, b, (), tok)  # ``target``: the caller's own full render (rendered once)
    base_ids = full.input_ids[:y1]
    branches = [Branch(None, base_ids, Plan(targets={p - 1: base_ids[p] for p in range(y0, y1)}))]
    spans: dict[tuple[Unit, ...] | None, tuple[int, int]] = {None: (y0, y1)}  # y's token range in each set's render
    removed: dict[tuple[Unit, ...], int] = {}
    for s in sets:
        r, e0, e1 = _target(traj, b, s, tok)
        if r.input_ids[e0:e1] != base_ids[y0:y1]:
            raise ValueError(f"{traj.task_id}@{b}: deleting {list(s)} changes the tokens of the recorded next output")
        removed[s] = full.n_tokens - r.n_tokens
        if s not in spans:  # kept as int32 until its branch runs
            ids = np.asarray(r.input_ids[:e1], dtype=np.int32)
            branches.append(Branch(s, ids, Plan(targets={p - 1: int(ids[p]) for p in range(e0, e1)})))
            spans[s] = (e0, e1)
    # A set whose render is a prefix of the full one (e.g. the empty set) is served by the full run: harm 0.
    nll: dict[tuple[Unit, ...] | None, float] = {}
    for res in run_branches(sensor, branches, base_ids, share=share_prefix, batch_bytes=batch_bytes, nest=nest):
        key = cast("tuple[Unit, ...] | None", res.key)  # the keys given to ``branches`` above
        nll[key] = _nll(res.outputs.target_logprob, *spans[key])
    nll_full = nll[None]
    results = [SetHarm(s, removed[s], nll[s], nll[s] - nll_full) for s in sets]
    single = {h.members[0]: h.harm for h in results if len(h.members) == 1}
    for h in results:
        if len(h.members) > 1 and all(m in single for m in h.members):
            h.interaction = h.harm - sum(single[m] for m in h.members)
    return nll_full, results


def boundary_harm(sensor: Sensor, traj: Trajectory, b: int, max_k: int = DRSR_MAX_K, budget: int = DEFAULT_BUDGET,
                  seed: int = 0, units: Sequence[str] = DRSR_UNIT_KINDS,
                  max_tokens: int = DEFAULT_MAX_TOKENS,
                  batch_bytes: int = DEFAULT_BATCH_BYTES, nest: bool = True) -> dict[str, Any]:
    """One boundary's ``harm.json`` record: the recorded next output, its NLL and every candidate set's harm
    (or, over ``max_tokens``, a ``skipped`` record: task_id, after_step, n_tokens, reason).

    ``batch_bytes``, ``nest``: how the sets' forwards share (``set_harms``)."""
    kinds = parse_unit_kinds(units)
    full, y0, y1 = _target(traj, b, (), sensor.tokenizer)
    reason = over_limit(y1, context_limit(sensor, max_tokens))
    if reason:
        return {**skip_record(traj.task_id, b, y1, reason), "skipped": True}
    nll, sets = set_harms(sensor, traj, b, candidate_sets(traj, b, max_k, budget, seed, kinds), target=(full, y0, y1),
                          batch_bytes=batch_bytes, nest=nest)
    return {"task_id": traj.task_id, "after_step": b, "units": list(kinds),
            "target": full.text[full.offsets[y0][0]:full.offsets[y1 - 1][1]], "target_tokens": y1 - y0,
            "nll_full": nll,
            "sets": [{"members": [list(m) for m in h.members], "tokens_removed": h.tokens_removed,
                      "nll": h.nll, "harm": h.harm, "interaction": h.interaction} for h in sets]}


RECORD_KEYS = ("task_id", "after_step", "units", "target", "target_tokens", "nll_full", "sets",
               "skipped", "n_tokens", "reason")  # a boundary_harm record's keys (skipped ones: skip_record's)


def harm_record(record: dict[str, Any]) -> dict[str, Any]:
    """The ``boundary_harm`` part of a record that carries more (a DRSR record adds representations)."""
    return {k: v for k, v in record.items() if k in RECORD_KEYS}


def pair_ordering_accuracy(harms: list[SetHarm], single: dict[Unit, float], aggregator: str = "sum",
                           margin: float = 0.0) -> tuple[float, int]:
    """Score and count of set pairs the aggregate prediction orders like the exact harm (rule: module docstring)."""
    agg = AGGREGATORS[aggregator]
    return ordered_pairs([h.harm for h in harms], [agg([single[m] for m in h.members]) for h in harms], margin)


def ordered_pairs(harm: Sequence[float], pred: Sequence[float], margin: float = 0.0) -> tuple[float, int]:
    """Score and count of the pairs of one boundary's sets that ``pred`` orders like ``harm`` (the one rule of
    pair-ordering accuracy, module docstring): pairs with ``abs(harm difference) >= margin`` (and nonzero) are
    counted; each scores 1 when the predictions differ with its sign, 0.5 when they tie, 0 otherwise."""
    h, p = np.asarray(harm, float), np.asarray(pred, float)
    i, j = np.triu_indices(len(h), 1)
    true, guess = h[i] - h[j], p[i] - p[j]
    keep = (true != 0) & (np.abs(true) >= margin)
    true, guess = true[keep], guess[keep]
    return float(np.sum(np.where(guess == 0, 0.5, (guess > 0) == (true > 0)))), int(keep.sum())


def _pairwise_errors(sets: list[SetHarm], single: dict[Unit, float]) -> list[float]:
    """abs(harm - reconstruction from singletons + pairwise interactions) of each triple with its three pairs measured."""
    pair = {frozenset(h.members): h.harm - sum(single[m] for m in h.members) for h in sets if len(h.members) == 2}
    errors = []
    for h in sets:
        pairs = [frozenset(p) for p in itertools.combinations(h.members, 2)]
        if len(h.members) == 3 and all(p in pair for p in pairs):
            errors.append(abs(h.harm - sum(single[m] for m in h.members) - sum(pair[p] for p in pairs)))
    return errors


def _sets(row: dict[str, Any]) -> list[SetHarm]:
    return [SetHarm(tuple(tuple(m) for m in s["members"]), s["tokens_removed"], s["nll"], s["harm"], s["interaction"])
            for s in row["sets"]]


def pooled_ratio_ci(per_task: dict[str, list[float]], n_boot: int, seed: int = 0) -> list[float] | None:
    """95% task-bootstrap CI of a pooled ratio sum(score) / sum(count) from per-task ``[score, count]`` (tasks
    with no count carry no weight); None with fewer than 3 counted tasks (no interval worth the name) or no draws
    (``n_boot`` 0)."""
    counted = [(s, c) for s, c in per_task.values() if c > 0]
    if len(counted) < 3 or n_boot < 1:
        return None
    scores, counts = np.array(counted, dtype=float).T
    rng = np.random.default_rng(seed)
    draws = [scores[rows].sum() / counts[rows].sum() for rows in task_resamples(np.arange(len(counted)), n_boot, rng)]
    return [float(v) for v in percentile_ci(draws)]


def compared_record(record: dict[str, Any]) -> dict[str, Any]:
    """A boundary record keeping only its ``interp.data.deletions.drsr_compared`` sets (singletons included): what the rows
    compared with DRSR read."""
    return {**record, "sets": [s for s in record["sets"] if drsr_compared(s["members"])]}


def _aggregates(per_boundary: list[dict[str, Any]], margin: float, n_boot: int, seed: int
                ) -> tuple[list[dict[str, Any]], dict[str, Any], int]:
    """``aggregates`` and ``per_cardinality`` (module docstring) of boundary records, and their number of sets
    of 2+ units."""
    interactions: dict[int, list[float]] = {}
    pairwise: dict[int, list[float]] = {}
    tally: dict[tuple[str, str], list[float]] = {}  # (aggregator, cardinality) -> [score, counted, n_sets, abs err sum]
    by_task: dict[tuple[str, str], dict[str, list[float]]] = {}  # (aggregator, cardinality) -> task -> [score, counted]
    n_multi = 0
    for row in per_boundary:
        sets = _sets(row)
        n_multi += sum(len(h.members) > 1 for h in sets)
        single = {h.members[0]: h.harm for h in sets if len(h.members) == 1}
        multi = [h for h in sets if len(h.members) > 1 and all(m in single for m in h.members)]
        groups = {str(k): [h for h in multi if len(h.members) == k] for k in sorted({len(h.members) for h in multi})}
        groups["all"] = multi
        for name, mine in groups.items():
            for aggregator, agg in AGGREGATORS.items():
                score, counted = pair_ordering_accuracy(mine, single, aggregator, margin)
                err = sum(abs(h.harm - agg([single[m] for m in h.members])) for h in mine)
                t = tally.setdefault((aggregator, name), [0.0, 0, 0, 0.0])
                t[0] += score
                t[1] += counted
                t[2] += len(mine)
                t[3] += err
                mine_task = by_task.setdefault((aggregator, name), {}).setdefault(row["task_id"], [0.0, 0])
                mine_task[0] += score
                mine_task[1] += counted
        for h in sets:
            if len(h.members) > 1:
                interactions.setdefault(len(h.members), [])
                if h.interaction is not None:
                    interactions[len(h.members)].append(h.interaction)
        pairwise.setdefault(3, []).extend(_pairwise_errors(sets, single))
    order = {name: i for i, name in enumerate(sorted((n for _, n in tally if n != "all"), key=int) + ["all"])}
    aggregates = [{"aggregator": aggregator, "cardinality": name, "n_sets": int(n), "n_pairs": int(counted),
                   "n_tasks": sum(c > 0 for _, c in by_task[(aggregator, name)].values()),
                   "pair_accuracy": score / counted if counted else None,
                   "ci": pooled_ratio_ci(by_task[(aggregator, name)], n_boot, seed), "mae": err / n if n else None}
                  for (aggregator, name), (score, counted, n, err)
                  in sorted(tally.items(), key=lambda kv: (list(AGGREGATORS).index(kv[0][0]), order[kv[0][1]]))]
    per_cardinality = {str(k): {"mean_interaction": float(np.mean(v)) if v else None, "n_sets": len(v),
                                "mae_pairwise": (float(np.mean(pairwise[3])) if k == 3 and pairwise.get(3) else None),
                                "n_pairwise": len(pairwise.get(3, [])) if k == 3 else 0}
                       for k, v in sorted(interactions.items())}
    return aggregates, per_cardinality, n_multi


def summarize_harm(per_boundary: list[dict[str, Any]], model: dict[str, Any] | None = None,
                   margin: float = MARGIN, *, n_boot: int, seed: int = 0,
                   source: str | None = None) -> dict[str, Any]:
    """The ``harm.json`` document (``FIELDS``) from boundary_harm records; pure: no model is run.

    Per aggregator and cardinality: pair-ordering accuracy at ``margin`` with its task-bootstrap CI, and
    MAE; per cardinality: mean interaction and the pairwise reconstruction of
    triples; over DRSR's block kinds only (``drsr_compared``), the sets holding a whole step reported apart
    (``step_sets``). ``model`` is the sensor's ``describe()``.
    """
    skipped = [{k: row[k] for k in ("task_id", "after_step", "n_tokens", "reason")}
               for row in per_boundary if row.get("skipped")]
    per_boundary = [row for row in per_boundary if not row.get("skipped")]
    kinds: set[str] = set()
    sizes: set[int] = set()
    for row in per_boundary:
        kinds.update(row.get("units") or [m[0] for s in row["sets"] for m in s["members"]])
        sizes.update(len(s["members"]) for s in row["sets"])
    aggregates, per_cardinality, n_compared = _aggregates([compared_record(r) for r in per_boundary], margin,
                                                          n_boot, seed)
    every, every_cardinality, n_multi = _aggregates(per_boundary, margin, n_boot, seed)
    return {
        "schema": schema_dict(FIELDS),
        "units": [k for k in UNIT_KINDS if k in kinds],
        "cardinalities": sorted(sizes),
        "margin": margin,
        "aggregates": aggregates,
        "per_cardinality": per_cardinality,
        "step_sets": ({"n_sets": n_multi - n_compared, "aggregates": every, "per_cardinality": every_cardinality}
                      if n_multi > n_compared else None),
        "boundaries": per_boundary,
        "skipped": skipped,
        "model": model,
        "source": source,
    }
