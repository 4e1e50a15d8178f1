"""Causal attention for a chunk that continues a cache, at the speed of a whole forward.

A chunked forward (cuts at boundaries, a snapshot where a deleted render leaves
the full one) runs each chunk of q tokens against the cache's ``past`` keys
plus its own. transformers' sdpa path then passes an explicit ``[q, past + q]``
mask, which keeps torch off its fused causal kernel: on CPU a 4.2K-token chunk
after a 100-token snapshot took 30 s where the whole 4.3K sequence took 21.5 s
(smollm2-135m, 1 thread).

:func:`chunk_attention` is the attention implementation ``interp_chunked``,
registered only for the duration of a forward by
``interp.sensor.hooks.attention_implementation`` (``run_plan`` does this; no
mask is built for it; every run here is one unpadded sequence, or a batch of
right-padded rows that share their positions and their cache's length,
``interp.sensor.forward.run_batch``: every row gets the same causal mask, and a
row's real queries never see the padding after them):

- no past: sdpa with ``is_causal``, as a whole forward;
- a past no longer than ``PAD_LIMIT`` x q: the queries are left-padded with
  ``past`` zero rows so that the square ``is_causal`` mask is exactly the
  chunk's lower-right causal mask; the padded rows are dropped (a zero query
  only averages values, and nothing reads it);
- a longer past: an explicit lower-right boolean mask, as transformers does,
  for blocks of at most ``Q_BLOCK`` queries at a time (each block against the
  keys it can see), so the mask and sdpa's working buffers are
  ``[Q_BLOCK, past + q]``, not ``[q, past + q]``: a 17K-token suffix after a
  16K-token snapshot (harm of a deletion in the middle of a 50-step run) no
  longer holds a 17K x 33K mask (``benchmarks/RESULTS.md``, long runs).

``PAD_LIMIT`` = 0.5 was chosen on that 4.3K sequence (1 thread): cuts every 300
or 1000 tokens cost the same as plain sdpa (21.6 / 21.5 s vs 21.6-22.6 /
21.4-21.7 s), a snapshot at 100 or 1000 tokens 19.9 / 19.7 s vs 30.1 / 25.3 s.
Padding more (limit 4) made cuts every 1000 tokens 26.5 s: the padded rows'
work grows as ``(past + q)^2`` while the masked kernel's penalty is mild for
short chunks and large only for long ones.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

IMPLEMENTATION = "interp_chunked"
PAD_LIMIT = 0.5  # pad when past <= PAD_LIMIT * q (measured; see the module docstring)
Q_BLOCK = 1024  # queries per masked sdpa call when the past is longer (bounds the mask and buffers)


def chunk_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, **kwargs: object) -> tuple[torch.Tensor, None]:
    """Attention of a chunk's queries ``[b, h, q, hd]`` to ``[b, kvh, past + q, hd]`` keys, causal (see module doc)."""
    q_len, kv_len = query.shape[2], key.shape[2]
    past = kv_len - q_len
    kwargs.pop("is_causal", None)
    passed: dict[str, Any] = kwargs  # transformers' other attention options, handed on to sdpa unread
    if attention_mask is not None:
        raise ValueError("interp_chunked attention serves right-padded rows without a mask")
    if q_len == 1:  # one query sees every key
        return sdpa_attention_forward(module, query, key, value, None, is_causal=False, **passed)
    if past <= PAD_LIMIT * q_len:
        padded = torch.cat([query.new_zeros(*query.shape[:2], past, query.shape[3]), query], dim=2)
        out, _ = sdpa_attention_forward(module, padded, key, value, None, is_causal=True, **passed)
        return out[:, past:], None
    outs = []
    for lo in range(0, q_len, Q_BLOCK):  # each query row is independent: blocks bound the mask and buffers
        hi = min(q_len, lo + Q_BLOCK)
        seen = past + hi
        mask = torch.ones(hi - lo, seen, dtype=torch.bool, device=query.device).tril(past + lo)
        outs.append(_masked(module, query[:, :, lo:hi], key[:, :, :seen], value[:, :, :seen], mask[None, None],
                            passed))
    return (outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)), None


def _masked(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
            mask: torch.Tensor, passed: dict[str, Any]) -> torch.Tensor:
    """sdpa under an explicit mask, ``[b, q, h, hd]``; on CPU grouped K/V go in as they are (``enable_gqa``).

    transformers repeats grouped keys and values to every query head whenever a mask is given (CUDA's masked
    kernels need that); torch's CPU kernel takes them grouped: at 32K cached keys, 256 queries and 16/4 heads of
    256 (Qwen3.5-9B's attention) that is 3.3 s of CPU instead of 4.2 s (the 4x copy of K and V), the same output.
    """
    groups = getattr(module, "num_key_value_groups", 1)
    plain = all(passed.get(k) is None for k in ("softcap", "position_bias", "sliding_window"))
    if query.device.type != "cpu" or groups == 1 or not plain:
        return sdpa_attention_forward(module, query, key, value, mask, is_causal=False, **passed)[0]
    dropout = passed.get("dropout") or 0.0
    scaling = passed.get("scaling")
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=float(dropout), is_causal=False,
        scale=None if scaling is None else float(scaling), enable_gqa=True)
    return out.transpose(1, 2).contiguous()

