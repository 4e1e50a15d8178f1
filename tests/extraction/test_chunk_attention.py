"""Chunk attention after a cache against attention written out by hand, and chunked forwards against a whole one."""

from __future__ import annotations

import pytest
import torch

from interp.sensor.kernels.chunk_attention import PAD_LIMIT, chunk_attention
from interp.sensor.forward import Plan, run_plan

pytestmark = pytest.mark.parity


class _Module:
    is_causal = True
    num_key_value_groups = 2
    training = False


def _by_hand(query, key, value):
    q_len, kv_len = query.shape[2], key.shape[2]
    key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
    value = value.repeat_interleave(query.shape[1] // value.shape[1], dim=1)
    scores = query @ key.transpose(-1, -2) / query.shape[-1] ** 0.5
    allowed = torch.ones(q_len, kv_len, dtype=torch.bool).tril(kv_len - q_len)
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    return (weights @ value).transpose(1, 2)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("q_len,past", [(7, 0), (8, 2), (8, int(8 * PAD_LIMIT)), (6, int(6 * PAD_LIMIT) + 1),
                                         (3, 40), (1, 9), (1, 0)])
def test_matches_lower_right_causal_attention(q_len, past, batch):
    gen = torch.Generator().manual_seed(q_len * 100 + past)
    query = torch.randn(batch, 4, q_len, 8, generator=gen, dtype=torch.float64)
    key = torch.randn(batch, 2, past + q_len, 8, generator=gen, dtype=torch.float64)
    value = torch.randn(batch, 2, past + q_len, 8, generator=gen, dtype=torch.float64)
    out, _ = chunk_attention(_Module(), query, key, value, None, scaling=8 ** -0.5)
    torch.testing.assert_close(out, _by_hand(query, key, value), rtol=0, atol=1e-12)


@pytest.mark.parametrize("q_block", [1, 2, 3, 7])
def test_query_blocks_of_the_masked_branch_match(q_block, monkeypatch):
    """A long past with the queries in blocks of ``Q_BLOCK`` (bounded mask): the same attention."""
    monkeypatch.setattr("interp.sensor.kernels.chunk_attention.Q_BLOCK", q_block)
    gen = torch.Generator().manual_seed(q_block)
    query = torch.randn(1, 4, 7, 8, generator=gen, dtype=torch.float64)
    key = torch.randn(1, 2, 47, 8, generator=gen, dtype=torch.float64)
    value = torch.randn(1, 2, 47, 8, generator=gen, dtype=torch.float64)
    out, _ = chunk_attention(_Module(), query, key, value, None, scaling=8 ** -0.5)
    torch.testing.assert_close(out, _by_hand(query, key, value), rtol=0, atol=1e-12)


def test_grouped_cpu_branch_equals_transformers_repeated_kv():
    """The masked branch's grouped K/V on CPU (``enable_gqa``) gives transformers' repeated-K/V sdpa, float32."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    gen = torch.Generator().manual_seed(5)
    query = torch.randn(2, 8, 16, 32, generator=gen)
    key, value = (torch.randn(2, 2, 16 + 300, 32, generator=gen) for _ in range(2))
    module = _Module()
    module.num_key_value_groups = 4
    out, _ = chunk_attention(module, query, key, value, None, scaling=0.3, dropout=0.0)
    mask = torch.ones(16, 316, dtype=torch.bool).tril(300)[None, None]
    ref, _ = sdpa_attention_forward(module, query, key, value, mask, is_causal=False, scaling=0.3, dropout=0.0)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


def test_refuses_masks():
    x = torch.zeros(2, 2, 3, 8)
    with pytest.raises(ValueError, match="without a mask"):
        chunk_attention(_Module(), x, x, x, torch.ones(2, 1, 3, 3, dtype=torch.bool))


@pytest.mark.parametrize("cuts", [[3], [40], [3, 60, 61], [20, 50]])
def test_chunked_forward_equals_whole_hf_forward(tiny_sensor_fp64, cuts):
    """Cuts that take each branch (padded, masked, one token) give the whole forward's log-probs."""
    model = tiny_sensor_fp64.hf_model
    ids = torch.randint(0, model.config.vocab_size, (64,), generator=torch.Generator().manual_seed(5)).tolist()
    positions = [2, 30, 59, 60, 63]
    out = run_plan(tiny_sensor_fp64, ids, Plan(logprobs=positions, cuts=cuts))
    with torch.inference_mode():
        whole = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0], -1)
    for p in positions:
        torch.testing.assert_close(out.logprobs[p], whole[p], rtol=0, atol=1e-10)
