"""KL Repair per layer: how much of the deletion's effect one layer's boundary residual restores.

For a boundary b of a trajectory:

- ``P_full``: next-token distribution at the boundary token, full history;
- ``P_del``: the same under a deletion condition (any history condition);
- ``P_patch,s``: the deleted run with the activation at site s (e.g. the
  residual stream entering layer l) at the boundary position(s) replaced by
  the full run's;
- ``d = KL(P_full || P_del)`` and ``Repair(s) = 1 - KL(P_full || P_patch,s) / d``
  for samples with ``d > min_kl`` (others are excluded, counted and listed);
  ``top1(s)`` = argmax P_patch,s == argmax P_full.

All log-softmax and KL arithmetic is float32 whatever the model dtype. The
patched tail is the last ``n_positions`` tokens (default 1, the boundary
token); both renders end in the same generation prompt, so tails align.

Two paths give the same numbers (parity-tested within 1e-4):

- ``reference``: one whole forward of the deleted render per site, with a
  replacing hook (prefix, then the tail with the model's own cache: see
  ``_patched_reference``);
- ``fast``: the full and deleted renders of all boundaries run once each
  (prefix-shared, chunked at the boundaries, cache snapshots taken there),
  then per boundary all sites run as one batch of variants over the shared
  prefix (``patching.variants``): about one forward per condition plus one
  boundary token per (boundary, site).

Sites are ``(site, layer)`` pairs; ``default_sites`` gives ``resid_pre`` of
every layer plus the final ``resid_post`` (Repair there is exactly 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import torch

from interp.conditions import apply_condition
from interp.extract import lcp
from interp.forward import Plan, logit_dtype, run_plan, snapshot_cache
from interp.hooks import hook_name, hooks, plain_attention
from interp.render import Rendered, render
from interp.trajectory import Trajectory
from patching.variants import run_variants

MIN_KL = 1e-6


def default_sites(n_layers: int, site: str = "resid_pre") -> list[tuple[str, int]]:
    """``site`` at every layer, plus the final ``resid_post`` when ``site`` is ``resid_pre``."""
    sites = [(site, layer) for layer in range(n_layers)]
    return sites + [("resid_post", n_layers - 1)] if site == "resid_pre" else sites


def kl(p_log: torch.Tensor, q_log: torch.Tensor) -> torch.Tensor:
    """KL(P || Q) in nats from log-probs (float32 at least; last dim = vocabulary)."""
    acc = torch.promote_types(torch.promote_types(p_log.dtype, q_log.dtype), torch.float32)
    p_log, q_log = p_log.to(acc), q_log.to(acc)
    return (p_log.exp() * (p_log - q_log)).sum(-1)


@dataclass
class BoundaryRepair:
    """Repair of one boundary: ``repair[i]`` and ``top1[i]`` for ``sites[i]``."""

    task_id: str
    after_step: int
    d: float
    repair: list[float] = field(default_factory=list)
    top1: list[bool] = field(default_factory=list)
    kl_patch: list[float] = field(default_factory=list)
    excluded: bool = False
    n_tokens_full: int = 0
    n_tokens_deleted: int = 0


def _renders(sensor: Any, traj: Trajectory, condition: str, boundaries: list[int], params: dict[str, Any],
             source: str) -> tuple[dict[int, Rendered], dict[int, Rendered]]:
    tok = sensor.tokenizer
    full = {b: render(traj, b, tok) for b in boundaries}
    deleted = {b: render(apply_condition(condition, traj, b, **params)[0], b, tok) for b in boundaries}
    for b in boundaries:
        _check_tail(full[b], deleted[b], 1)
    return full, deleted


def _check_tail(full: Rendered, deleted: Rendered, n: int) -> None:
    if full.input_ids[-n:] != deleted.input_ids[-n:]:
        raise ValueError(f"boundary {full.boundary}: the last {n} tokens differ between the full and deleted "
                         "renders; patching needs aligned tails (use n_positions within the generation prompt)")


def _source_plan(renders: dict[int, Rendered], sites: list[tuple[str, int]], n_pos: int) -> Plan:
    plan = Plan(logprobs=[r.n_tokens - 1 for r in renders.values()])
    for b, r in renders.items():
        for i in range(n_pos):
            pos = r.n_tokens - n_pos + i
            for site, layer in sites:
                plan.pooled[(b, site, layer, i)] = (site, layer, [pos])
    return plan


def _shared_runs(sensor: Any, renders: dict[int, Rendered], plan: Plan) -> dict[int, Any]:
    """Run the renders of all boundaries, one forward for those that are prefixes of the longest."""
    base = max(renders.values(), key=lambda r: r.n_tokens).input_ids
    shared = [b for b, r in renders.items() if lcp(r.input_ids, base) == r.n_tokens]
    end = max(renders[b].n_tokens for b in shared)
    sub = Plan(pooled={k: v for k, v in plan.pooled.items() if k[0] in shared},
               logprobs=[renders[b].n_tokens - 1 for b in shared])
    outputs = dict.fromkeys(shared, run_plan(sensor, base[:end], sub))
    for b in renders.keys() - set(shared):
        r = renders[b]
        mine = Plan(pooled={k: v for k, v in plan.pooled.items() if k[0] == b}, logprobs=[r.n_tokens - 1])
        outputs[b] = run_plan(sensor, r.input_ids, mine)
    return outputs


def kl_repair_trajectory(
    sensor: Any,
    traj: Trajectory,
    condition: str,
    sites: list[tuple[str, int]],
    boundaries: list[int] | None = None,
    method: str = "fast",
    n_positions: int = 1,
    condition_params: dict[str, Any] | None = None,
    min_kl: float = MIN_KL,
    source: str = "full",
) -> list[BoundaryRepair]:
    """Repair of every site at every requested boundary of ``traj`` (see module docstring).

    ``source`` is the condition whose run supplies the patched activations and
    ``P_full`` (``full``; patching from the deleted run itself gives Repair 0).
    """
    if method not in ("fast", "reference"):
        raise ValueError(f"method must be 'fast' or 'reference', got {method!r}")
    boundaries = boundaries or list(range(1, traj.n_steps + 1))
    full, deleted = _renders(sensor, traj, condition, boundaries, condition_params or {}, source)
    for b in boundaries:
        _check_tail(full[b], deleted[b], n_positions)
    src = _shared_runs(sensor, full, _source_plan(full, sites, n_positions))
    if source != "full":  # activations from another condition's run; P_full stays the full run's
        donors = {b: render(apply_condition(source, traj, b, **(condition_params or {}))[0], b, sensor.tokenizer)
                  for b in boundaries}
        acts = _shared_runs(sensor, donors, _source_plan(donors, sites, n_positions))
    else:
        acts = src
    results = []
    if method == "fast":
        dels = _deleted_runs(sensor, deleted, n_positions)
    for b in boundaries:
        f, r = full[b], deleted[b]
        p_full = src[b].logprobs[f.n_tokens - 1]
        patches = [{hook_name(site, layer): torch.stack([acts[b].mean((b, site, layer, i)) for i in range(n_positions)])}
                   for site, layer in sites]
        # P_del is the unpatched variant of the same computation, so a site that changes
        # nothing (layer 0 at an identical token, a self-patch) gives Repair 0 exactly.
        if method == "fast":
            snap = dels[b]
            both = run_variants(sensor, snap.cache, snap.length, r.input_ids[-n_positions:], [{}] + patches)
        else:
            both = torch.stack([_patched_reference(sensor, r.input_ids, patch, n_positions) for patch in [{}] + patches])
        p_del, p_patch = both[0], both[1:]
        results.append(_score(traj.task_id, b, p_full, p_del, p_patch, min_kl, f.n_tokens, r.n_tokens))
    return results


def _deleted_runs(sensor: Any, deleted: dict[int, Rendered], n_pos: int) -> dict[int, Any]:
    """Snapshots before each boundary tail of the deleted renders (one shared forward where prefix-consistent)."""
    base_b = max(deleted, key=lambda b: deleted[b].n_tokens)
    base = deleted[base_b].input_ids
    shared = [b for b, r in deleted.items() if lcp(r.input_ids, base) == r.n_tokens]
    result = {}
    if shared:
        end = max(deleted[b].n_tokens - n_pos for b in shared)
        out = run_plan(sensor, base[:end], Plan(snapshots=[deleted[b].n_tokens - n_pos for b in shared]))
        for b in shared:
            result[b] = out.snapshots[deleted[b].n_tokens - n_pos]
    for b in deleted:
        if b in result:
            continue
        r = deleted[b]
        out = run_plan(sensor, r.input_ids[: r.n_tokens - n_pos], Plan(snapshots=[r.n_tokens - n_pos]))
        result[b] = out.snapshots[r.n_tokens - n_pos]
    return result


def _patched_reference(sensor: Any, ids: list[int], patch: dict[str, torch.Tensor], n_pos: int) -> torch.Tensor:
    """Slow reference: a whole forward of the deleted render for one site, with a replacing hook.

    The render runs as the prefix, then the patched tail with the model's own
    cache and sdpa attention, so Gated-DeltaNet's float32 kernels split the
    sequence exactly as the fast path does; everything else (no batching, no
    shared-prefix attention, no state expansion, one forward per site) is
    independent of it.
    """
    model = sensor.hf_model
    prefix = run_plan(sensor, ids[:-n_pos], Plan(snapshots=[len(ids) - n_pos])).snapshots[len(ids) - n_pos]

    def replace(x: torch.Tensor, name: str) -> torch.Tensor:
        x = x.clone()
        x[0, -n_pos:] = patch[name].to(x.device, x.dtype)
        return x

    tail = torch.tensor([ids[-n_pos:]], device=sensor.device)
    with torch.inference_mode(), plain_attention(model), hooks(model, [(n, replace) for n in patch]):
        hidden = model.model(input_ids=tail, cache=snapshot_cache(prefix.cache), use_cache=True).last_hidden_state
        return torch.log_softmax(model.lm_head(hidden[0, -1]).to(logit_dtype(hidden.dtype)), dim=-1)


def _score(task_id: str, b: int, p_full: torch.Tensor, p_del: torch.Tensor, p_patch: torch.Tensor,
           min_kl: float, n_full: int, n_del: int) -> BoundaryRepair:
    d = float(kl(p_full, p_del))
    kls = kl(p_full.unsqueeze(0), p_patch)
    top = (p_patch.argmax(-1) == p_full.argmax()).tolist()
    out = BoundaryRepair(task_id, b, d, kl_patch=kls.tolist(), top1=top, n_tokens_full=n_full, n_tokens_deleted=n_del)
    if d <= min_kl:
        out.excluded = True
        out.repair = [float("nan")] * len(top)
    else:
        out.repair = (1.0 - kls / d).tolist()
    return out


def task_bootstrap_ci(values: np.ndarray, groups: np.ndarray, n_boot: int = 1000, seed: int = 0,
                      level: float = 0.95) -> np.ndarray:
    """Per-column 95% CI of the mean by resampling tasks with replacement; ``values`` [n_samples, n_sites]."""
    rng = np.random.default_rng(seed)
    tasks = np.unique(groups)
    index = {t: np.flatnonzero(groups == t) for t in tasks}
    means = []
    for _ in range(n_boot):
        pick = np.concatenate([index[t] for t in rng.choice(tasks, size=len(tasks), replace=True)])
        means.append(np.nanmean(values[pick], axis=0))
    lo, hi = np.nanpercentile(np.array(means), [(1 - level) / 2 * 100, (1 + level) / 2 * 100], axis=0)
    return np.stack([lo, hi], axis=-1)


def summarize(rows: list[BoundaryRepair], sites: list[tuple[str, int]], condition: str, sensor: Any,
              method: str, n_positions: int, n_boot: int = 1000) -> dict[str, Any]:
    """The ``kl_repair.json`` document (schema in the ``schema`` field)."""
    kept = [r for r in rows if not r.excluded]
    values = np.array([r.repair for r in kept], dtype=float).reshape(len(kept), len(sites))
    top1 = np.array([r.top1 for r in kept], dtype=float).reshape(len(kept), len(sites))
    groups = np.array([r.task_id for r in kept])
    ci = task_bootstrap_ci(values, groups, n_boot) if kept else np.full((len(sites), 2), np.nan)
    return {
        "schema": {
            "layers": "layer index of each site", "site": "site name per entry of `sites`",
            "repair_mean": "mean over kept samples of 1 - KL(P_full||P_patch)/KL(P_full||P_del) (unitless)",
            "repair_ci": "95% task-level bootstrap CI [lo, hi] per site",
            "top1_mean": "fraction of kept samples whose patched argmax equals the full-history argmax",
            "per_sample.d": "KL(P_full||P_del) in nats (float32)", "n_excluded": f"samples with d <= {MIN_KL}",
        },
        "condition": condition, "model": sensor.describe(), "method": method, "n_positions": n_positions,
        "sites": [f"{s}.{layer}" for s, layer in sites], "site": sorted({s for s, _ in sites}),
        "layers": [layer for _, layer in sites],
        "full_attention_layers": sensor.full_attention_layers,
        "repair_mean": np.nanmean(values, axis=0).tolist() if kept else [],
        "repair_ci": ci.tolist(), "top1_mean": top1.mean(axis=0).tolist() if kept else [],
        "n_samples": len(kept), "n_excluded": len(rows) - len(kept),
        "excluded": [f"{r.task_id}@{r.after_step}" for r in rows if r.excluded],
        "per_sample": [{"task_id": r.task_id, "after_step": r.after_step, "d": r.d, "repair": r.repair,
                        "top1": r.top1, "n_tokens_full": r.n_tokens_full, "n_tokens_deleted": r.n_tokens_deleted,
                        "excluded": r.excluded} for r in rows],
    }


kl_repair_reference = partial(kl_repair_trajectory, method="reference")
