"""Parity of the hooked residual stream with the plain HF model and with the TransformerLens bridge.

References: HF ``output_hidden_states`` of a single forward (``hidden_states[l]``
is the input of decoder layer l; the last one is *after* the final norm), and
the bridge's ``run_with_cache`` at the same TransformerLens names.

Tolerances (fp32): the plain hooked path and ``output_hidden_states`` read the
same tensors (1e-6 x max|x|); bridge vs plain under eager attention run the
same kernels (1e-4 absolute on logits, 1e-5 x max|x| on residuals, whose
SmolLM2 magnitude reaches ~2.4e4); bridge (eager) vs plain sdpa differ by
kernel rounding only (2e-5 x max|logit|, measured ~4e-6).
"""

from __future__ import annotations

import pytest
import torch

from interp.sensor.hooks import hook_name, hooks, plain_attention

from ._reference import close_to_max, hf_forward, not_close

pytestmark = pytest.mark.parity


def _capture(model, names, ids, attention: str | None = None):
    """Capture every name in one forward of the plain model; returns (captures, logits)."""
    got: dict[str, torch.Tensor] = {}

    def fn(x, name):
        got[name] = x[0].detach().float().clone()

    ids_t = torch.as_tensor(ids).reshape(1, -1)
    with torch.inference_mode(), hooks(model, [(n, fn) for n in names]):
        if attention is None:
            logits = model(input_ids=ids_t, use_cache=False).logits[0].float()
        else:
            with plain_attention(model, attention):
                logits = model(input_ids=ids_t, use_cache=False).logits[0].float()
    return got, logits


def _resid_names(n_layers: int) -> list[str]:
    return ([hook_name("resid_pre", l) for l in range(n_layers)]
            + [hook_name("resid_post", l) for l in range(n_layers)] + ["ln_final.hook_out"])


def test_hooked_residuals_equal_output_hidden_states(sensor, short_ids):
    L = sensor.n_layers
    ref = hf_forward(sensor, short_ids)
    assert len(ref.hidden) == L + 1
    got, logits = _capture(sensor.hf_model, _resid_names(L), short_ids)
    assert set(got) == set(_resid_names(L)), "a requested hook did not fire"
    for l in range(L):
        close_to_max(got[hook_name("resid_pre", l)], ref.hidden[l], 1e-6, f"resid_pre {l}")
    for l in range(L - 1):
        close_to_max(got[hook_name("resid_post", l)], ref.hidden[l + 1], 1e-6, f"resid_post {l}")
    close_to_max(got["ln_final.hook_out"], ref.hidden[L], 1e-6, "ln_final.hook_out")
    close_to_max(logits, ref.logits, 1e-6, "logits under hooks")
    # The last HF hidden state is post-norm: the pre-norm last residual is not it, but normalising it gives it.
    last_post = got[hook_name("resid_post", L - 1)]
    assert not_close(last_post, ref.hidden[L], 1e-3)
    with torch.inference_mode():
        normed = sensor.hf_model.model.norm(last_post[None])[0]
    close_to_max(normed, ref.hidden[L], 1e-5, "norm(resid_post[L-1])")
    # Sensitivity: an off-by-one layer mapping would be caught.
    assert not_close(got[hook_name("resid_pre", 1)], ref.hidden[2], 1e-3)


def test_attn_and_mlp_out_add_up_to_the_residual_update(sensor, short_ids):
    """Pre-norm decoder: resid_post = resid_pre + attn_out + mlp_out (an algebraic reference)."""
    L = sensor.n_layers
    layers = sorted({0, 1, L // 2, L - 1} | set(sensor.full_attention_layers[:1]))
    names = [hook_name(s, l) for l in layers for s in ("resid_pre", "resid_post", "attn_out", "mlp_out")]
    got, _ = _capture(sensor.hf_model, names, short_ids)
    for l in layers:
        update = got[hook_name("resid_post", l)] - got[hook_name("resid_pre", l)]
        summed = got[hook_name("attn_out", l)] + got[hook_name("mlp_out", l)]
        close_to_max(summed, update, 1e-5, f"attn_out+mlp_out layer {l}",
                     scale=max(float(got[hook_name("resid_post", l)].abs().max()), 1.0))
        assert not_close(got[hook_name("attn_out", l)], update, 1e-3)  # both parts matter


def test_bridge_cache_equals_plain_model(sensor, short_ids):
    """Bridge logits and run_with_cache residuals vs the plain model (eager: same kernels; sdpa: rounding)."""
    L = sensor.n_layers
    names = _resid_names(L)
    ids_t = torch.as_tensor(short_ids).reshape(1, -1)
    with torch.inference_mode():
        bridge_logits, cache = sensor.bridge.run_with_cache(ids_t, names_filter=lambda n: n in set(names))
    bridge_logits = bridge_logits[0].float()
    eager, eager_logits = _capture(sensor.hf_model, names, short_ids, attention="eager")
    assert sensor.hf_model.config._attn_implementation == "sdpa", "plain_attention did not restore sdpa"
    # Scaled to the dtype and the logits' size (a fixed 1e-4 held on one machine's float32 kernels only).
    atol = 100 * torch.finfo(sensor.dtype).eps * float(eager_logits.abs().max())
    torch.testing.assert_close(bridge_logits, eager_logits, rtol=0, atol=atol)
    for name in names:
        close_to_max(cache[name][0].float(), eager[name], 1e-5, f"bridge {name} vs plain eager")
    ref = hf_forward(sensor, short_ids)  # plain model, its default sdpa attention
    close_to_max(bridge_logits, ref.logits, 2e-5, "bridge logits vs plain sdpa")
    for l in range(L):
        close_to_max(cache[hook_name("resid_pre", l)][0].float(), ref.hidden[l], 2e-5, f"bridge resid_pre {l} vs sdpa")
    close_to_max(cache["ln_final.hook_out"][0].float(), ref.hidden[L], 2e-5, "bridge ln_final vs sdpa")


def test_hooks_are_removed_and_bad_names_refused(tiny_sensor):
    model = tiny_sensor.hf_model
    calls = []
    ids = torch.arange(5, 25).reshape(1, -1)
    with torch.inference_mode():
        with hooks(model, [("blocks.0.hook_resid_pre", lambda x, n: calls.append(n))]):
            model.model(input_ids=ids)
        assert calls == ["blocks.0.hook_resid_pre"]
        model.model(input_ids=ids)
    assert calls == ["blocks.0.hook_resid_pre"], "a hook survived its context"
    with pytest.raises(ValueError, match="not served"):
        with hooks(model, [("blocks.0.attn.hook_pattern", lambda x, n: None)]):
            pass
    with pytest.raises(ValueError, match="out of range"):
        with hooks(model, [(f"blocks.{tiny_sensor.n_layers}.hook_resid_pre", lambda x, n: None)]):
            pass


def test_hook_return_value_replaces_the_activation(tiny_sensor):
    """A returned tensor patches the stream (checked against unpatched forwards computed by hand)."""
    model = tiny_sensor.hf_model
    L = tiny_sensor.n_layers
    ids = torch.arange(3, 40).reshape(1, -1)
    other = torch.arange(100, 137).reshape(1, -1)
    g = torch.Generator().manual_seed(3)
    with torch.inference_mode():
        # resid_pre of layer 0 is the embedding: feeding another sequence's embedding gives its logits.
        other_embed = model.model.embed_tokens(other)
        with hooks(model, [(hook_name("resid_pre", 0), lambda x, n: other_embed)]):
            patched = model(input_ids=ids).logits[0]
        close_to_max(patched, model(input_ids=other).logits[0], 1e-5, "patched resid_pre 0")
        # resid_post of the last layer replaced by R: logits are lm_head(norm(R)).
        R = torch.randn(1, ids.shape[1], tiny_sensor.d_model, generator=g)
        with hooks(model, [(hook_name("resid_post", L - 1), lambda x, n: R)]):
            patched = model(input_ids=ids).logits[0]
        close_to_max(patched, model.lm_head(model.model.norm(R))[0], 1e-5, "patched resid_post L-1")
        assert not_close(patched, model(input_ids=ids).logits[0], 1e-3)
