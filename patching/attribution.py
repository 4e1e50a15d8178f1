"""Attribution maps: the first-order (linear) estimate of KL Repair and of DRSR deletion harm, checked against exact.

**KL Repair, every site at once.** Exact KL Repair (``patching.kl_repair``) costs one patched forward per site.
Attribution patching estimates all of them from one forward of the full render and one forward plus one backward
of the deleted render. Let ``a_s`` be the deleted run's activation at site s = (hook, position) and ``a*_s`` the
full run's at the aligned position; the patched run at strength ``alpha`` writes ``a_s + alpha (a*_s - a_s)``, so
``alpha = 0`` is the deleted run and ``alpha = 1`` is the exact patch of s alone. With
``KL(alpha) = KL(P_full || P_patch(alpha))``::

    effect(s)       = dKL/dalpha_s at alpha = 0 = grad_{a_s} KL(P_full || P_del) . (a*_s - a_s)   [nats]
    KL_patch(s)    ~= d + effect(s),   Repair(s) ~= -effect(s) / d,   d = KL(P_full || P_del)

The alphas of every (hook, position) are leaves of one backward (each hook adds ``alpha x (a* - a)`` with the
difference detached), so a single backward gives every site's effect; a set of sites (KL Repair's tail of
``positions`` boundary tokens) is first order additive, the sum of its members' effects. Positions are aligned by
the longest matching token blocks of the two renders (:func:`align`, ``difflib``): a deleted-render token with no
counterpart in the full render (an edit marker such as ``[SKIP]``) gets no site. The exact patch of any site is the
same forward with that site's alpha set to 1 and no backward (:func:`exact_effects`): the oracle on sampled history
positions; at the boundary tail the oracle is ``patching.kl_repair``'s own fast path, an independent implementation.

**DRSR harm, every unit at once.** ``harm(A) = NLL(y | H minus A) - NLL(y | H)`` (``patching.harm``). Deleting a
unit removes its tokens; relaxed, each history token k gets a gate ``g_k`` on its attention weight (the softmax's
unnormalized weight of key k is multiplied by ``g_k`` at every softmax-attention layer and head; ``g = 1`` is the
full run, ``g_k = 0`` for k in A removes A from every later token's view). To first order in g::

    harm_lin(A) = -sum over k in tokens(A) of dNLL/dg_k at g = 1                              [nats/token]

one forward and one backward of the teacher-forced full render for every unit and set (first order is additive:
a set's estimate is the sum over its tokens, so non-compositionality, DRSR's point, is exactly what it cannot
see). ``tokens(A)`` are the full-render positions missing from the render of ``H minus A`` (:func:`align`, glue
included). The relaxation's endpoint is not the deletion itself: under deletion the later tokens also move
closer to the earlier ones (rotary positions shift by the removed length) and the removed tokens' own states
vanish rather than being masked. So the estimate has two errors, the curvature in g and the position shift; a
model without position dependence (rotary base -> infinity) has only the first
(``tests/patching/test_attribution.py``). Gated-DeltaNet layers have no softmax weight to gate: models with them
are refused (:func:`linear_harms` says so).

Memory: the full run's activations at every patched hook and position are held (``n_hooks x n_tokens x d_model``
in the model's dtype), and the backward runs with each decoder layer checkpointed (:func:`checkpointed`: only the
layers' inputs are kept, each layer is recomputed in the backward), so a long history fits where a plain backward
would hold every layer's attention and MLP intermediates.

Fields of ``attribution.json`` (``FIELDS``; :func:`summarize` writes them):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``condition`` | ``[]`` | str | - | history condition of the deleted run (P_del) |
| ``model`` | ``{...}`` | object | - | the sensor's describe(): spec, revision, n_layers, layer_types, ... |
| ``method`` | ``[]`` | str | - | attribution (first order) beside its oracle: exact KL Repair (patching.kl_repair, fast path) and exact harm (patching.harm) |
| ``n_positions`` | ``[]`` | int | tokens | patched boundary tail (1 = the boundary token), as KL Repair's |
| ``sites`` | ``[n_sites]`` | str | - | patched hook kinds as site.layer, e.g. resid_pre.12 (each at every aligned history position) |
| ``layers`` | ``[n_sites]`` | int | layer index | layer of each site |
| ``agreement`` | ``{tail, history, harm}`` | object | spearman: unitless; mae: nats or nats/token | pooled agreement of the estimate with the exact value over every boundary: {n, spearman, mae, max_abs_error} (spearman null with fewer than 3 pairs or a constant side); tail = boundary-tail KL change per site vs exact KL Repair's, history = sampled history sites vs their exact patch, harm = first-order vs exact singleton harm |
| ``per_boundary_spearman`` | ``{tail, history, harm}`` | object | unitless | median over boundaries of the per-boundary Spearman (null when no boundary has one) |
| ``forwards`` | ``{attribution, exact}`` | object | forward passes per boundary | mean over run boundaries: attribution = the forwards of the KL map (full, deleted, and the deleted run recomputed by the checkpointed backward: 3; one backward besides) plus 2 of harm (teacher-forced full render and its recomputation; one backward) where harm ran; exact = what the exact method needs for the same map: 2 unpatched runs + one patched forward per site (hooks x aligned positions) + one per singleton unit |
| ``boundaries`` | ``[n_boundaries] of {task_id, after_step, d, n_tokens_full, n_tokens_deleted, n_aligned, repair_linear, repair_exact, kl_change_linear, kl_change_exact, units, history, harm, agreement}`` | object | d, kl_change_*: nats; repair_*: unitless | per boundary: d = KL(P_full ‖ P_del) of the backward's run; per site the tail's first-order KL change (sum of the tail positions' effects) and Repair = -change / d, beside exact KL Repair's (kl_patch - d and its repair; null when kl_repair excluded the boundary); units = [{kind, step, block, start, end, effect: [n_sites]}] the effect summed over each segment of the deleted render (nats); history = [{site, position, estimate, exact}] sampled history sites patched exactly (nats); harm = {nll_full, units: [{members, tokens, harm_linear, harm_exact}]} or {reason} when not run; agreement = {tail, history, harm} as above for this boundary |
| ``skipped`` | ``[n_skipped] of {task_id, after_step, n_tokens, reason}`` | object | n_tokens: tokens | boundaries not run (a render over max_tokens or the model's positions) |
| ``maps`` | ``[]`` | str | - | the file holding the per-position maps (MAP_FIELDS): attribution_maps.safetensors |
| ``config`` | ``{...}`` | object | - | the frozen config of the analysis that made this file: dataclasses.asdict, tuples as lists (interp.record.config_from builds it back) |
| ``provenance`` | ``{...}`` | object | - | what ran (interp.record): model, revision, dtype (resolved), device, seeds, package, version, inputs (name -> sha256) |

Tensors of ``attribution_maps.safetensors`` (``MAP_FIELDS``), one pair per boundary ``{task_id}@{b}``:

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``{key}.effect`` | ``[n_sites, n_tokens_deleted]`` | float32 | nats | first-order change of KL(P_full ‖ P) when the site's activation at that deleted-render position is set to the full run's; 0 where the position has no counterpart |
| ``{key}.aligned`` | ``[n_tokens_deleted]`` | int64 | token index | the full-render position of each deleted-render token, -1 where none |
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.stats import spearmanr
from torch.utils.checkpoint import checkpoint

from interp.data.deletions import Unit
from interp.data.render import Rendered
from interp.data.trajectory import Trajectory
from interp.record import RECORD_FIELDS
from interp.schema import Field, schema_dict
from interp.sensor.hooks import attention_implementation, decoder_layers, hooks, plain_attention
from interp.sensor.protocol import Sensor
from interp.sensor.unembed import float_final_norm, log_probs
from patching.config import NoiseRule
from patching.harm import _target, candidate_sets, set_harms
from patching.kl_repair import boundary_renders, kl, kl_repair_trajectory

FINAL = "ln_final.hook_out"
GATE_ATTENTION = "interp_key_gate"  # the attention implementation registered while the harm gate runs
N_DISAGREE = 5  # sites listed where estimate and exact disagree most, per agreement

FIELDS = (
    Field("schema", "{...}", "object", "-", "this table: {field: {shape, dtype, units, doc}}"),
    Field("condition", "[]", "str", "-", "history condition of the deleted run (P_del)"),
    Field("model", "{...}", "object", "-", "the sensor's describe(): spec, revision, n_layers, layer_types, ..."),
    Field("method", "[]", "str", "-", "attribution (first order) beside its oracle: exact KL Repair "
          "(patching.kl_repair, fast path) and exact harm (patching.harm)"),
    Field("n_positions", "[]", "int", "tokens", "patched boundary tail (1 = the boundary token), as KL Repair's"),
    Field("sites", "[n_sites]", "str", "-", "patched hook kinds as site.layer, e.g. resid_pre.12 (each at every "
          "aligned history position)"),
    Field("layers", "[n_sites]", "int", "layer index", "layer of each site"),
    Field("agreement", "{tail, history, harm}", "object", "spearman: unitless; mae: nats or nats/token",
          "pooled agreement of the estimate with the exact value over every boundary: {n, spearman, mae, "
          "max_abs_error} (spearman null with fewer than 3 pairs or a constant side); tail = boundary-tail KL "
          "change per site vs exact KL Repair's, history = sampled history sites vs their exact patch, harm = "
          "first-order vs exact singleton harm"),
    Field("per_boundary_spearman", "{tail, history, harm}", "object", "unitless",
          "median over boundaries of the per-boundary Spearman (null when no boundary has one)"),
    Field("forwards", "{attribution, exact}", "object", "forward passes per boundary",
          "mean over run boundaries: attribution = the forwards of the KL map (full, deleted, and the deleted run "
          "recomputed by the checkpointed backward: 3; one backward besides) plus 2 of harm (teacher-forced full "
          "render and its recomputation; one backward) where harm ran; exact = what the exact method needs for the "
          "same map: 2 unpatched runs + one patched forward per site (hooks x aligned positions) + one per singleton "
          "unit"),
    Field("boundaries", "[n_boundaries] of {task_id, after_step, d, n_tokens_full, n_tokens_deleted, n_aligned, "
          "repair_linear, repair_exact, kl_change_linear, kl_change_exact, units, history, harm, agreement}",
          "object", "d, kl_change_*: nats; repair_*: unitless",
          "per boundary: d = KL(P_full ‖ P_del) of the backward's run; per site the tail's first-order KL change "
          "(sum of the tail positions' effects) and Repair = -change / d, beside exact KL Repair's (kl_patch - d "
          "and its repair; null when kl_repair excluded the boundary); units = [{kind, step, block, start, end, "
          "effect: [n_sites]}] the effect summed over each segment of the deleted render (nats); history = "
          "[{site, position, estimate, exact}] sampled history sites patched exactly (nats); harm = {nll_full, "
          "units: [{members, tokens, harm_linear, harm_exact}]} or {reason} when not run; agreement = {tail, "
          "history, harm} as above for this boundary"),
    Field("skipped", "[n_skipped] of {task_id, after_step, n_tokens, reason}", "object", "n_tokens: tokens",
          "boundaries not run (a render over max_tokens or the model's positions)"),
    Field("maps", "[]", "str", "-", "the file holding the per-position maps (MAP_FIELDS): "
          "attribution_maps.safetensors"),
    *RECORD_FIELDS,
)
MAP_FIELDS = (
    Field("{key}.effect", "[n_sites, n_tokens_deleted]", "float32", "nats",
          "first-order change of KL(P_full ‖ P) when the site's activation at that deleted-render position is set "
          "to the full run's; 0 where the position has no counterpart"),
    Field("{key}.aligned", "[n_tokens_deleted]", "int64", "token index",
          "the full-render position of each deleted-render token, -1 where none"),
)
MAPS_FILE = "attribution_maps.safetensors"


def align(full_ids: Sequence[int], deleted_ids: Sequence[int]) -> np.ndarray:
    """The full-render position of each deleted-render token (int64 ``[len(deleted_ids)]``, -1 where none), from the
    longest matching token blocks of the two renders (a deletion leaves the rest of the history in order)."""
    out = np.full(len(deleted_ids), -1, dtype=np.int64)
    matcher = difflib.SequenceMatcher(None, list(full_ids), list(deleted_ids), autojunk=False)
    for a, b, n in matcher.get_matching_blocks():
        out[b:b + n] = np.arange(a, a + n)
    return out


@contextlib.contextmanager
def checkpointed(model: torch.nn.Module) -> Iterator[None]:
    """Every decoder layer of ``model`` recomputed in the backward instead of keeping its intermediates (gradient
    checkpointing; torch hooks on a layer still fire once, in the forward, outside the recomputed part)."""
    layers = list(decoder_layers(model))
    for layer in layers:
        layer.forward = functools.partial(checkpoint, layer.forward, use_reentrant=False)
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward  # the instance attribute set above; the class's forward shows through again


@contextlib.contextmanager
def _forward(sensor: Sensor, ids: Sequence[int], fwd_hooks: list[tuple[str, Any]]) -> Iterator[torch.Tensor]:
    """Float32 next-token log-probs at the last token of one plain forward under ``fwd_hooks``, with the hooks
    still registered inside the block (a checkpointed backward recomputes the layers with them)."""
    model = sensor.hf_model
    final: list[torch.Tensor] = []
    grab = (FINAL, lambda x, name: final.append(x[0, -1]))
    with float_final_norm(sensor), hooks(model, [*fwd_hooks, grab]):
        model.base_model(input_ids=torch.tensor([list(ids)], device=sensor.device), use_cache=False)
        yield log_probs(sensor, final[0])


def _last_logprobs(sensor: Sensor, ids: Sequence[int], fwd_hooks: list[tuple[str, Any]]) -> torch.Tensor:
    """Float32 next-token log-probs at the last token of one plain forward under ``fwd_hooks`` (no backward)."""
    with _forward(sensor, ids, fwd_hooks) as p:
        return p


def _capture(sensor: Sensor, ids: Sequence[int], names: list[str]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``(P_full log-probs, {hook: activation [n_tokens, ...]})`` of one forward without a graph."""
    acts: dict[str, torch.Tensor] = {}

    def take(x: torch.Tensor, name: str) -> None:
        acts[name] = x[0].detach().clone()

    with torch.no_grad(), plain_attention(sensor.hf_model):
        p = _last_logprobs(sensor, ids, [(n, take) for n in names])
    if missing := set(names) - acts.keys():
        raise RuntimeError(f"hooks did not fire: {sorted(missing)}")
    return p, acts


def _toward(names: list[str], acts: dict[str, torch.Tensor], aligned: np.ndarray,
            alpha: torch.Tensor) -> list[tuple[str, Any]]:
    """Hooks writing ``a + alpha[k, i] (a*[aligned[i]] - a)`` at hook k and deleted-render position i (no site
    where ``aligned`` is -1; the difference is detached, so dKL/dalpha is the gradient dotted with it)."""
    has = torch.as_tensor(aligned >= 0)
    index = torch.as_tensor(np.where(aligned >= 0, aligned, 0))
    fired: list[str] = []

    def make(k: int, name: str) -> Callable[[torch.Tensor, str], torch.Tensor]:
        donor = acts[name][index.to(acts[name].device)]

        def fn(x: torch.Tensor, hook: str) -> torch.Tensor:
            fired.append(hook)
            diff = (donor.to(x.dtype) - x[0].detach()) * has.to(x.device).view(-1, *[1] * (x.dim() - 2))
            scale = alpha[k].to(x.dtype).view(-1, *[1] * (x.dim() - 2))
            return x + (scale * diff)[None]
        return fn

    return [(n, make(k, n)) for k, n in enumerate(names)]


@dataclass
class LinearRepair:
    """One (boundary, condition)'s first-order map: ``effect[k, i]`` (nats) for hook ``names[k]`` at deleted-render
    position i, with the full run's log-probs and activations kept for exact checks (:func:`exact_effects`)."""

    names: list[str]
    d: float
    effect: np.ndarray  # float64 [n_hooks, n_tokens_deleted]
    aligned: np.ndarray  # int64 [n_tokens_deleted]: full-render position, -1 where none
    p_full: torch.Tensor
    acts: dict[str, torch.Tensor]


def linear_kl_repair(sensor: Sensor, full_ids: Sequence[int], deleted_ids: Sequence[int], names: list[str],
                     use_checkpoint: bool = True) -> LinearRepair:
    """The first-order KL change of patching each hook at each deleted-render position toward the full run (module
    docstring): one forward of the full render, one forward and one backward of the deleted one."""
    aligned = align(full_ids, deleted_ids)
    p_full, acts = _capture(sensor, full_ids, names)
    with torch.inference_mode(False), torch.enable_grad():
        alpha = torch.zeros(len(names), len(deleted_ids), device=sensor.device, requires_grad=True)
        guard = checkpointed(sensor.hf_model) if use_checkpoint else contextlib.nullcontext()
        with plain_attention(sensor.hf_model), guard, \
                _forward(sensor, deleted_ids, _toward(names, acts, aligned, alpha)) as p_del:
            d = kl(p_full, p_del)
            (grad,) = torch.autograd.grad(d, alpha)  # inside: the checkpointed layers recompute under the hooks
    return LinearRepair(names, float(d.detach()), grad.double().cpu().numpy() * (aligned >= 0), aligned, p_full, acts)


def exact_effects(sensor: Sensor, lin: LinearRepair, deleted_ids: Sequence[int],
                  sites: Sequence[tuple[int, Sequence[int]]], strength: float = 1.0) -> list[float]:
    """The exact KL change ``KL(P_full || P_patch) - d`` of each site ``(hook index, positions)`` patched to the full
    run's activations (alpha = 1 there; ``strength``: that alpha), one forward each: the oracle of
    :func:`linear_kl_repair`."""
    out = []
    with torch.no_grad(), plain_attention(sensor.hf_model):
        p_del = _last_logprobs(sensor, deleted_ids, [])
        d = float(kl(lin.p_full, p_del))
        for k, positions in sites:
            alpha = torch.zeros(len(lin.names), len(deleted_ids), device=sensor.device)
            alpha[k, list(positions)] = strength
            p = _last_logprobs(sensor, deleted_ids, _toward(lin.names, lin.acts, lin.aligned, alpha))
            out.append(float(kl(lin.p_full, p)) - d)
    return out


def _key_gate(gate: torch.Tensor) -> Callable[..., tuple[torch.Tensor, None]]:
    """A transformers attention function whose softmax weight of key k is multiplied by ``gate[k]`` (the log of
    the gate added to every score of that key, through one extra query/key dimension, so no [q, k] mask exists)."""
    def attend(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
               **kwargs: Any) -> tuple[torch.Tensor, None]:  # Any: transformers' attention-interface options
        groups = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        n_k = key.shape[2]
        bias = torch.log(gate[:n_k]).to(key.dtype) / scale
        q = torch.cat([query, torch.ones_like(query[..., :1])], dim=-1)
        k = torch.cat([key, bias.view(1, 1, -1, 1).expand(*key.shape[:3], 1)], dim=-1)
        causal = attention_mask is None and query.shape[2] > 1
        mask = None if attention_mask is None else attention_mask[..., :n_k]
        out = torch.nn.functional.scaled_dot_product_attention(q, k, value, attn_mask=mask, is_causal=causal,
                                                               scale=scale)
        return out.transpose(1, 2).contiguous(), None
    return attend


def linear_harms(sensor: Sensor, traj: Trajectory, b: int, sets: Sequence[tuple[Unit, ...]],
                 use_checkpoint: bool = True) -> tuple[float, list[tuple[float, int]]]:
    """``(NLL(y | H), [(harm_lin, n_tokens) per set])``: the first-order harm of deleting each set from one forward
    and one backward of the teacher-forced full render under the key gate (module docstring)."""
    if sensor.linear_attention_layers:
        raise ValueError(f"{sensor.spec}: first-order harm gates softmax attention weights; layers "
                         f"{sensor.linear_attention_layers} are Gated-DeltaNet (no softmax to gate): use the exact "
                         "harm (interp harm)")
    tok = sensor.tokenizer
    full, y0, y1 = _target(traj, b, (), tok)
    ids = full.input_ids[:y1]
    model = sensor.hf_model
    with torch.inference_mode(False), torch.enable_grad():
        gate = torch.ones(y1, device=sensor.device, dtype=torch.float32, requires_grad=True)
        guard = checkpointed(model) if use_checkpoint else contextlib.nullcontext()
        with attention_implementation(model, GATE_ATTENTION, _key_gate(gate)), guard:
            logits = model(input_ids=torch.tensor([ids], device=sensor.device), use_cache=False,
                           logits_to_keep=y1 - y0 + 1).logits[0, :-1]
            lp = torch.log_softmax(logits.float(), dim=-1)
            target = torch.tensor(ids[y0:y1], device=lp.device)
            nll = -lp.gather(1, target[:, None]).mean()
            (grad,) = torch.autograd.grad(nll, gate)  # inside: the recomputed layers attend through the gate
    g = grad.double().cpu().numpy()
    out = []
    for s in sets:
        r, e0, _ = _target(traj, b, s, tok)
        gone = np.setdiff1d(np.arange(y0), align(ids[:y0], r.input_ids[:e0]))
        out.append((float(-g[gone].sum()), len(gone)))
    return float(nll.detach()), out


def agreement(estimate: Sequence[float], exact: Sequence[float], labels: Sequence[str]) -> dict[str, Any]:
    """Spearman, MAE and the largest errors of ``estimate`` against ``exact`` over the pairs where both are finite
    (``N_DISAGREE`` worst listed as {site, estimate, exact, error})."""
    est, ex = np.asarray(estimate, dtype=float), np.asarray(exact, dtype=float)
    ok = np.isfinite(est) & np.isfinite(ex)
    est, ex, lab = est[ok], ex[ok], [x for x, keep in zip(labels, ok) if keep]
    rho = None
    if len(est) >= 3 and np.ptp(est) > 0 and np.ptp(ex) > 0:
        rho = float(spearmanr(est, ex).statistic)
    err = np.abs(est - ex)
    worst = np.argsort(-err, kind="stable")[:N_DISAGREE]
    return {"n": int(len(est)), "spearman": rho, "mae": float(err.mean()) if len(est) else None,
            "max_abs_error": float(err.max()) if len(est) else None,
            "disagree": [{"site": lab[i], "estimate": float(est[i]), "exact": float(ex[i]), "error": float(err[i])}
                         for i in worst]}


def unit_map(deleted: Rendered, effect: np.ndarray) -> list[dict[str, Any]]:
    """The effect summed over each segment of the deleted render: the per-unit map (nats per site)."""
    return [{"kind": s.kind, "step": s.step, "block": s.block, "start": s.start, "end": s.end,
             "effect": effect[:, s.start:s.end].sum(axis=1).tolist()} for s in deleted.segments]


def history_sites(lin: LinearRepair, n_tail: int, n: int, seed: str) -> list[tuple[int, int]]:
    """``n`` seeded (hook index, position) history sites with a counterpart in the full run, before the tail."""
    n_tokens = lin.effect.shape[1]
    pool = [(k, i) for k in range(len(lin.names)) for i in range(n_tokens - n_tail) if lin.aligned[i] >= 0]
    return sorted(random.Random(seed).sample(pool, min(n, len(pool))))


def summarize(rows: list[dict[str, Any]], skipped: list[dict[str, Any]], sites: list[tuple[str, int]],
              condition: str, sensor: Sensor, n_positions: int) -> dict[str, Any]:
    """The ``attribution.json`` document (``FIELDS``) from the per-boundary rows of :func:`boundary_attribution`."""
    pooled: dict[str, Any] = {}
    medians: dict[str, float | None] = {}
    for part in ("tail", "history", "harm"):
        est, ex, lab = [], [], []
        for r in rows:
            for e, x, label in _pairs(r, part):
                est.append(e)
                ex.append(x)
                lab.append(f"{r['task_id']}@{r['after_step']}:{label}")
        pooled[part] = agreement(est, ex, lab)
        rhos = [r["agreement"][part]["spearman"] for r in rows if r["agreement"][part]["spearman"] is not None]
        medians[part] = float(np.median(rhos)) if rhos else None
    fw = {k: float(np.mean([r["forwards"][k] for r in rows])) if rows else None for k in ("attribution", "exact")}
    return {"schema": schema_dict(FIELDS), "condition": condition, "model": sensor.describe(),
            "method": "attribution", "n_positions": n_positions, "sites": [f"{s}.{layer}" for s, layer in sites],
            "layers": [layer for _, layer in sites], "agreement": pooled, "per_boundary_spearman": medians,
            "forwards": fw, "boundaries": [{k: v for k, v in r.items() if k != "forwards"} for r in rows],
            "skipped": skipped, "maps": MAPS_FILE}


def _pairs(row: dict[str, Any], part: str) -> list[tuple[float, float, str]]:
    """(estimate, exact, label) of one boundary row's part (tail, history or harm)."""
    if part == "tail":
        return [(e, x, s) for e, x, s in zip(row["kl_change_linear"], row["kl_change_exact"], row["site_labels"])
                if x is not None]
    if part == "history":
        return [(h["estimate"], h["exact"], f"{h['site']}@{h['position']}") for h in row["history"]]
    return [(u["harm_linear"], u["harm_exact"], "+".join(":".join(map(str, m)) for m in u["members"]))
            for u in row["harm"].get("units", [])]


def attribution_trajectory(sensor: Sensor, traj: Trajectory, condition: str, sites: list[tuple[str, int]],
                           boundaries: list[int] | None = None, n_positions: int = 1, exact_sites: int = 8,
                           condition_params: dict[str, Any] | None = None, max_tokens: int | None = None,
                           units: Sequence[str] | None = None, *, rule: NoiseRule) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                                        dict[str, torch.Tensor]]:
    """``(rows, skipped, maps)`` of every boundary of ``traj``: the first-order map beside its oracle (exact KL
    Repair at the boundary tail under the noise ``rule``, ``exact_sites`` sampled history sites patched exactly, exact
    singleton harm)."""
    from interp.data.deletions import DRSR_UNIT_KINDS
    from interp.sensor.hooks import hook_name
    from interp.sensor.limits import DEFAULT_MAX_TOKENS

    boundaries = boundaries or list(range(1, traj.n_steps + 1))
    limit = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    oracle = kl_repair_trajectory(sensor, traj, condition, sites, boundaries, "fast", n_positions, condition_params,
                                  max_tokens=limit, rule=rule)
    skipped = [{"task_id": r.task_id, "after_step": r.after_step,
                "n_tokens": max(r.n_tokens_full, r.n_tokens_deleted), "reason": r.skipped} for r in oracle if r.skipped]
    run = {r.after_step: r for r in oracle if not r.skipped}
    full, deleted = boundary_renders(sensor, traj, condition, list(run), condition_params)
    names = [hook_name(s, layer) for s, layer in sites]
    labels = [f"{s}.{layer}" for s, layer in sites]
    rows, maps = [], {}
    for b, exact in run.items():
        lin = linear_kl_repair(sensor, full[b].input_ids, deleted[b].input_ids, names)
        change = lin.effect[:, -n_positions:].sum(axis=1)
        chosen = history_sites(lin, n_positions, exact_sites, f"{traj.task_id}@{b}")
        hist = exact_effects(sensor, lin, deleted[b].input_ids, [(k, [i]) for k, i in chosen])
        harm = _harm(sensor, traj, b, units or DRSR_UNIT_KINDS)
        row = {"task_id": traj.task_id, "after_step": b, "d": lin.d, "n_tokens_full": full[b].n_tokens,
               "n_tokens_deleted": deleted[b].n_tokens, "n_aligned": int((lin.aligned >= 0).sum()),
               "site_labels": labels, "kl_change_linear": change.tolist(),
               "repair_linear": (-change / lin.d).tolist() if lin.d > 0 else [None] * len(names),
               "kl_change_exact": [k - exact.d for k in exact.kl_patch],
               "repair_exact": [None if exact.excluded else x for x in exact.repair],
               "units": unit_map(deleted[b], lin.effect),
               "history": [{"site": labels[k], "position": i, "estimate": float(lin.effect[k, i]), "exact": x}
                           for (k, i), x in zip(chosen, hist)],
               "harm": harm,
               "forwards": {"attribution": 3 + (2 if "units" in harm else 0),
                            "exact": 2 + len(names) * int((lin.aligned >= 0).sum()) + len(harm.get("units", []))}}
        row["agreement"] = {part: agreement(*zip(*_pairs(row, part))) if _pairs(row, part) else agreement([], [], [])
                            for part in ("tail", "history", "harm")}
        rows.append(row)
        key = f"{traj.task_id}@{b}"
        maps[f"{key}.effect"] = torch.from_numpy(lin.effect.astype(np.float32))
        maps[f"{key}.aligned"] = torch.from_numpy(lin.aligned)
    return rows, skipped, maps


def _harm(sensor: Sensor, traj: Trajectory, b: int, units: Sequence[str]) -> dict[str, Any]:
    """One boundary's first-order vs exact singleton harm, or the reason it was not run."""
    if b >= traj.n_steps:
        return {"reason": "no recorded next output (the last boundary)"}
    if sensor.linear_attention_layers:
        return {"reason": f"Gated-DeltaNet layers {sensor.linear_attention_layers}: no softmax weight to gate"}
    singles = candidate_sets(traj, b, max_k=1, units=units)
    if not singles:
        return {"reason": "no unit of the chosen kinds in the history"}
    nll, lin = linear_harms(sensor, traj, b, singles)
    _, sets = set_harms(sensor, traj, b, singles)
    return {"nll_full": nll, "units": [{"members": [list(m) for m in s.members], "tokens": n, "harm_linear": h,
                                        "harm_exact": s.harm} for s, (h, n) in zip(sets, lin)]}
