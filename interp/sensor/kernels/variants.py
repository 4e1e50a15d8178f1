"""Run the last tokens of a prompt as S patched variants that share one prefix, without copying it.

Patching a late position cannot change any earlier one, so all variants of a
boundary share the deleted run's prefix state: the KV of full-attention
layers and the conv/recurrent states of Gated-DeltaNet layers after
``n - k`` tokens (``k`` = patched tail length, 1 for the boundary token).

The variants run as a batch of S sequences of k tokens:

- full-attention layers use an attention function (``interp_shared_prefix``,
  registered only for the forward, with the prefix K/V in its closure) that
  attends each variant's queries to the shared prefix keys/values
  ``[1, n_kv, n-k, hd]`` by broadcasting (never expanded to S copies) and,
  causally, to the variant's own k tokens;
- Gated-DeltaNet layers get their small recurrent and conv states expanded
  to the batch (a copy per variant: O(S * state), independent of n).

A forward mutates the linear-attention states in place, so they are copied
from the snapshot for every call; the prefix KV tensors are only read.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, cast

import torch
from transformers import DynamicCache

from interp.sensor.hooks import attention_implementation, hooks
from interp.sensor.protocol import ForwardSensor
from interp.sensor.unembed import float_final_norm, logit_dtype, logits as unembed_logits

IMPLEMENTATION = "interp_shared_prefix"
PrefixKV = dict[int, tuple[torch.Tensor, torch.Tensor]]  # layer -> (keys, values) [1, kvh, m, hd]


def shared_prefix_attention(prefix: PrefixKV, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                            value: torch.Tensor, attention_mask: torch.Tensor | None, scaling: float | None = None,
                            dropout: float = 0.0, **kwargs: object) -> tuple[torch.Tensor, None]:
    """Attention of variant queries [S, h, k, hd] to shared prefix K/V plus their own k tokens (causal)."""
    pk, pv = prefix[cast(int, module.layer_idx)]  # [1, kvh, m, hd]
    s, h, k, hd = query.shape
    kvh = key.shape[1]
    g = h // kvh
    scale = scaling if scaling is not None else hd ** -0.5
    acc = logit_dtype(query.dtype)
    q = query.to(acc).view(s, kvh, g, k, hd)
    scores_p = torch.einsum("svgqd,vmd->svgqm", q, pk[0].to(acc)) * scale
    scores_o = torch.einsum("svgqd,svkd->svgqk", q, key.to(acc)) * scale
    causal = torch.ones(k, k, dtype=torch.bool, device=query.device).tril()
    scores_o = scores_o.masked_fill(~causal, float("-inf"))
    weights = torch.softmax(torch.cat([scores_p, scores_o], dim=-1), dim=-1)
    m = pk.shape[2]
    out = torch.einsum("svgqm,vmd->svgqd", weights[..., :m], pv[0].to(acc))
    out = out + torch.einsum("svgqk,svkd->svgqd", weights[..., m:], value.to(acc))
    # HF attention functions return [batch, q_len, heads, head_dim].
    return out.reshape(s, h, k, hd).transpose(1, 2).to(query.dtype).contiguous(), None


def _attention_over(prefix: DynamicCache) -> Callable[..., tuple[torch.Tensor, None]]:
    """:func:`shared_prefix_attention` bound to the KV layers of snapshot ``prefix`` (read, never copied)."""
    from transformers.cache_utils import DynamicLayer

    kv: PrefixKV = {i: (layer.keys, layer.values) for i, layer in enumerate(prefix.layers)
                    if isinstance(layer, DynamicLayer) and layer.keys is not None and layer.values is not None}

    def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, **kwargs: object) -> tuple[torch.Tensor, None]:
        passed: dict[str, Any] = kwargs  # transformers' attention options (scaling, dropout, ...), handed on
        return shared_prefix_attention(kv, module, query, key, value, attention_mask, **passed)
    return attention


def _variant_cache(sensor: ForwardSensor, prefix: DynamicCache, batch: int) -> DynamicCache:
    """Empty KV layers (their prefix is served by the attention function) + linear states expanded to ``batch``."""
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache(config=sensor.hf_model.config)
    for i, layer in enumerate(prefix.layers):
        if isinstance(layer, DynamicLayer):
            continue
        mine = copy.deepcopy(layer)
        for name in ("conv_states", "recurrent_states"):
            states = getattr(mine, name, None)
            if isinstance(states, dict):
                for key, value in states.items():
                    if isinstance(value, torch.Tensor):
                        states[key] = value.expand(batch, *value.shape[1:]).clone()
        cache.layers[i] = mine
    return cache


def run_variants(sensor: ForwardSensor, prefix: DynamicCache, prefix_len: int, tail_ids: list[int],
                 patches: list[dict[str, torch.Tensor]], log_probs: bool = True) -> torch.Tensor:
    """Float32 log-probs [S, vocab] (logits with ``log_probs=False``) at the last tail token for S variants.

    ``prefix`` is a snapshot after ``prefix_len`` tokens; ``tail_ids`` the k
    remaining tokens; ``patches[s]`` maps a TL hook name served by ``interp.sensor.hooks``
    (``blocks.L.hook_resid_pre``, ``blocks.L.attn.hook_z``, ...)
    to the activation [k, ...] (its TL shape without batch) that replaces variant s's tail there ({} = unpatched).
    """
    model = sensor.hf_model
    s, k = len(patches), len(tail_ids)
    ids = torch.tensor([tail_ids] * s, dtype=torch.long, device=sensor.device)
    positions = torch.arange(prefix_len, prefix_len + k, device=sensor.device).expand(s, k)
    by_name: dict[str, list[tuple[int, torch.Tensor]]] = {}
    for v, patch in enumerate(patches):
        for name, value in patch.items():
            by_name.setdefault(name, []).append((v, value))

    def make(rows: list[tuple[int, torch.Tensor]]):
        index = torch.tensor([v for v, _ in rows], device=sensor.device)

        def fn(x: torch.Tensor, name: str) -> torch.Tensor:
            x = x.clone()
            x[index] = torch.stack([value.reshape(x.shape[1:]) for _, value in rows]).to(x.device, x.dtype)
            return x
        return fn

    fwd = [(name, make(rows)) for name, rows in by_name.items()]
    cache = _variant_cache(sensor, prefix, s)
    with torch.inference_mode(), attention_implementation(model, IMPLEMENTATION, _attention_over(prefix)), \
            float_final_norm(sensor), hooks(model, fwd):
        hidden = model.base_model(input_ids=ids, position_ids=positions, cache=cache, use_cache=True).last_hidden_state
        logits = unembed_logits(sensor, hidden[:, -1])
    return torch.log_softmax(logits, dim=-1) if log_probs else logits
