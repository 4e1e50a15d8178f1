"""Activation patching between two runs: ``patch(sensor, source, target, sites, positions, metric)``.

The source run (e.g. the full history) supplies activations at ``sites`` (any
TransformerLens name the fast path serves, ``interp.sensor.hooks``) at its last
``positions`` tokens; each site (or group of sites, given as a list) becomes
one patched variant of the target run (e.g. a deletion), whose last
``positions`` tokens get those activations. ``metric(logits)`` is then read
on float32 logits ``[vocab]`` at the target's last token: a logit difference
is ``lambda lg: lg[a] - lg[b]``. The tails are aligned from the end, as in
KL Repair (both renders end in the same generation prompt).

Shared-prefix fast path (``interp.sensor.kernels.variants``): patching the
last k tokens cannot change any earlier position, so the target's first
n - k tokens are run once and all variants continue from that cache as one
batch of k tokens each. When source and target share a prefix of m tokens,
the target's prefix run starts from the source run's cache snapshot at m (a
latest-step deletion then costs only the tokens after the deleted block):
about one forward of the source, the target's tokens after the shared prefix,
and k tokens per variant. The unpatched target is variant 0 of the same
computation, so a site that changes nothing gives exactly ``target``.
KL Repair (``patching.kl_repair``) scores its variants with
:func:`patched_logits` (metric: KL from the full run's distribution).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from interp.extraction.extract import lcp
from interp.sensor.api import token_ids
from interp.sensor.forward import Plan, Snapshot, run_plan
from interp.sensor.hooks import hooks
from interp.sensor.kernels.variants import run_variants

Metric = Callable[[torch.Tensor], "float | torch.Tensor"]


@dataclass
class PatchResult:
    """What :func:`patch` measured: the metric on the source, the unpatched target and each patched variant."""

    sites: list[str]  # one label per variant: its names joined by "+"
    source: float
    target: float
    patched: list[float]
    logits: torch.Tensor  # float32 [2 + n_variants, vocab]: source, target, then each variant (last token)


def patched_logits(sensor: Any, prefix: Snapshot, tail_ids: list[int],
                   patches: list[dict[str, torch.Tensor]]) -> torch.Tensor:
    """Float32 logits ``[S, vocab]`` at the last tail token of S variants that continue ``prefix`` (one batch)."""
    return run_variants(sensor, prefix.cache, prefix.length, tail_ids, patches, log_probs=False)


def _groups(sites: Sequence[str | Sequence[str]]) -> list[list[str]]:
    groups = [[s] if isinstance(s, str) else list(s) for s in sites]
    if not groups or any(not g for g in groups):
        raise ValueError("sites: give at least one hook name (or a non-empty list of names patched together)")
    return groups


def patch(sensor: Any, source: Any, target: Any, sites: Sequence[str | Sequence[str]], positions: int = 1,
          metric: Metric | None = None) -> PatchResult:
    """Patch ``sites`` of the source run into the target run's last ``positions`` tokens; ``metric`` on each (module doc).

    ``source``/``target``: token lists, tensors, ``Rendered`` or strings.
    ``metric`` defaults to the log-probability of the source's top token.
    """
    src = token_ids(sensor, source)[0].tolist()
    tgt = token_ids(sensor, target)[0].tolist()
    k = int(positions)
    if not (1 <= k <= len(src) and k < len(tgt)):
        raise ValueError(f"positions: {k} tail tokens do not fit (source {len(src)}, target {len(tgt)} tokens; "
                         "the target needs at least one token before its tail)")
    groups = _groups(sites)
    names = sorted({n for g in groups for n in g})
    start = len(tgt) - k
    shared = min(lcp(src, tgt), start, len(src) - k)
    acts: dict[str, torch.Tensor] = {}

    def take(x: torch.Tensor, name: str) -> None:  # the last call is the source's last chunk, which holds its tail
        acts[name] = x[0, -k:].clone()

    with hooks(sensor.hf_model, [(n, take) for n in [*names, "ln_final.hook_out"]]):
        src_run = run_plan(sensor, src, Plan(snapshots=[shared] if shared else []))
    with torch.inference_mode():
        src_logits = sensor.hf_model.get_output_embeddings()(acts.pop("ln_final.hook_out")[-1])
    begin = src_run.snapshots.get(shared)
    if begin is not None and shared == start:
        prefix = begin
    else:
        prefix = run_plan(sensor, tgt[shared:start] if begin is not None else tgt[:start], Plan(snapshots=[start]),
                          start=begin).snapshots[start]
    variants = patched_logits(sensor, prefix, tgt[start:], [{}] + [{n: acts[n] for n in g} for g in groups])
    logits = torch.cat([src_logits.to(variants.dtype)[None], variants])
    if metric is None:
        top = int(src_logits.argmax())

        def metric(lg: torch.Tensor) -> torch.Tensor:
            return torch.log_softmax(lg, dim=-1)[top]
    values = [float(metric(row)) for row in logits]
    return PatchResult(["+".join(g) for g in groups], values[0], values[1], values[2:], logits.cpu())
