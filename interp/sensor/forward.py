"""One chunked forward with capture at chosen layers: the engine under extraction and patching.

``run_plan(sensor, ids, plan)`` runs the plain HF forward over ``ids`` (sdpa,
through ``interp.sensor.kernels.chunk_attention``, registered for the run only, so that a
chunk after a cache keeps the fused causal kernel), split into chunks at ``plan.cuts`` with a cache carried
between chunks, and keeps only what the plan asks for, the moment it is
computed:

- ``pooled``: sums (float32) of a hooked site over given absolute positions
  (a mean pool is ``sum / count``), e.g. ``resid_pre`` of layer 12 at the
  boundary token (a site of ``interp.sensor.hooks.SITES`` with its layer, or
  any TransformerLens name the hooks serve with layer ``None``);
- ``captures``: the activation at a TransformerLens name and one absolute
  position, as computed (the model's dtype, its TL shape without batch and
  position), e.g. a patch source;
- ``rows``: attention rows of given query positions at full-attention layers
  (``interp.sensor.kernels.attention_rows``), computed when the chunk ending at that query runs;
- ``logprobs``: float32 log-softmax of the next-token distribution at given
  positions (only those rows go through the unembedding; the final norm and
  the unembedding run in float32 whatever the model dtype,
  ``interp.sensor.unembed``);
- ``entropy``: predictive entropy (bits) at given positions, unembedded in
  slices so no [N, vocab] tensor exists;
- ``snapshots``: deep copies of the cache (KV and Gated-DeltaNet conv and
  recurrent states) at given cut points, for continuing other sequences that
  share this prefix. A forward mutates its cache in place: a snapshot is a
  copy taken at the cut, never the live object.

``start`` continues from a snapshot: ``ids`` are then the suffix tokens and
positions stay absolute (``offset`` = snapshot length).

:func:`run_batch` runs several suffixes that continue one snapshot as one
right-padded batch, for plans that keep only log-probs, entropies and target
log-probs (set-level harm's branches). Right padding is neutral by causality,
for every layer kind: a row's real tokens come first, and softmax attention
(causal mask), the Gated-DeltaNet causal conv and its recurrence (chunked or
sequential) compute position i from positions <= i only, so the padding after
a row's last real token changes none of its outputs (the state after the
padding is wrong, and is dropped: a batch keeps no cache). Every row has the
positions it has alone (offset + i) and the same causal mask, so no attention
mask is needed. The pad token is the row's own last token (a real token:
finite activations, so a multiplicative causal mask inside a kernel, 0 x pad,
stays 0). The snapshot's attention KV is not copied per row: each
full-attention layer sees it broadcast and concatenates it with the batch's
new keys for that layer only, keeping nothing (``_Passing``), so the KV held
at once is one layer's ``[rows, past + q]``; Gated-DeltaNet conv and
recurrent states (small, mutated in place) are copied per row. Cache layers of
other kinds (sliding window, quantized, static) are refused
(:func:`batch_supported`; the scheduler then runs one suffix per forward).
:func:`batch_row_bytes` estimates one row's working memory, from which the
scheduler sizes batches to a memory budget.

Tensors stay on the sensor's device: ``sums``, ``rows`` and ``logprobs`` are
returned there, never moved to the host mid-run (a caller that combines them
with another run's, e.g. KL Repair's ``P_full`` with ``P_del``, needs them on
one device); the caller moves what it writes to the host once, at its output
boundary. ``entropy`` and ``target_logprob`` are host floats (computed on the
device, moved once per slice).
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer, LinearAttentionLayer

from interp.sensor.kernels.attention_rows import capture_rows
from interp.sensor.hooks import attention_implementation, hook_name, hooks
from interp.sensor.kernels.chunk_attention import IMPLEMENTATION as CHUNKED
from interp.sensor.kernels.chunk_attention import Q_BLOCK
from interp.sensor.kernels.chunk_attention import chunk_attention
from interp.sensor.protocol import ForwardSensor
from interp.sensor.unembed import float_final_norm, log_probs

if TYPE_CHECKING:
    import numpy as np

ENTROPY_SLICE = 512  # rows unembedded at a time for entropies and target log-probs


@dataclass
class Snapshot:
    """A copied cache after ``length`` tokens; continue a sequence that shares those tokens."""

    length: int
    cache: Any


@dataclass
class Plan:
    """What one run keeps (positions absolute in the full sequence)."""

    pooled: dict[Any, tuple[str, int | None, Any]] = field(default_factory=dict)  # key -> (site, layer, positions)
    captures: dict[Any, tuple[str, int]] = field(default_factory=dict)  # key -> (TL hook name, position)
    rows: dict[tuple[int, int], Any] = field(default_factory=dict)  # (layer, query pos) -> key
    logprobs: list[int] = field(default_factory=list)
    entropy: list[int] = field(default_factory=list)
    targets: dict[int, int] = field(default_factory=dict)  # pos -> token id whose log-prob is kept
    snapshots: list[int] = field(default_factory=list)
    cuts: list[int] = field(default_factory=list)


@dataclass
class Outputs:
    """What :func:`run_plan` kept."""

    sums: dict[Any, torch.Tensor] = field(default_factory=dict)  # float32 [d_model], on the sensor's device
    counts: dict[Any, int] = field(default_factory=dict)
    captures: dict[Any, torch.Tensor] = field(default_factory=dict)  # key -> activation (model dtype), device
    rows: dict[Any, dict[int, torch.Tensor]] = field(default_factory=dict)  # key -> {layer: [heads, p+1]}, device
    logprobs: dict[int, torch.Tensor] = field(default_factory=dict)  # pos -> float32 [vocab], device
    entropy: dict[int, float] = field(default_factory=dict)  # pos -> bits
    target_logprob: dict[int, float] = field(default_factory=dict)  # pos -> log p(target) in nats
    snapshots: dict[int, Snapshot] = field(default_factory=dict)

    def mean(self, key: Hashable) -> torch.Tensor:
        """Mean pool of ``key`` (sum / count)."""
        return self.sums[key] / self.counts[key]


def snapshot_cache(cache: DynamicCache) -> DynamicCache:
    """A frozen copy of a cache: KV tensors by reference (an update rebinds them), linear states copied.

    Attention KV layers grow by ``torch.cat`` into new tensors, so references
    taken now keep their length; Gated-DeltaNet conv/recurrent states are
    updated in place and are deep-copied.
    """
    snap = copy.copy(cache)
    snap.layers = [copy.copy(layer) if type(layer) is DynamicLayer else copy.deepcopy(layer) for layer in cache.layers]
    return snap


def croppable(cache: DynamicCache) -> bool:
    """Whether every layer of ``cache`` is plain attention KV, so that any prefix of it is a slice of its tensors
    (Gated-DeltaNet states, sliding windows and quantized layers cannot be cut back: those need snapshots)."""
    return all(type(layer) is DynamicLayer for layer in cache.layers)


def crop_snapshot(snap: Snapshot, length: int) -> Snapshot:
    """``snap`` cut to its first ``length`` tokens: views of its KV tensors (no copy), for :func:`croppable`
    caches; ``snap`` itself is unchanged (each layer is rebound on a copy, ``DynamicCache.crop``)."""
    if not croppable(snap.cache) or not 0 < length <= snap.length:
        raise ValueError(f"crop_snapshot: cannot cut a {snap.length}-token cache to {length} tokens"
                         + ("" if croppable(snap.cache) else " (it holds layers other than plain attention KV)"))
    cache = snapshot_cache(snap.cache)
    cache.crop(length - snap.length)  # transformers: a negative count removes that many tokens from the end
    return Snapshot(length, cache)


def new_cache(sensor: ForwardSensor) -> DynamicCache:
    """An empty cache of the model's own kind (hybrid models include linear-attention states)."""
    return DynamicCache(config=sensor.hf_model.config)


def batch_supported(sensor: ForwardSensor) -> bool:
    """Whether :func:`run_batch` can expand the model's cache (plain attention and Gated-DeltaNet layers only)."""
    return all(type(layer) in (DynamicLayer, LinearAttentionLayer) for layer in new_cache(sensor).layers)


def batch_row_bytes(sensor: ForwardSensor, past: int, length: int) -> int:
    """Estimated bytes one row of :func:`run_batch` adds: ``length`` tokens after a ``past``-token snapshot.

    The terms (model dtype, float32 where the kernels compute in it): one full-attention layer's keys and values
    over ``past + length`` positions, twice (the concatenation and sdpa's per-head expansion); one block of at most
    ``chunk_attention.Q_BLOCK`` attention scores per head over ``past + length`` keys; the residual, attention and
    MLP activations of one layer over ``length`` positions (6 x d_model + 3 x intermediate per token); a
    Gated-DeltaNet layer's float32 working set (8 x heads x (d_k + d_v) per token) and its copied states.
    """
    cfg = sensor.hf_model.config
    elem = max(next(sensor.hf_model.parameters()).element_size(), 4)
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    kv = 2 * 2 * (past + length) * heads * head_dim * elem
    scores = min(length, Q_BLOCK) * (past + length) * heads * elem
    acts = length * (6 * cfg.hidden_size + 3 * cfg.intermediate_size) * elem
    linear = 0
    n_linear = sum(kind == "linear_attention" for kind in getattr(cfg, "layer_types", None) or [])
    if n_linear:
        v_heads, dk, dv = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
        conv_dim = 2 * cfg.linear_num_key_heads * dk + v_heads * dv
        states = n_linear * (v_heads * dk * dv + conv_dim * cfg.linear_conv_kernel_dim)
        linear = 8 * length * v_heads * (dk + dv) * 4 + states * elem
    return int(kv + scores + acts + linear)


def _batch_cache(sensor: ForwardSensor, start: Snapshot | None, rows: int) -> Any:
    """A cache for ``rows`` rows continuing ``start``: attention KV broadcast (``_Passing``), linear states copied."""
    if start is None:
        return new_cache(sensor)
    cache = copy.copy(start.cache)
    layers: list[Any] = []
    for layer in start.cache.layers:
        if type(layer) is DynamicLayer:
            layers.append(_Passing(layer, rows))
        elif type(layer) is LinearAttentionLayer:
            mine = copy.deepcopy(layer)
            mine.reorder_cache(cast(torch.LongTensor, torch.zeros(rows, dtype=torch.long)))  # row 0, rows times
            layers.append(mine)
        else:
            raise ValueError(f"run_batch: cannot batch a {type(layer).__name__} cache layer")
    cache.layers = layers
    return cache


class _Passing(DynamicLayer):
    """A snapshot's KV seen by ``rows`` rows at once: ``update`` returns past + new keys and keeps nothing."""

    def __init__(self, layer: DynamicLayer, rows: int) -> None:
        super().__init__()
        if layer.keys is None or layer.values is None:
            raise ValueError("run_batch: the snapshot has an attention layer without keys")
        self.device, self.is_initialized = layer.device, layer.is_initialized
        shape = (rows, *layer.keys.shape[1:])
        self.past = layer.keys.expand(shape), layer.values.expand(shape)
        self.keys, self.values = self.past

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object,
               **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        """The snapshot's keys and values followed by this forward's (the layer itself is left as it was)."""
        keys, values = self.past
        return torch.cat([keys, key_states], dim=-2), torch.cat([values, value_states], dim=-2)


def run_batch(sensor: ForwardSensor, suffixes: list[list[int]], plans: list[Plan],
              start: Snapshot | None = None) -> list[Outputs]:
    """Each suffix's outputs of its plan (log-probs, entropies, targets), all rows as one right-padded forward
    continuing ``start`` (module docstring); equal to :func:`run_plan` per row within float rounding."""
    if len(suffixes) != len(plans) or not suffixes or any(not ids for ids in suffixes):
        raise ValueError("run_batch: one non-empty suffix per plan expected")
    for plan in plans:
        if plan.pooled or plan.captures or plan.rows or plan.snapshots:
            raise ValueError("run_batch: a batched row keeps only log-probs, entropies and targets")
    model = sensor.hf_model
    offset = start.length if start is not None else 0
    width = max(len(ids) for ids in suffixes)
    ids_t = torch.tensor([list(ids) + [ids[-1]] * (width - len(ids)) for ids in suffixes], dtype=torch.long,
                         device=sensor.device)
    cache = _batch_cache(sensor, start, len(suffixes))
    outs = [Outputs() for _ in suffixes]
    with torch.inference_mode(), attention_implementation(model, CHUNKED, chunk_attention), float_final_norm(sensor):
        hidden = model.base_model(input_ids=ids_t, cache=cache, use_cache=True).last_hidden_state
        for row, (ids, plan, out) in enumerate(zip(suffixes, plans, outs)):
            _unembed(sensor, hidden[row], offset, offset + len(ids), set(plan.logprobs), set(plan.entropy),
                     plan.targets, out)
    return outs


def _cut_points(n_total: int, offset: int, plan: Plan) -> list[int]:
    cuts = {c for c in plan.cuts + plan.snapshots if offset < c < n_total}
    cuts |= {p + 1 for (_, p) in plan.rows if offset <= p < n_total - 1}
    return sorted(cuts) + [n_total]


def run_plan(sensor: ForwardSensor, ids: Sequence[int] | np.ndarray | torch.Tensor, plan: Plan, start: Snapshot | None = None,
             out: Outputs | None = None) -> Outputs:
    """Run ``ids`` (the suffix after ``start``, if given) and keep what ``plan`` asks for.

    ``out``: the outputs of the forward that ``start`` was taken from, to add to in place (pooled sums
    then accumulate chunk by chunk exactly as in one uncut run).
    """
    model = sensor.hf_model
    device = sensor.device
    ids_t = torch.as_tensor(ids, dtype=torch.long, device=device).reshape(1, -1)
    offset = start.length if start is not None else 0
    n_total = offset + ids_t.shape[1]
    cache = snapshot_cache(start.cache) if start is not None else new_cache(sensor)
    out = out if out is not None else Outputs()
    state = {"lo": offset, "hi": offset}

    by_site: dict[tuple[str, int | None], list[tuple[Any, torch.Tensor]]] = defaultdict(list)
    for key, (site, layer, positions) in plan.pooled.items():
        by_site[(site, layer)].append((key, torch.as_tensor(positions, dtype=torch.long)))

    def pool_hook(site: str, layer: int | None):
        requests = by_site[(site, layer)]

        def fn(x: torch.Tensor, name: str) -> None:
            lo, hi = state["lo"], state["hi"]
            for key, pos in requests:
                sel = pos[(pos >= lo) & (pos < hi)]
                if sel.numel():
                    part = x[0, (sel - lo).to(x.device)].float().sum(0)
                    out.sums[key] = out.sums[key] + part if key in out.sums else part
                    out.counts[key] = out.counts.get(key, 0) + int(sel.numel())
        return fn

    def capture_hook(requests: list[tuple[Any, int]]):
        def fn(x: torch.Tensor, name: str) -> None:
            for key, pos in requests:
                if state["lo"] <= pos < state["hi"]:
                    out.captures[key] = x[0, pos - state["lo"]].clone()
        return fn

    by_name: dict[str, list[tuple[Any, int]]] = defaultdict(list)
    for key, (name, pos) in plan.captures.items():
        by_name[name].append((key, int(pos)))
    fwd = [(site if layer is None else hook_name(site, layer), pool_hook(site, layer)) for site, layer in by_site]
    fwd += [(name, capture_hook(requests)) for name, requests in by_name.items()]
    row_layers = sorted({layer for layer, _ in plan.rows})

    def queries(layer: int, chunk_len: int) -> list[int]:
        lo = state["lo"]
        return [p - lo for (lay, p) in plan.rows if lay == layer and lo <= p < lo + chunk_len]

    def sink(layer: int, local: int, row: torch.Tensor) -> None:
        key = plan.rows[(layer, state["lo"] + local)]
        out.rows.setdefault(key, {})[layer] = row

    want_lp = set(plan.logprobs)
    want_h = set(plan.entropy)
    want_t = plan.targets
    with torch.inference_mode(), attention_implementation(model, CHUNKED, chunk_attention), \
            float_final_norm(sensor), hooks(model, fwd), capture_rows(model, row_layers, queries, cache, sink):
        lo = offset
        for hi in _cut_points(n_total, offset, plan):
            state["lo"], state["hi"] = lo, hi
            chunk = ids_t[:, lo - offset: hi - offset]
            hidden = model.base_model(input_ids=chunk, cache=cache, use_cache=True).last_hidden_state[0]
            _unembed(sensor, hidden, lo, hi, want_lp, want_h, want_t, out)
            if hi in plan.snapshots:
                out.snapshots[hi] = Snapshot(hi, snapshot_cache(cache))
            lo = hi
    return out


def _unembed(sensor: ForwardSensor, hidden: torch.Tensor, lo: int, hi: int, want_lp: set[int], want_h: set[int],
             want_t: dict[int, int], out: Outputs) -> None:
    """Log-probs, entropies and target log-probs of the chunk ``[lo, hi)``'s final hidden states (float32 norm and
    unembedding: ``interp.sensor.unembed``)."""
    lp_pos = sorted(p for p in want_lp if lo <= p < hi)
    if lp_pos:
        for p, row in zip(lp_pos, log_probs(sensor, hidden[[p - lo for p in lp_pos]])):
            out.logprobs[p] = row
    h_pos = sorted(p for p in want_h if lo <= p < hi)
    for i in range(0, len(h_pos), ENTROPY_SLICE):
        part = h_pos[i: i + ENTROPY_SLICE]
        logp = log_probs(sensor, hidden[[p - lo for p in part]])
        bits = -(logp.exp() * logp).sum(-1) / math.log(2.0)
        out.entropy.update(zip(part, bits.cpu().tolist()))
    t_pos = sorted(p for p in want_t if lo <= p < hi)
    for i in range(0, len(t_pos), ENTROPY_SLICE):
        part = t_pos[i: i + ENTROPY_SLICE]
        logp = log_probs(sensor, hidden[[p - lo for p in part]])
        wanted = torch.tensor([want_t[p] for p in part], device=logp.device)
        picked = logp[torch.arange(len(part), device=logp.device), wanted]
        out.target_logprob.update(zip(part, picked.cpu().tolist()))
