"""Set-level deletion harm (DRSR): exact, joint, and not additive over singletons.

At boundary b the recorded next output ``y`` is step b+1's assistant turn as
the agent produced it (its reasoning and action, in the template's own
format), taken from the render at b+1 between the end of the prompt at b and
the end of step b+1's last action span. For a set ``A`` of history blocks
(reasoning blocks of steps 1..b):

    NLL(y | H)     = mean over y's tokens of -log p(token | everything before it)   [nats/token]
    harm(A)        = NLL(y | H \\ A) - NLL(y | H)
    interaction(A) = harm(A) - sum of harm({a}) over a in A

Sets: every singleton, plus seeded samples of pairs and triples (up to
cardinality ``max_k``) within a ``budget`` per cardinality. The render of
``H \\ A`` shares every token before the earliest deleted block with the
full render, so one forward of the full render snapshots the cache at each
such point and each set only runs its suffix (exact; tested against
recomputation from scratch with ``share_prefix=False``).

Fields of ``harm.json`` (``FIELDS``; ``summarize_harm`` writes them):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``per_cardinality`` | ``{k: {mean_interaction, n_sets, pair_ordering_accuracy}}`` | object | interaction: nats/token; accuracy: fraction | per set size k >= 2 (keys are strings): mean interaction over sets (null without sets), n_sets (sets with an interaction), pair_ordering_accuracy = mean over boundaries of the fraction of same-size set pairs the additive prediction orders like the true harm (null when undefined) |
| ``boundaries`` | ``[n_boundaries] of {task_id, after_step, nll_full, sets}`` | object | nats/token | one boundary_harm record per boundary: nll_full = NLL(y given H); sets = [{members: [[step, block], ...], tokens_removed, nll, harm, interaction}], harm = NLL(y given H minus A) - NLL(y given H), interaction = harm - sum of its singleton harms (null for singletons) |
| ``model`` | ``{...}`` | object or null | - | the sensor's describe() (null when not given) |
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from interp.data.conditions import EditLog, drop_blocks
from interp.extraction.extract import lcp
from interp.schema import fields_from_doc, schema_dict
from interp.sensor.forward import Plan, run_plan
from interp.data.render import Rendered, render
from interp.data.trajectory import Trajectory

Block = tuple[int, int]  # (step, block index)

FIELDS = fields_from_doc(__doc__, "FIELDS")


def default_boundaries(trajectories: Iterable[Trajectory]) -> list[str]:
    """The one default boundary rule of set-level harm: ``task_id@b`` with ``b = max(1, n_steps // 2)``.

    Harm teacher-forces the recorded next output, so ``b`` must have a next
    step (``b < n_steps``): trajectories with fewer than two steps have no
    boundary and are left out. The middle boundary has history blocks to
    delete before it and a recorded step after it, and is one fixed,
    model-independent choice per trajectory (in the order given).
    """
    return [f"{t.task_id}@{max(1, t.n_steps // 2)}" for t in trajectories if t.n_steps >= 2]


@dataclass
class SetHarm:
    """Harm of deleting one set of blocks."""

    members: tuple[Block, ...]
    tokens_removed: int
    nll: float
    harm: float
    interaction: float | None = None


def _target(traj: Trajectory, b: int, blocks: set[Block], tok: Any) -> tuple[Rendered, int, int]:
    """Render H minus ``blocks`` at b+1; return it with y's token range ``[y0, y1)``."""
    drop: dict[int, set[int]] = {}
    for step, k in blocks:
        drop.setdefault(step, set()).add(k)
    edited = drop_blocks(traj, EditLog("harm", b), drop, None, None) if drop else traj
    prompt = render(edited, b, tok)
    nxt = render(edited, b + 1, tok)
    if nxt.input_ids[: prompt.n_tokens] != prompt.input_ids:
        raise ValueError(f"{traj.task_id}@{b}: the prompt at b is not a token prefix of the render at b+1; "
                         "the recorded next output cannot be teacher-forced exactly with this template")
    y1 = max(s.end for s in nxt.spans("action", step=b + 1))
    return nxt, prompt.n_tokens, y1


def _nll(out_logprob: dict[int, float], y0: int, y1: int) -> float:
    return -sum(out_logprob[p - 1] for p in range(y0, y1)) / (y1 - y0)


def candidate_sets(traj: Trajectory, b: int, max_k: int = 3, budget: int = 20, seed: int = 0) -> list[tuple[Block, ...]]:
    """All singletons of reasoning blocks in steps 1..b, plus up to ``budget`` sampled sets per size 2..max_k."""
    blocks = [(t, k) for t in range(1, b + 1) for k in range(len(traj.steps[t - 1].blocks))]
    sets: list[tuple[Block, ...]] = [(x,) for x in blocks]
    rng = random.Random(f"{seed}:{traj.task_id}:{b}")
    for size in range(2, max_k + 1):
        combos = list(itertools.combinations(blocks, size))
        rng.shuffle(combos)
        sets.extend(combos[:budget])
    return sets


def set_harms(sensor: Any, traj: Trajectory, b: int, sets: list[tuple[Block, ...]],
              share_prefix: bool = True) -> tuple[float, list[SetHarm]]:
    """``NLL(y | H)`` and the harm of every set at boundary ``b`` (b < n_steps)."""
    if not 1 <= b < traj.n_steps:
        raise ValueError(f"{traj.task_id}: harm needs a recorded next step: b in 1..{traj.n_steps - 1}, got {b}")
    tok = sensor.tokenizer
    full, y0, y1 = _target(traj, b, set(), tok)
    edited = {s: _target(traj, b, set(s), tok) for s in sets}
    starts = {s: lcp(r.input_ids, full.input_ids[:y1]) if share_prefix else 0 for s, (r, _, _) in edited.items()}
    plan = Plan(targets={p - 1: full.input_ids[p] for p in range(y0, y1)},
                snapshots=sorted({n for n in starts.values() if 0 < n < y1}))
    base = run_plan(sensor, full.input_ids[:y1], plan)
    nll_full = _nll(base.target_logprob, y0, y1)
    results = []
    for s, (r, e0, e1) in edited.items():
        n = starts[s]
        if share_prefix and n >= e1:  # nothing of y's context changed (e.g. the empty set): harm is exactly 0
            results.append(SetHarm(s, full.n_tokens - r.n_tokens, nll_full, 0.0))
            continue
        snap = base.snapshots.get(n)
        targets = {p - 1: r.input_ids[p] for p in range(e0, e1)}
        out = run_plan(sensor, r.input_ids[n:e1] if snap else r.input_ids[:e1],
                       Plan(targets={p: t for p, t in targets.items() if p >= (n if snap else 0)}), start=snap)
        logp = {**{p: base.target_logprob[p] for p in targets if snap and p < n}, **out.target_logprob}
        nll = _nll(logp, e0, e1)
        results.append(SetHarm(s, full.n_tokens - r.n_tokens, nll, nll - nll_full))
    single = {h.members[0]: h.harm for h in results if len(h.members) == 1}
    for h in results:
        if len(h.members) > 1 and all(m in single for m in h.members):
            h.interaction = h.harm - sum(single[m] for m in h.members)
    return nll_full, results


def boundary_harm(sensor: Any, traj: Trajectory, b: int, max_k: int = 3, budget: int = 20,
                  seed: int = 0) -> dict[str, Any]:
    """One boundary's ``harm.json`` record: NLL of the recorded next output and every candidate set's harm."""
    nll, sets = set_harms(sensor, traj, b, candidate_sets(traj, b, max_k, budget, seed))
    return {"task_id": traj.task_id, "after_step": b, "nll_full": nll,
            "sets": [{"members": [list(m) for m in h.members], "tokens_removed": h.tokens_removed,
                      "nll": h.nll, "harm": h.harm, "interaction": h.interaction} for h in sets]}


def pair_ordering_accuracy(harms: list[SetHarm], single: dict[Block, float]) -> float | None:
    """Fraction of set pairs (same cardinality) that the additive prediction orders like the true harm."""
    agree = total = 0
    for a, c in itertools.combinations(harms, 2):
        pred = sum(single[m] for m in a.members) - sum(single[m] for m in c.members)
        true = a.harm - c.harm
        if pred != 0 and true != 0:
            total += 1
            agree += (pred > 0) == (true > 0)
    return agree / total if total else None


def summarize_harm(per_boundary: list[dict[str, Any]], model: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``harm.json`` document (``FIELDS``) from boundary_harm records; pure: no model is run.

    Per cardinality: mean interaction and pair-ordering accuracy of the
    additive prediction. ``model`` is the sensor's ``describe()``.
    """
    by_k: dict[int, list[float]] = {}
    acc: dict[int, list[float]] = {}
    for row in per_boundary:
        sets = [SetHarm(tuple(map(tuple, s["members"])), s["tokens_removed"], s["nll"], s["harm"], s["interaction"])
                for s in row["sets"]]
        single = {h.members[0]: h.harm for h in sets if len(h.members) == 1}
        for k in sorted({len(h.members) for h in sets}):
            mine = [h for h in sets if len(h.members) == k]
            if k > 1:
                by_k.setdefault(k, []).extend(h.interaction for h in mine if h.interaction is not None)
            value = pair_ordering_accuracy(mine, single) if k > 1 else None
            if value is not None:
                acc.setdefault(k, []).append(value)
    return {
        "schema": schema_dict(FIELDS),
        "per_cardinality": {str(k): {"mean_interaction": float(np.mean(v)) if v else None, "n_sets": len(v),
                                     "pair_ordering_accuracy": float(np.mean(acc[k])) if acc.get(k) else None}
                            for k, v in sorted(by_k.items())},
        "boundaries": per_boundary,
        "model": model,
    }
