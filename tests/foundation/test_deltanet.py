"""The float64 gated delta rule against transformers' float32 kernels, and a float64 model's cache exactness."""

from __future__ import annotations

import pytest
import torch
import transformers.models.qwen3_5.modeling_qwen3_5 as qwen

from interp.sensor.kernels.deltanet import float64_kernels, gated_delta_rule_fp64

pytestmark = pytest.mark.parity


def _inputs(seq: int, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    batch, k_heads, v_heads, d_k, d_v = 2, 2, 4, 8, 6
    return {
        "query": torch.randn(batch, seq, k_heads, d_k, generator=gen, dtype=torch.float64),
        "key": torch.randn(batch, seq, k_heads, d_k, generator=gen, dtype=torch.float64),
        "value": torch.randn(batch, seq, v_heads, d_v, generator=gen, dtype=torch.float64),
        "g": -torch.rand(batch, seq, v_heads, generator=gen, dtype=torch.float64),
        "beta": torch.rand(batch, seq, v_heads, generator=gen, dtype=torch.float64),
    }


def _original(name: str):
    kernel = getattr(qwen, name)
    return kernel.__wrapped__ if getattr(kernel, "float64_aware", False) else kernel


@pytest.mark.parametrize("name", ["torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule"])
def test_matches_transformers_float32_kernels(name):
    x = _inputs(70)  # 70 > one 64-token chunk
    state0 = torch.randn(2, 4, 8, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ours, ours_state = gated_delta_rule_fp64(**x, initial_state=state0, output_final_state=True,
                                             use_qk_l2norm_in_kernel=True)
    theirs, theirs_state = _original(name)(**{k: v.float() for k, v in x.items()}, initial_state=state0.float(),
                                           output_final_state=True, use_qk_l2norm_in_kernel=True)
    assert ours.dtype == torch.float64
    torch.testing.assert_close(ours.float(), theirs, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ours_state.float(), theirs_state, rtol=1e-4, atol=1e-4)


def test_prefix_then_continuation_is_exact_in_float64():
    x = _inputs(40, seed=2)
    whole, _ = gated_delta_rule_fp64(**x)
    head, state = gated_delta_rule_fp64(**{k: v[:, :25] for k, v in x.items()}, output_final_state=True)
    tail, _ = gated_delta_rule_fp64(**{k: v[:, 25:] for k, v in x.items()}, initial_state=state)
    torch.testing.assert_close(torch.cat([head, tail], 1), whole, rtol=0, atol=1e-13)


def test_dispatch_leaves_other_dtypes_to_transformers():
    with float64_kernels(), float64_kernels():  # re-entrant: one wrapper, not two
        kernel = qwen.torch_chunk_gated_delta_rule
        assert kernel.float64_aware and not getattr(kernel.__wrapped__, "float64_aware", False)
        x32 = {k: v.float() for k, v in _inputs(10).items()}
        out, _ = kernel(**x32, use_qk_l2norm_in_kernel=True)
    expected, _ = _original("torch_chunk_gated_delta_rule")(**x32, use_qk_l2norm_in_kernel=True)
    assert torch.equal(out, expected)
    assert not getattr(qwen.torch_chunk_gated_delta_rule, "float64_aware", False)  # restored on exit
    with pytest.raises(NotImplementedError, match="cu_seqlens"):
        gated_delta_rule_fp64(**_inputs(3), cu_seqlens=torch.tensor([0, 3]))


def test_float64_hybrid_cache_continuation_equals_whole_forward(tiny_sensor_fp64):
    """A whole forward vs the same tokens as prefix + one-token cached steps: equal to float64 round-off."""
    model = tiny_sensor_fp64.hf_model
    ids = torch.randint(0, model.config.vocab_size, (1, 30), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        whole = model(input_ids=ids).logits[0]
        out = model(input_ids=ids[:, :27], use_cache=True)
        steps = [out.logits[0]]
        cache = out.cache
        for t in range(27, 30):
            out = model(input_ids=ids[:, t:t + 1], cache=cache, use_cache=True)
            steps.append(out.logits[0])
    torch.testing.assert_close(torch.cat(steps), whole, rtol=0, atol=1e-10)
