"""The one prefix-sharing scheduler: run a shared base once, continue each branch from a cache snapshot.

A causal model's outputs at position i depend only on tokens 0..i, so
sequences that share a prefix need its forward only once. Extraction (every
boundary of a trajectory), ICLR entropy (successive compressed histories),
``patching.patch`` (target after source), KL Repair (deleted renders after the
full ones) and set-level harm (each deletion set after the full history) all
run through this module; none keeps a departure loop of its own.

**A branch** (:class:`Branch`) is a token sequence (absolute positions from 0)
with a :class:`~interp.sensor.forward.Plan` of what to keep at its positions
(pooled sums of a site or any TransformerLens hook name over a span of
positions, captured activations at a position, attention rows of a query,
log-probs, entropies, target log-probs), and optionally ``keep_cache``: the
cache after its last token, to continue it elsewhere (patched variants).
:func:`run_branches` takes branches and a base (default: the longest branch)
and yields one :class:`BranchOutput` per branch, with that branch's outputs
under its own keys, exactly as if it had been run alone (parity-tested
against a whole forward per branch in ``tests/extraction/test_prefix_scheduler.py``).

How a branch is served (:func:`departure` holds the edge rules, once):

- a branch that is a token prefix of the base is **served** by the base
  forward: its requests join the base's plan (``forward`` = ``shared``);
- otherwise it **departs** at the longest common prefix d: whatever it asks
  at positions < d comes from the base forward (pooled sums are added:
  branch part + base part), the rest from a forward of its suffix that starts
  from a snapshot of the base's cache at d (``suffix@d``); d = 0 is a forward
  of its own from scratch (``own``);
- target log-probs and entropies are always computed in the branch's own
  forward (a target after the departure token is another token than the
  base's), so a branch with them departs no later than their first position;
- a branch leaves at least one token to run (d <= len - 1) unless served;
- branches that depart and are prefixes of a longer departing branch ride
  on its suffix forward (one forward per group, snapshots at their ends when
  they keep their cache).

**What is snapshotted.** The cache after d tokens
(``interp.sensor.forward.snapshot_cache``): full-attention KV tensors are
taken by reference (an update rebinds them with ``torch.cat``), Gated-DeltaNet
conv and recurrent states are deep-copied, because a forward mutates them in
place. Every continuation copies its start snapshot again before running,
so a snapshot serves any number of branches. The base forward is cut at each
departure point and at each kept cache (a cut is also where the chunked
forward would start a new chunk; results equal an uncut forward within
float rounding, which is why the reference paths run whole forwards).

**Memory bounds.** ``hold=False`` (default) interleaves: the base advances
from one departure point to the next (each piece adds to the same outputs, so
the numbers are those of one uncut base run) and the branches departing there
run before it goes on, so one base snapshot (plus one group's) is held at a
time and served branches are yielded as soon as the base has passed their end.
``hold=True`` runs the whole base first, holding one snapshot per distinct
departure point, then the departing branches: use it when a consumer needs
the served branches' outputs before any departing one (KL Repair scores a
deleted branch against the full branch of the same boundary). Outputs stay on
the sensor's device; pooled sums are float32 [d_model] per key.

**Batches.** With ``batch_bytes`` > 0, the branches that leave the base at
one point, each alone in its group and keeping only log-probs, entropies and
target log-probs (set-level harm's deletion sets), run as right-padded batches
from that point's snapshot (``interp.sensor.forward.run_batch``: padding after
a row's real tokens is neutral by causality for attention and Gated-DeltaNet
alike, and the snapshot's KV is broadcast, not copied per row). Rows are
sorted by suffix length and cut into consecutive batches whose estimated
working memory, rows x ``batch_row_bytes(longest suffix)``, stays within
``batch_bytes``; a row over the budget runs alone. ``DEFAULT_BATCH_BYTES``
(512 MiB) is the default of the callers that batch (``patching.harm``): it
fits a 2-core laptop's spare memory with SmolLM2 at thousands of tokens of
history; raise it on a GPU. A model whose cache has other layer kinds
(sliding window, quantized) runs one suffix per forward. Results equal the
unbatched path within float rounding (exactly in float64 on the tiny hybrid,
``tests/patching/test_harm_batch.py``).

:class:`Resume` is the same rule across calls, for sequences that arrive one
at a time (online ICLR): it continues the next sequence from the last one's
cache, cut to the departure point where the model's cache allows it (plain
attention KV), else from the latest snapshot at chosen marks.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import cast

import numpy as np

from interp.sensor.forward import (Outputs, Plan, Snapshot, batch_row_bytes, batch_supported, crop_snapshot, croppable,
                                   new_cache, run_batch, run_plan)
from interp.sensor.protocol import ForwardSensor

DEFAULT_BATCH_BYTES = 512 * 2 ** 20  # working memory of one padded batch of suffixes (module docstring, batches)
NEST_MIN = 32  # tokens two departing suffixes must share past their point for one to ride on the other's forward
TokenIds = Sequence[int] | np.ndarray  # token ids: a list, or an int array (harm keeps its many renders so)


def lcp(a: TokenIds, b: TokenIds) -> int:
    """Length of the longest common token prefix."""
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if len(diff) else n


@dataclass
class Branch:
    """One token sequence and what to keep from it (positions absolute); ``keep_cache``: its final cache too."""

    key: Hashable
    tokens: TokenIds
    plan: Plan = field(default_factory=Plan)  # its ``snapshots`` are the scheduler's: leave them empty
    keep_cache: bool = False


@dataclass
class BranchOutput:
    """What one branch got: ``outputs`` under its own keys, where it left the base, its cache if kept."""

    key: Hashable
    outputs: Outputs
    departure: int  # tokens taken from the base forward (len(tokens) when served, 0 for a forward of its own)
    served: bool
    cache: Snapshot | None = None

    @property
    def forward(self) -> str:
        """``shared`` (served by the base forward), ``suffix@<departure>`` or ``own``."""
        return "shared" if self.served else f"suffix@{self.departure}" if self.departure else "own"


def departure(tokens: TokenIds, base: TokenIds, plan: Plan, merge: bool = True) -> int:
    """Where a branch leaves ``base`` (the edge rules of the module docstring); ``len(tokens)`` = served.

    ``merge=False``: the base's outputs are not available (another call's
    sequence), so every request of ``plan`` must be computed in the branch's
    own forward.
    """
    n = lcp(tokens, base)
    if merge and n == len(tokens) and all(p + 1 < n and tokens[p + 1] == t for p, t in plan.targets.items()):
        return n
    own = [*plan.targets, *plan.entropy] if merge else _positions(plan)
    return max(0, min([n, len(tokens) - 1, *own]))


def _positions(plan: Plan) -> list[int]:
    """Every position ``plan`` asks something at."""
    pooled = [int(p) for _, _, positions in plan.pooled.values() for p in positions]
    return [*pooled, *(p for _, p in plan.captures.values()), *(p for _, p in plan.rows), *plan.logprobs,
            *plan.entropy, *plan.targets]


def _part(plan: Plan, lo: int, hi: int | None) -> Plan:
    """The requests of ``plan`` at positions in ``[lo, hi)`` (``hi`` None: no upper end)."""
    def inside(p: int) -> bool:
        return p >= lo and (hi is None or p < hi)

    pooled = {k: (s, layer, kept) for k, (s, layer, ps) in plan.pooled.items()
              if (kept := [p for p in ps if inside(int(p))])}
    return Plan(pooled=pooled, captures={k: v for k, v in plan.captures.items() if inside(v[1])},
                rows={k: v for k, v in plan.rows.items() if inside(k[1])},
                logprobs=[p for p in plan.logprobs if inside(p)], entropy=[p for p in plan.entropy if inside(p)],
                targets={p: t for p, t in plan.targets.items() if inside(p)}, cuts=list(plan.cuts))


def _union(parts: dict[int, Plan]) -> Plan:
    """One plan for the base forward: keys namespaced by branch index, rows keyed by (layer, query)."""
    out = Plan()
    for i, part in parts.items():
        out.pooled.update({(i, k): v for k, v in part.pooled.items()})
        out.captures.update({(i, k): v for k, v in part.captures.items()})
        out.rows.update({q: q for q in part.rows})
        out.logprobs += part.logprobs
        out.entropy += part.entropy
        out.targets.update(part.targets)
        out.cuts += part.cuts
    out.logprobs, out.entropy, out.cuts = sorted(set(out.logprobs)), sorted(set(out.entropy)), sorted(set(out.cuts))
    return out


def _take(out: Outputs, i: int, part: Plan) -> Outputs:
    """Branch ``i``'s share of a base forward's outputs, under its own keys."""
    mine = Outputs()
    for k in part.pooled:
        if (i, k) in out.sums:
            mine.sums[k], mine.counts[k] = out.sums[(i, k)], out.counts[(i, k)]
    mine.captures = {k: out.captures[(i, k)] for k in part.captures if (i, k) in out.captures}
    for (layer, q), k in part.rows.items():
        if (layer, q) in out.rows:
            mine.rows.setdefault(k, {})[layer] = out.rows[(layer, q)][layer]
    mine.logprobs = {p: out.logprobs[p] for p in part.logprobs if p in out.logprobs}
    mine.entropy = {p: out.entropy[p] for p in part.entropy if p in out.entropy}
    mine.target_logprob = {p: out.target_logprob[p] for p in part.targets if p in out.target_logprob}
    return mine


def _add(out: Outputs, earlier: Outputs) -> Outputs:
    """``out`` with the outputs of an ``earlier`` forward over other positions added (sums: ``out + earlier``)."""
    for k, v in earlier.sums.items():
        out.sums[k] = out.sums[k] + v if k in out.sums else v
        out.counts[k] = out.counts.get(k, 0) + earlier.counts[k]
    for k, layers in earlier.rows.items():
        out.rows.setdefault(k, {}).update(layers)
    for name in ("captures", "logprobs", "entropy", "target_logprob"):
        getattr(out, name).update(getattr(earlier, name))
    return out


@dataclass
class _Group:
    """Departing branches that ride on one suffix forward: the longest (``lead``) and the prefixes of it."""

    start: int
    lead: int
    members: list[int]


def _groups(branches: list[Branch], deps: list[int], rest: list[int]) -> list[_Group]:
    groups = []
    while rest:
        lead = max(rest, key=lambda i: len(branches[i].tokens))
        lt = branches[lead].tokens
        members = [lead] + [i for i in rest if i != lead and
                            departure(branches[i].tokens, lt, branches[i].plan) == len(branches[i].tokens)]
        groups.append(_Group(min(deps[i] for i in members), lead, members))
        rest = [i for i in rest if i not in members]
    return sorted(groups, key=lambda g: g.start)


def run_branches(sensor: ForwardSensor, branches: Iterable[Branch], base: Sequence[int] | None = None, *,
                 share: bool = True, hold: bool = False, start: Snapshot | None = None,
                 batch_bytes: int = 0, nest: bool = False) -> Iterator[BranchOutput]:
    """Each branch's outputs, the shared base run once (module docstring); ``share=False``: one forward each.

    ``base`` defaults to the longest branch; ``start`` continues the base from
    a snapshot (every branch then shares its first ``start.length`` tokens).
    ``batch_bytes`` > 0: suffixes that leave at one point run as padded batches
    within that working-memory budget (module docstring, batches); 0: one
    forward per suffix. ``nest``: such suffixes first ride on one another's
    forward where they share ``NEST_MIN`` tokens or more (module docstring).
    """
    branches = list(branches)
    if len({b.key for b in branches}) != len(branches):
        raise ValueError("run_branches: branch keys must be distinct")
    if not share:
        for b in branches:
            plan = replace(b.plan, snapshots=[len(b.tokens)] if b.keep_cache else [])
            out = run_plan(sensor, b.tokens, plan)
            yield BranchOutput(b.key, out, 0, False, out.snapshots.pop(len(b.tokens), None))
        return
    if branches:
        budget = batch_bytes if batch_bytes > 0 and batch_supported(sensor) else 0
        yield from _run(sensor, branches, list(base if base is not None else
                                               max(branches, key=lambda b: len(b.tokens)).tokens), hold, start,
                        budget, NEST_MIN if nest else 0)


def _run(sensor: ForwardSensor, branches: list[Branch], base: list[int], hold: bool,
         start: Snapshot | None, budget: int = 0, nest: int = 0) -> Iterator[BranchOutput]:
    offset = start.length if start is not None else 0
    deps = [departure(b.tokens, base, b.plan) for b in branches]
    if any(d < offset for d in deps):
        raise ValueError(f"run_branches: a branch leaves the base before the start snapshot ({offset} tokens)")
    served = [i for i, b in enumerate(branches) if deps[i] == len(b.tokens)]
    groups = _groups(branches, deps, [i for i in range(len(branches)) if i not in served])
    parts = {i: branches[i].plan for i in served}
    parts.update({i: _part(branches[i].plan, 0, g.start) for g in groups for i in g.members})
    plan = _union(parts)
    points = sorted({g.start for g in groups if g.start > offset} |
                    {len(branches[i].tokens) for i in served if branches[i].keep_cache and len(branches[i].tokens) > offset})
    end = max([len(branches[i].tokens) for i in served] + points + [offset])

    def done(i: int, out: Outputs, cache: Snapshot | None) -> BranchOutput:
        b = branches[i]
        return BranchOutput(b.key, _take(out, i, parts[i]), len(b.tokens), True, cache if b.keep_cache else None)

    def snap_at(p: int, snaps: dict[int, Snapshot]) -> Snapshot | None:
        return start if p == offset else snaps.get(p)

    if hold:
        out = run_plan(sensor, base[offset:end], replace(plan, snapshots=points), start=start) if end > offset \
            else Outputs()
        for i in served:
            yield done(i, out, snap_at(len(branches[i].tokens), out.snapshots))
        for p in sorted({g.start for g in groups}):  # a snapshot is dropped after the groups leaving there
            yield from _leave(sensor, branches, [g for g in groups if g.start == p], snap_at(p, out.snapshots), out,
                              parts, budget, nest)
            out.snapshots.pop(p, None)
        return
    acc, snap, pos = Outputs(), start, offset
    pending = sorted(served, key=lambda i: len(branches[i].tokens))
    while pending and len(branches[pending[0]].tokens) <= offset:  # served by the start snapshot itself
        yield done(pending.pop(0), acc, start)
    yield from _leave(sensor, branches, [g for g in groups if g.start == offset], start, acc, parts, budget, nest)
    for p in sorted(set(points) | ({end} if end > offset else set())):
        run_plan(sensor, base[pos:p], replace(plan, snapshots=[p] if p in points else []), start=snap, out=acc)
        snap, pos = acc.snapshots.pop(p, None), p
        while pending and len(branches[pending[0]].tokens) <= p:
            yield done(pending.pop(0), acc, snap)
        yield from _leave(sensor, branches, [g for g in groups if g.start == p], snap, acc, parts, budget, nest)


def _batchable(b: Branch, start: int) -> bool:
    """Whether a lone departing branch can ride in a padded batch (it keeps only log-probs, entropies, targets)."""
    plan = _part(b.plan, start, None)
    return not (b.keep_cache or plan.pooled or plan.captures or plan.rows
                or any(start < c < len(b.tokens) for c in plan.cuts))


def _batches(sensor: ForwardSensor, branches: list[Branch], rows: list[int], start: int,
             budget: int) -> list[list[int]]:
    """``rows`` (branch indices) by suffix length, cut into consecutive batches whose padded working memory
    (rows x ``batch_row_bytes`` of the longest) stays within ``budget``; a batch holds at least one row."""
    out: list[list[int]] = []
    for i in sorted(rows, key=lambda i: len(branches[i].tokens)):
        n = len(branches[i].tokens) - start  # the longest so far: rows are sorted
        if out and (len(out[-1]) + 1) * batch_row_bytes(sensor, start, n) <= budget:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _nest(branches: list[Branch], rows: list[int], start: int, least: int) -> tuple[int, list[int]]:
    """The row that most others share ``least`` tokens or more with past ``start`` (by the tokens they share),
    and those others; ``(-1, [])`` when no two rows share that much."""
    tokens = {i: np.asarray(branches[i].tokens) for i in rows}
    best, chosen, saved = -1, [], 0
    for i in rows:
        shared = {j: lcp(tokens[i], tokens[j]) - start for j in rows if j != i}
        members = [j for j in rows if j != i and shared[j] >= least and len(branches[j].tokens) > start + shared[j]]
        if sum(shared[j] for j in members) > saved:
            best, chosen, saved = i, members, sum(shared[j] for j in members)
    return best, chosen


def _leave(sensor: ForwardSensor, branches: list[Branch], groups: list[_Group], snap: Snapshot | None,
           base_out: Outputs, parts: dict[int, Plan], budget: int, nest: int = 0) -> Iterator[BranchOutput]:
    """The groups leaving the base at one point (``snap``). Lone branches that keep only log-probs, entropies and
    targets: with ``nest`` > 0, those sharing ``nest`` tokens or more past the point with another ride on its
    forward (a group of :func:`_depart`, nested again inside), the rest in padded batches within ``budget``
    bytes (one forward each when 0); every other group by :func:`_depart`."""
    lone = [g.lead for g in groups
            if (budget or nest) and len(g.members) == 1 and _batchable(branches[g.lead], g.start)]
    for g in groups:
        if g.lead not in lone:
            yield from _depart(sensor, branches, g, snap, base_out, parts, budget, nest)
    if not lone:
        return
    start = groups[0].start
    while nest and len(lone) > 1:
        lead, members = _nest(branches, lone, start, nest)
        if not members:
            break
        yield from _depart(sensor, branches, _Group(start, lead, [lead, *members]), snap, base_out, parts, budget,
                           nest)
        lone = [i for i in lone if i != lead and i not in members]
    for rows in _batches(sensor, branches, lone, start, budget):
        plans = [_part(branches[i].plan, start, None) for i in rows]
        outs = run_batch(sensor, [list(branches[i].tokens[start:]) for i in rows], plans, start=snap) \
            if len(rows) > 1 else [run_plan(sensor, list(branches[rows[0]].tokens[start:]), plans[0], start=snap)]
        for i, out in zip(rows, outs):
            yield BranchOutput(branches[i].key, _add(out, _take(base_out, i, parts[i])), start, False)


def _depart(sensor: ForwardSensor, branches: list[Branch], g: _Group, snap: Snapshot | None, base_out: Outputs,
            parts: dict[int, Plan], budget: int = 0, nest: int = 0) -> Iterator[BranchOutput]:
    """The branches of group ``g`` from ``snap`` (the base's cache at ``g.start``; None at 0), base parts added."""
    if len(g.members) == 1:
        b = branches[g.lead]
        n = len(b.tokens)
        plan = replace(_part(b.plan, g.start, None), snapshots=[n] if b.keep_cache else [])
        out = run_plan(sensor, b.tokens[g.start:], plan, start=snap)
        yield BranchOutput(b.key, _add(out, _take(base_out, g.lead, parts[g.lead])), g.start, False,
                           out.snapshots.pop(n, None))
        return
    subs = [Branch(i, branches[i].tokens, _part(branches[i].plan, g.start, None), branches[i].keep_cache)
            for i in g.members]
    for res in _run(sensor, subs, list(branches[g.lead].tokens), False, snap, budget, nest):
        i = cast(int, res.key)  # the keys of ``subs`` are indices into ``branches``
        yield BranchOutput(branches[i].key, _add(res.outputs, _take(base_out, i, parts[i])), g.start, False,
                           res.cache)


@dataclass
class Resume:
    """Successive sequences of one context (e.g. one trajectory's ICLR inputs): each continues the last.

    :meth:`run` continues ``ids`` from the previous sequence (same
    ``context``) at :func:`departure` (with ``merge=False``: every request is
    computed in this forward). A model whose cache is plain attention KV
    (:func:`~interp.sensor.forward.croppable`) keeps only the previous
    sequence's final cache and continues from it cut to the departure point
    (``crop_snapshot``: views, no copy), whatever that point is; any other
    model (Gated-DeltaNet states cannot be cut back) continues from the latest
    snapshot at or before it, taken at ``marks`` of the previous sequence (and
    the one it started from). One context's cache is held at a time.
    ``tokens_run`` counts the tokens forwarded; ``cut=False`` uses snapshots
    only, whatever the cache (the rule before #40, kept for
    ``benchmarks/bench_iclr.py``'s comparison).
    """

    sensor: ForwardSensor
    cut: bool = True
    context: Hashable = None
    tokens: list[int] = field(default_factory=list)
    snapshots: dict[int, Snapshot] = field(default_factory=dict)
    tokens_run: int = 0

    def run(self, ids: Sequence[int], plan: Plan, marks: Iterable[int] = (), context: Hashable = None) -> Outputs:
        """Outputs of ``plan`` over ``ids``, reusing the previous sequence's cache (class docstring)."""
        prev = self.snapshots if context == self.context else {}
        shared = departure(ids, self.tokens, plan, merge=False) if prev else 0
        last = prev.get(len(self.tokens))
        crop = self.cut and croppable(new_cache(self.sensor))
        if crop and last is not None and shared > 0:
            start: Snapshot | None = crop_snapshot(last, shared)
        else:
            usable = [p for p in prev if p <= shared]
            start = prev[max(usable)] if usable else None
        offset = start.length if start is not None else 0
        keep = sorted(p for p in ({len(ids)} if crop else set(marks)) if offset < p <= len(ids))
        out = run_plan(self.sensor, list(ids[offset:]), replace(plan, snapshots=keep), start=start)
        self.tokens_run += len(ids) - offset
        kept = {offset: start} if start is not None and not crop else {}  # still a prefix of ids; the rest replaced
        self.context, self.tokens, self.snapshots = context, list(ids), {**kept, **out.snapshots}
        out.snapshots = {}
        return out
