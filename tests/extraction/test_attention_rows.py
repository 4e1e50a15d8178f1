"""O(N) boundary attention rows (``interp.sensor.kernels.attention_rows`` through ``run_plan``) vs the eager pattern.

Reference: the bridge's ``run_with_cache`` with ``blocks.{l}.attn.hook_pattern``
(eager attention, the full [heads, N, N] pattern), on a short real prompt (the
first tokens of the mini render) so the pattern has realistic structure.
Rows are probabilities in [0, 1]: tolerance 1e-5 absolute. Checked at every
full-attention layer: tiny-qwen3.5 layers 3 and 7 (the hybrid), all 30 SmolLM2
layers; the last row and an interior row, with the interior query's chunk
followed by a later chunk that reads its keys from the cache.

A row at query p makes ``run_plan`` cut after p. On tiny-qwen3.5 the interior
query is 63, so that cut (64) keeps the 64-token chunk alignment of HF's
Gated-DeltaNet kernel; a mis-aligned cut moves everything downstream by up to
~2e-4 x max through that kernel's fp32 conditioning on random-init keys (see
``test_run_plan``), which is not what this test is about. SmolLM2 has no such
kernel and gets arbitrary cuts and queries.
"""

from __future__ import annotations

import pytest
import torch

from interp.extraction.extract import ExtractConfig, extract_trajectory
from interp.sensor.forward import Plan, run_plan
from interp.data.render import render

pytestmark = pytest.mark.parity

N_TOKENS = 120


@pytest.fixture(scope="module")
def patterns(sensor, mini_trajectory):
    """(sensor, ids, {layer: eager pattern [heads, N, N]}) at every full-attention layer."""
    ids = render(mini_trajectory, 2, sensor.tokenizer).input_ids[:N_TOKENS]
    names = {f"blocks.{l}.attn.hook_pattern" for l in sensor.full_attention_layers}
    with torch.inference_mode():
        _, cache = sensor.bridge.run_with_cache(torch.tensor([ids]), names_filter=lambda n: n in names)
    return sensor, ids, {l: cache[f"blocks.{l}.attn.hook_pattern"][0].float() for l in sensor.full_attention_layers}


@pytest.mark.slow  # loads real SmolLM2 weights
def test_full_attention_layers_are_the_documented_ones(tiny_sensor, smol_sensor):
    assert tiny_sensor.full_attention_layers == [3, 7]
    assert smol_sensor.full_attention_layers == list(range(30))


def test_boundary_rows_equal_eager_pattern(patterns):
    sensor, ids, pats = patterns
    n = len(ids)
    if sensor.spec == "tiny-qwen3.5":
        queries, cuts = (n - 1, 63), [64]
    else:
        queries, cuts = (n - 1, n // 2 - 5, 3), [n // 4]
    out = run_plan(sensor, ids, Plan(rows={(l, p): p for l in pats for p in queries}, cuts=cuts))
    assert set(out.rows) == set(queries)
    last = n - 1
    for p in queries:
        assert set(out.rows[p]) == set(pats), f"row {p}: missing layers"
        for layer, pat in pats.items():
            row = out.rows[p][layer]
            assert row.dtype == torch.float32
            assert row.shape == (pat.shape[0], p + 1), (layer, p, row.shape)
            torch.testing.assert_close(row, pat[:, p, : p + 1], rtol=0, atol=1e-5,
                                       msg=lambda m, layer=layer, p=p: f"layer {layer}, query {p}: {m}")
            assert float(pat[:, p, p + 1:].abs().sum()) == 0.0  # causal: nothing right of the query
    # Sensitivity: the neighbouring query's row is far from this one.
    layer = sensor.full_attention_layers[-1]
    assert float((out.rows[last][layer][:, :-1] - pats[layer][:, last - 1, :last]).abs().max()) > 1e-3


def test_rows_from_a_snapshot_continuation_equal_eager(patterns):
    """The last row computed in a suffix run started from a snapshot (keys of the prefix come from the copied cache)."""
    sensor, ids, pats = patterns
    n = len(ids)
    cut = 64 if sensor.spec == "tiny-qwen3.5" else 37
    base = run_plan(sensor, ids[:cut], Plan(snapshots=[cut]))
    out = run_plan(sensor, ids[cut:], Plan(rows={(l, n - 1): "b" for l in pats}), start=base.snapshots[cut])
    for layer, pat in pats.items():
        torch.testing.assert_close(out.rows["b"][layer], pat[:, n - 1], rtol=0, atol=1e-5)


def test_row_at_linear_attention_layer_is_refused(tiny_sensor, mini_trajectory):
    ids = list(range(5, 45))
    for layer in tiny_sensor.linear_attention_layers:
        with pytest.raises(ValueError, match=rf"layer {layer} .*linear attention"):
            run_plan(tiny_sensor, ids, Plan(rows={(layer, 39): "b"}))
    with pytest.raises(ValueError, match="linear attention"):
        extract_trajectory(tiny_sensor, mini_trajectory, "full", ExtractConfig(layers=[0], attention_layers=[2]),
                           boundaries=[1])
