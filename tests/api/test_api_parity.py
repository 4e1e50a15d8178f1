"""The fast ``run_with_cache`` / ``run_with_hooks`` against the TransformerLens bridge, on four decoder families.

Reference: the bridge's own ``run_with_cache`` / ``run_with_hooks`` (eager
attention, the full N x N pattern), sliced at the same positions. Tolerance:
relative Frobenius error <= 1e-5 per name in float32 (the two paths differ
only in the attention kernel, sdpa vs eager). Models: the hybrid tiny Qwen3.5
(Gated-DeltaNet + gated full attention), real SmolLM2-135M (Llama layout,
GQA), and random-init GPT-2 (fused qkv, LayerNorm) and Llama checkpoints
loaded from a local directory with ``load_model(path)``.
"""

from __future__ import annotations

import pytest
import torch

from interp.sensor.hooks import served_names

pytestmark = pytest.mark.parity

MODELS = ["tiny-qwen3.5", pytest.param("smollm2-135m", marks=pytest.mark.slow), "gpt2", "llama"]
FIXTURE = {"tiny-qwen3.5": "tiny_sensor", "smollm2-135m": "smol_sensor", "gpt2": "gpt2_sensor", "llama": "llama_sensor"}
POSITIONS = [2, 17, -1]


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    return request.getfixturevalue(FIXTURE[request.param])


def _ids(sensor, n: int = 40) -> torch.Tensor:
    g = torch.Generator().manual_seed(7)
    return torch.randint(3, sensor.hf_model.config.vocab_size, (1, n), generator=g)


def _bridge_value(sensor, cache, name: str) -> torch.Tensor:
    """The bridge's activation for a fast-path name (linear-attention layers expose attn_out as linear_attn.hook_out)."""
    found = cache.cache_dict.get(name)
    if found is None and name.endswith("hook_attn_out"):
        found = cache.cache_dict[name.replace("hook_attn_out", "linear_attn.hook_out")]
    return found


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def test_fast_cache_equals_bridge_on_every_served_name(model):
    ids = _ids(model)
    n = ids.shape[1]
    pos = [p % n for p in POSITIONS]
    logits, fast = model.run_with_cache(ids, positions=POSITIONS)
    with torch.inference_mode():
        ref_logits, ref = model.bridge.run_with_cache(ids)
    names = served_names(model.hf_model)
    assert list(fast.keys()) == names
    assert any(k.endswith("hook_pattern") for k in names) and any(k.endswith("attn.hook_z") for k in names)
    assert _rel(logits, ref_logits[:, pos]) <= 1e-5
    bad = {}
    for name in names:
        want = _bridge_value(model, ref, name)
        want = want[:, :, pos] if name.endswith("hook_pattern") else want[:, pos]
        assert fast[name].shape == want.shape, name
        if (err := _rel(fast[name], want)) > 1e-5:
            bad[name] = err
    assert not bad, f"fast vs bridge relative error > 1e-5: {bad}"
    # Sensitivity: the rows of other positions would not pass.
    shifted = [p - 1 for p in pos]
    assert _rel(fast["blocks.1.hook_resid_pre"], ref["blocks.1.hook_resid_pre"][:, shifted]) > 1e-2


def test_default_cache_keeps_only_the_last_row(model):
    ids = _ids(model)
    logits, fast = model.run_with_cache(ids, names_filter=lambda name: "resid" in name)
    assert logits.shape[:2] == (1, 1)
    assert fast.keys() and all(fast[k].shape[:2] == (1, 1) for k in fast.keys())
    assert "resid_pre" in next(iter(fast.keys()))
    assert torch.equal(fast["resid_pre", 0], fast["blocks.0.hook_resid_pre"])  # TL shorthand keys


def test_a_transformer_lens_hook_runs_unchanged_on_both(model):
    """One TL-style function (reads hook.name and hook.layer()) patches both paths the same way."""
    ids = _ids(model)
    seen: dict[str, list[str]] = {"bridge": [], "fast": []}
    attn_layer = next(i for i, t in enumerate(model.layer_types) if t == "full_attention")

    def make(log: list[str]):
        def scale(activation: torch.Tensor, hook) -> torch.Tensor:
            log.append(hook.name)
            out = activation.clone()
            if activation.dim() == 4:  # [batch, pos, head, d_head]
                out[:, :, 0] = 0.0  # ablate head 0
            else:
                out[:, -1] = out[:, -1] * (0.5 + 0.1 * hook.layer())
            return out
        return scale

    names = [f"blocks.{attn_layer}.attn.hook_z", f"blocks.{model.n_layers - 1}.hook_resid_pre"]
    with torch.inference_mode():
        ref = model.bridge.run_with_hooks(ids, fwd_hooks=[(n, make(seen["bridge"])) for n in names])[:, -1]
        clean = model.bridge(ids)[:, -1]
    fast = model.run_with_hooks(ids, fwd_hooks=[(n, make(seen["fast"])) for n in names])[:, -1]
    assert seen["fast"] == names  # the bridge reports aliases by their target (hook_z -> attn.o.hook_in)
    assert [n.split(".")[1] for n in seen["bridge"]] == [n.split(".")[1] for n in names]
    assert _rel(fast, ref) <= 1e-5
    assert _rel(clean, ref) > 1e-3  # the hook changed the output


def test_hooks_context_runs_tl_functions_on_any_forward(model):
    """``interp.hooks(sensor, ...)`` around a user's own HF forward: the same rows as ``run_with_cache``."""
    import interp

    ids = _ids(model)
    names = ["blocks.0.hook_resid_post", f"blocks.{model.n_layers - 1}.mlp.hook_post"]
    got = {}

    def keep(activation, hook):
        got[hook.name] = (hook.layer(), activation[:, -1].clone())

    with torch.inference_mode(), interp.hooks(model, [(n, keep) for n in names]):
        model.hf_model(ids)
    _, cache = model.run_with_cache(ids, names_filter=names)
    assert list(got) == names
    for name in names:
        assert got[name][0] == int(name.split(".")[1])
        torch.testing.assert_close(got[name][1], cache[name][:, 0], rtol=0, atol=0)
    with torch.inference_mode():
        model.hf_model(ids)
    assert len(got) == 2  # removed on exit
