"""SAEs in SAELens' directory format: the files as SAELens v6 documents them, encode against a hand computation,
the small trainer, the spliced KL, and ``interp extract --sae`` storing what ``encode`` gives on the stored residual.

SAELens itself cannot be imported beside transformer-lens 4.3 (``interp.sensor.sae``), so the reference for
the format is SAELens' own declaration (sae_lens v6 ``constants.py``: ``cfg.json`` and
``sae_weights.safetensors``; ``saes/sae.py`` ``SAEConfig`` fields d_in, d_sae, dtype, device,
apply_b_dec_to_input, normalize_activations, reshape_activations, metadata, architecture; ``TopKSAEConfig.k``;
tensors W_enc [d_in, d_sae], W_dec [d_sae, d_in], b_enc, b_dec, and threshold for JumpReLU)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from interp.extraction.batch import extract_to_store
from interp.extraction.extract import ExtractConfig
from interp.extraction.store import Store
from interp.params import ConfigError
from interp.sensor.sae import SparseAutoencoder, fvu, load_sae, save_sae, spliced_kl, train_sae

pytestmark = pytest.mark.unit

V6_FIELDS = {"architecture", "d_in", "d_sae", "dtype", "device", "apply_b_dec_to_input", "normalize_activations",
             "reshape_activations", "metadata"}


def _random_sae(arch: str, d_in: int = 6, d_sae: int = 10, seed: int = 0, hook: str = "blocks.2.hook_resid_pre"):
    g = torch.Generator().manual_seed(seed)
    return SparseAutoencoder(torch.randn(d_in, d_sae, generator=g), torch.randn(d_sae, d_in, generator=g),
                             torch.randn(d_sae, generator=g), torch.randn(d_in, generator=g), hook, arch,
                             3 if arch == "topk" else None,
                             torch.rand(d_sae, generator=g) if arch == "jumprelu" else None)


@pytest.mark.parametrize("arch", ["standard", "topk", "jumprelu"])
def test_files_follow_saelens_v6_and_round_trip(tmp_path, arch):
    sae = _random_sae(arch)
    save_sae(sae, tmp_path)
    cfg = json.loads((tmp_path / "cfg.json").read_text())
    assert V6_FIELDS <= set(cfg) and cfg["architecture"] == arch
    assert cfg["metadata"]["hook_name"] == "blocks.2.hook_resid_pre"
    assert ("k" in cfg) == (arch == "topk")
    weights = load_file(tmp_path / "sae_weights.safetensors")
    expected = {"W_enc": (6, 10), "W_dec": (10, 6), "b_enc": (10,), "b_dec": (6,)}
    if arch == "jumprelu":
        expected["threshold"] = (10,)
    assert {k: tuple(v.shape) for k, v in weights.items()} == expected
    back = load_sae(tmp_path)
    x = torch.randn(4, 6)
    assert torch.equal(back.encode(x), sae.encode(x))


@pytest.mark.parametrize("arch", ["standard", "topk", "jumprelu"])
def test_encode_matches_hand_computation(arch):
    sae = _random_sae(arch, seed=3)
    x = np.random.default_rng(1).normal(size=(5, 6))
    W_enc, b_enc, b_dec = (t.double().numpy() for t in (sae.W_enc, sae.b_enc, sae.b_dec))
    pre = (x - b_dec) @ W_enc + b_enc
    if arch == "jumprelu":
        ref = np.where(pre > sae.threshold.double().numpy(), pre, 0.0)
    else:
        ref = np.maximum(pre, 0.0)
        if arch == "topk":
            for row in ref:
                row[np.argsort(-row)[3:]] = 0.0
    np.testing.assert_allclose(sae.encode(torch.tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-5)
    recon = ref @ sae.W_dec.double().numpy() + b_dec
    np.testing.assert_allclose(sae.decode(sae.encode(torch.tensor(x))).numpy(), recon, rtol=1e-4, atol=1e-4)


def test_pre_v6_files_load(tmp_path):
    """SAELens before v6 kept hook_name at the top level and k in activation_fn_kwargs."""
    sae = _random_sae("topk")
    save_sae(sae, tmp_path)
    cfg = json.loads((tmp_path / "cfg.json").read_text())
    old = {k: v for k, v in cfg.items() if k not in ("metadata", "k")}
    old |= {"hook_name": "blocks.2.hook_resid_pre", "activation_fn_str": "topk", "activation_fn_kwargs": {"k": 3}}
    (tmp_path / "cfg.json").write_text(json.dumps(old))
    assert load_sae(tmp_path).k == 3 and load_sae(tmp_path).site == ("resid_pre", 2)


@pytest.mark.parametrize(("field", "value"), [("normalize_activations", "layer_norm"), ("architecture", "gated"),
                                              ("d_sae", 11)])
def test_unserved_files_are_refused_naming_the_field(tmp_path, field, value):
    save_sae(_random_sae("standard"), tmp_path)
    cfg = json.loads((tmp_path / "cfg.json").read_text()) | {field: value}
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=field if field != "d_sae" else "W_enc"):
        load_sae(tmp_path)


def test_trainer_recovers_a_sparse_dictionary():
    """Rows made of 2 of 12 dictionary directions: a k=2 SAE of 24 features explains them; k=1 cannot fully."""
    g = torch.Generator().manual_seed(0)
    atoms = torch.randn(12, 16, generator=g)
    codes = torch.zeros(400, 12)
    for i in range(400):
        idx = torch.randperm(12, generator=g)[:2]
        codes[i, idx] = torch.rand(2, generator=g) + 0.5
    x = codes @ atoms
    good = train_sae(x, 24, 2, "blocks.0.hook_resid_pre", steps=400, lr=1e-2)
    worse = train_sae(x, 24, 1, "blocks.0.hook_resid_pre", steps=400, lr=1e-2)
    assert fvu(x, good.reconstruct(x)) < 0.15
    assert fvu(x, good.reconstruct(x)) < fvu(x, worse.reconstruct(x))


def test_spliced_kl_is_zero_for_an_exact_sae_and_matches_a_zero_ablation(tiny_sensor):
    d = tiny_sensor.d_model
    eye = torch.eye(d)
    exact = SparseAutoencoder(torch.cat([eye, -eye], 1), torch.cat([eye, -eye], 0), torch.zeros(2 * d),
                              torch.zeros(d), "blocks.3.hook_resid_post", "standard")  # relu(x) - relu(-x) = x
    ids = torch.randint(10, 500, (40,), generator=torch.Generator().manual_seed(2))
    assert spliced_kl(tiny_sensor, ids, exact) == pytest.approx(0.0, abs=1e-6)
    zero = SparseAutoencoder(torch.zeros(d, 4), torch.zeros(4, d), torch.zeros(4), torch.zeros(d),
                             "blocks.3.hook_resid_post", "standard")
    clean = tiny_sensor.run_with_hooks(ids[None]).float().log_softmax(-1)[0, -1]
    ablated = tiny_sensor.run_with_hooks(ids[None], fwd_hooks=[("blocks.3.hook_resid_post",
                                                                lambda x, hook: torch.zeros_like(x))])
    logq = ablated.float().log_softmax(-1)[0, -1]
    ref = float((clean.exp() * (clean - logq)).sum())
    assert ref > 1e-3
    assert spliced_kl(tiny_sensor, ids, zero) == pytest.approx(ref, rel=1e-5)


def test_extract_stores_the_top_features_of_the_stored_residual(tiny_sensor, mini_trajectory, tmp_path):
    sae = train_sae(torch.randn(64, tiny_sensor.d_model), 32, 4, "blocks.3.hook_resid_pre", steps=20)
    folder = save_sae(sae, tmp_path / "sae")
    config = ExtractConfig(layers=(3,), poolings=("last", "mean_reasoning"), sae=str(folder), sae_top_k=6)
    extract_to_store(tiny_sensor, [mini_trajectory], ["full"], config, tmp_path / "store", progress=False)
    store = Store(tmp_path / "store")
    frame, features = store.load_features("resid_pre", "full")
    _, codes = store.load_sae_features("full")
    for pooling in ("last", "mean_reasoning"):
        x = torch.from_numpy(features[(3, pooling)])
        f = sae.encode(x)
        values, _ = f.topk(6, dim=-1)
        np.testing.assert_allclose(codes[pooling]["values"], values.numpy(), rtol=1e-6, atol=1e-6)
        picked = np.take_along_axis(f.numpy(), codes[pooling]["ids"], axis=1)
        np.testing.assert_allclose(picked, codes[pooling]["values"], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(codes[pooling]["sq_err"], ((x - sae.decode(f)) ** 2).sum(-1).numpy(), rtol=1e-5)
    assert (frame["sae_kl_nats"] >= 0).all() and frame["sae_kl_nats"].notna().all()
    assert store.settings()["sae"]["hook_name"] == "blocks.3.hook_resid_pre"


def test_an_sae_at_a_hook_not_extracted_is_refused(tiny_sensor, tmp_path):
    folder = save_sae(_random_sae("topk", d_in=tiny_sensor.d_model, hook="blocks.5.hook_resid_pre"), tmp_path)
    with pytest.raises(ConfigError, match="sae: .*blocks.5.hook_resid_pre"):
        ExtractConfig(layers=(3,), sae=str(folder)).check_sensor(tiny_sensor)
    with pytest.raises(ConfigError, match="sae"):
        ExtractConfig(layers=(3,), sae=str(tmp_path / "nothing"))
