"""Boundary attention rows in O(N) memory, from the model's own rotated q and k.

HF attention modules (Llama, Qwen3, Qwen3.5, ...) call the module-level
function ``apply_rotary_pos_emb(q, k, cos, sin)`` after q/k projection, q/k
norms and the Qwen3.5 query/gate split, and before the cache update and the
attention kernel. Wrapping that function for the duration of a forward gives
the exact rotated ``q`` ``[batch, n_heads, pos, head_dim]`` and ``k``
``[batch, n_kv_heads, pos, head_dim]`` the kernel sees, whatever the partial
rotary factor. The row of query position ``p`` is then
``softmax(q_p . K[:p+1]^T * module.scaling)`` with K = cached keys of earlier
chunks followed by this chunk's keys, GQA heads mapped to their KV head.
Nothing of size N x N is built: one row per requested query, [n_heads, p+1].

The output gate of Qwen3.5 full attention acts after the softmax and does not
change the pattern. Gated-DeltaNet layers have no softmax pattern and never
call ``apply_rotary_pos_emb``: they get no row.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from interp.sensor.hooks import decoder_layers

if TYPE_CHECKING:
    from transformers.cache_utils import Cache

RowSink = Callable[[int, int, torch.Tensor], None]  # (layer, query position, row [n_heads, p+1] float32)


def attention_row(q: torch.Tensor, keys: torch.Tensor, scaling: float) -> torch.Tensor:
    """Softmax row(s) of queries ``q`` [n_heads, hd] over ``keys`` [n_kv_heads, n, hd] (float32)."""
    n_heads, n_kv = q.shape[0], keys.shape[0]
    k = keys.float().repeat_interleave(n_heads // n_kv, dim=0)
    scores = torch.einsum("hd,hnd->hn", q.float(), k) * scaling
    return torch.softmax(scores, dim=-1)


@contextlib.contextmanager
def capture_rows(model: torch.nn.Module, layers: list[int], queries: Callable[[int, int], list[int]],
                 cache: Cache | None,
                 sink: RowSink) -> Iterator[None]:
    """Compute attention rows at ``layers`` during the forwards inside the block.

    ``queries(layer, chunk_len)`` returns the chunk-local query indices whose
    rows are wanted; ``sink(layer, local_index, row)`` receives each row.
    ``cache`` is the cache object passed to the forward (or None).
    """
    wanted = set(layers)
    all_layers = decoder_layers(model)
    current: dict[str, Any] = {}
    handles = []
    modules = set()
    for idx in wanted:
        attn = getattr(all_layers[idx], "self_attn", None)
        if attn is None:
            raise ValueError(f"layer {idx} has no softmax attention (linear attention): no pattern exists there")
        modules.add(sys.modules[type(attn).__module__])
        handles.append(attn.register_forward_pre_hook(
            lambda m, a, k, idx=idx: current.update(layer=idx, module=m), with_kwargs=True))
    originals = {mod: mod.apply_rotary_pos_emb for mod in modules}

    def make_wrapper(original):
        def wrapper(q, k, cos, sin, *args, **kwargs):
            q_rot, k_rot = original(q, k, cos, sin, *args, **kwargs)
            layer = current.pop("layer", None)
            if layer is not None:
                module = current.pop("module")
                past = None
                if cache is not None and cache.layers[layer].is_initialized:
                    past = cache.layers[layer].keys
                keys = k_rot[0] if past is None or past.numel() == 0 else torch.cat([past[0], k_rot[0]], dim=1)
                n_past = keys.shape[1] - k_rot.shape[2]
                for local in queries(layer, q_rot.shape[2]):
                    row = attention_row(q_rot[0, :, local], keys[:, : n_past + local + 1], module.scaling)
                    sink(layer, local, row)
            return q_rot, k_rot
        return wrapper

    try:
        for mod in modules:
            setattr(mod, "apply_rotary_pos_emb", make_wrapper(originals[mod]))  # a module global, swapped
        yield
    finally:
        for mod, fn in originals.items():
            setattr(mod, "apply_rotary_pos_emb", fn)
        for h in handles:
            h.remove()
