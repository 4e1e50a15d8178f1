"""Activation patching between two runs: ``patch(sensor, source, target, sites, positions, metric)``.

The source run (e.g. the full history) supplies activations at ``sites`` (any
TransformerLens name the fast path serves, ``interp.sensor.hooks``) at its last
``positions`` tokens; each site (or group of sites, given as a list) becomes
one patched variant of the target run (e.g. a deletion), whose last
``positions`` tokens get those activations. ``metric(logits)`` is then read
on float32 logits ``[vocab]`` at the target's last token: a logit difference
is ``lambda lg: lg[a] - lg[b]``. The tails are aligned from the end, as in
KL Repair (both renders end in the same generation prompt).

One generic function, :func:`patch_pairs`, runs any number of (source,
target) pairs, in the style of TransformerLens's ``patching.py`` (a generic
patch, named uses on top): :func:`patch` is one pair with a metric, KL Repair
(``patching.kl_repair``) is every boundary of a trajectory with the KL from
the source's distribution as its metric, and an empty list of sites (only the
unpatched variant) is a plain two-run comparison.

Shared-prefix fast path. All sources and, for each target, its tokens before
the tail are branches of one prefix-scheduler run (``interp.sensor.prefix``;
base: the longest source): a target that shares m tokens with the sources
continues from the source run's cache snapshot at m (a latest-step deletion
then costs only the tokens after the deleted block), and targets that are
prefixes of each other share one forward. Patching the last k tokens cannot
change any earlier position, so each target's variants continue from its
cache before the tail as one batch of k tokens each
(``interp.sensor.kernels.variants``): about one forward of the sources, the
targets' tokens after the shared prefix, and k tokens per variant. The
unpatched target is variant 0 of the same computation, so a site that changes
nothing gives exactly ``target``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch

from interp.sensor.api import Tokens, token_batch
from interp.sensor.forward import Plan, Snapshot
from interp.sensor.kernels.variants import run_variants
from interp.sensor.prefix import Branch, run_branches
from interp.sensor.protocol import Sensor
from interp.sensor.unembed import logits as unembed_logits

Metric = Callable[[torch.Tensor], "float | torch.Tensor"]
FINAL = "ln_final.hook_out"  # the final norm's output: the source's own logits are its unembedding


@dataclass
class PatchResult:
    """What :func:`patch` measured: the metric on the source, the unpatched target and each patched variant."""

    sites: list[str]  # one label per variant: its names joined by "+"
    source: float
    target: float
    patched: list[float]
    logits: torch.Tensor  # float32 [2 + n_variants, vocab]: source, target, then each variant (last token)


@dataclass
class Pair:
    """One (source, target) pair of :func:`patch_pairs`; ``donor``: the run the activations come from, if not the source."""

    key: Hashable
    source: list[int]
    target: list[int]
    donor: list[int] | None = None


@dataclass
class PairRun:
    """One pair's runs, on the sensor's device: the source's last-token log-probs and final-norm output, the
    variants' float32 logits ``[1 + n_groups, vocab]`` (unpatched target first), where the target left the source run."""

    key: Hashable
    source_logprobs: torch.Tensor
    source_final: torch.Tensor
    variants: torch.Tensor
    departure: int


def patched_logits(sensor: Sensor, prefix: Snapshot, tail_ids: list[int],
                   patches: list[dict[str, torch.Tensor]]) -> torch.Tensor:
    """Float32 logits ``[S, vocab]`` at the last tail token of S variants that continue ``prefix`` (one batch)."""
    return run_variants(sensor, prefix.cache, prefix.length, tail_ids, patches, log_probs=False)


def _groups(sites: Sequence[str | Sequence[str]]) -> list[list[str]]:
    groups = [[s] if isinstance(s, str) else list(s) for s in sites]
    if not groups or any(not g for g in groups):
        raise ValueError("sites: give at least one hook name (or a non-empty list of names patched together)")
    return groups


def _source_branch(key: Hashable, ids: list[int], names: list[str], k: int, own: bool) -> Branch:
    """Captures of ``names`` at the last ``k`` tokens; ``own``: also the last token's log-probs and final norm."""
    plan = Plan(captures={(n, i): (n, len(ids) - k + i) for n in names for i in range(k)})
    if own:
        plan.logprobs = [len(ids) - 1]
        plan.captures[FINAL] = (FINAL, len(ids) - 1)
    return Branch(key, ids, plan)


def patch_pairs(sensor: Sensor, pairs: Sequence[Pair], groups: Sequence[Sequence[str]],
                positions: int = 1) -> Iterator[PairRun]:
    """The generic patch: for each pair, its source's distribution and its target's variants (module docstring).

    Variant 0 is the unpatched target; variant j patches ``groups[j - 1]``
    (TL hook names) at the last ``positions`` tokens with the source's (or the
    donor's) activations there. Pairs are yielded as their targets' caches are
    ready (one target cache held at a time).
    """
    k = int(positions)
    names = sorted({n for g in groups for n in g})
    acts: dict[Hashable, dict[tuple[str, int], torch.Tensor]] = {}
    donors = [_source_branch(p.key, p.donor, names, k, False) for p in pairs if p.donor is not None]
    for res in run_branches(sensor, donors, hold=True):
        acts[res.key] = res.outputs.captures
    branches = [_source_branch(("source", p.key), p.source, [] if p.donor is not None else names, k, True)
                for p in pairs]
    branches += [Branch(("target", p.key), p.target[:len(p.target) - k], keep_cache=True) for p in pairs]
    base = max((p.source for p in pairs), key=len) if pairs else None
    by_key = {p.key: p for p in pairs}
    sources: dict[Hashable, Any] = {}
    waiting: dict[Hashable, Any] = {}  # target caches whose source is not done yet (a source off the base)
    for res in run_branches(sensor, branches, base, hold=True):  # hold: the sources first, then the targets
        role, key = cast("tuple[str, Hashable]", res.key)  # the branches' keys are (role, pair key)
        if role == "source":
            sources[key] = res.outputs
            acts.setdefault(key, res.outputs.captures)
        else:
            waiting[key] = res
        for key in [key for key in waiting if key in sources]:
            yield _variants(sensor, by_key[key], waiting.pop(key), sources[key],
                            acts[key], groups, k)


def _variants(sensor: Sensor, pair: Pair, target: Any, source: Any, acts: dict[tuple[str, int], torch.Tensor],
              groups: Sequence[Sequence[str]], k: int) -> PairRun:
    patches = [{n: torch.stack([acts[(n, i)] for i in range(k)]) for n in g} for g in groups]
    variants = patched_logits(sensor, target.cache, pair.target[-k:], [{}] + patches)
    n = len(pair.source)
    return PairRun(pair.key, source.logprobs[n - 1], source.captures[FINAL], variants, target.departure)


def patch(sensor: Sensor, source: Tokens, target: Tokens, sites: Sequence[str | Sequence[str]], positions: int = 1,
          metric: Metric | None = None) -> PatchResult | list[PatchResult]:
    """Patch ``sites`` of the source run into the target run's last ``positions`` tokens; ``metric`` on each (module doc).

    ``source``/``target``: token lists, tensors, ``Rendered`` or strings, or a batch of rows of different lengths
    (what ``sensor.run_with_cache`` takes: lists of rows, ``[b, n]`` tensors with trailing pads); a batch gives one
    :class:`PatchResult` per row (one source row is used for every target row). All rows are pairs of one
    :func:`patch_pairs` run. ``metric`` defaults to the log-probability of each source's top token.
    """
    srcs, tgts = _rows(sensor, source), _rows(sensor, target)
    if len(srcs) == 1 and len(tgts) > 1:
        srcs = srcs * len(tgts)
    if len(srcs) != len(tgts):
        raise ValueError(f"source: {len(srcs)} rows for {len(tgts)} target rows (give as many, or one source)")
    k = int(positions)
    for i, (src, tgt) in enumerate(zip(srcs, tgts)):
        if not (1 <= k <= len(src) and k < len(tgt)):
            row = f" (row {i})" if len(tgts) > 1 else ""
            raise ValueError(f"positions: {k} tail tokens do not fit{row} (source {len(src)}, target {len(tgt)} "
                             "tokens; the target needs at least one token before its tail)")
    groups = _groups(sites)
    runs = {run.key: run for run in patch_pairs(sensor, [Pair(i, s, t) for i, (s, t) in enumerate(zip(srcs, tgts))],
                                                 groups, k)}
    results = [_result(sensor, runs[i], groups, metric) for i in range(len(tgts))]
    return results if len(tgts) > 1 else results[0]


def _rows(sensor: Sensor, tokens: Any) -> list[list[int]]:
    """Each row's real tokens (``interp.sensor.api.token_batch``: one sequence or a padded or ragged batch)."""
    ids, lengths = token_batch(sensor, tokens)
    return [ids[i, :n].tolist() for i, n in enumerate(lengths)]


def _result(sensor: Sensor, run: PairRun, groups: Sequence[Sequence[str]], metric: Metric | None) -> PatchResult:
    """One pair's :class:`PatchResult`: the metric on its source, its unpatched target and each variant."""
    with torch.inference_mode():
        src_logits = unembed_logits(sensor, run.source_final)
    logits = torch.cat([src_logits.to(run.variants.dtype)[None], run.variants])
    if metric is None:
        top = int(src_logits.argmax())

        def metric(lg: torch.Tensor) -> torch.Tensor:
            return torch.log_softmax(lg, dim=-1)[top]
    values = [float(metric(row)) for row in logits]
    return PatchResult(["+".join(g) for g in groups], values[0], values[1], values[2:], logits.cpu())
