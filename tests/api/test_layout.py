"""Module paths from the bridge's architecture adapters, and the error for a model without one."""

from __future__ import annotations

import pytest
import torch

from interp.sensor.layout import layout, supported_families

pytestmark = pytest.mark.unit


def test_layouts_of_three_families(tiny_sensor, gpt2_sensor, llama_sensor):
    q, g, l = (layout(s.hf_model) for s in (tiny_sensor, gpt2_sensor, llama_sensor))
    assert (g.layers, g.final_norm, g.qkv, g.q, g.o, g.mlp_out) == ("transformer.h", "transformer.ln_f", "c_attn",
                                                                     None, "c_proj", "c_proj")
    assert (l.layers, l.final_norm, l.q, l.qkv, l.mlp_out, l.linear_attn) == ("model.layers", "model.norm", "q_proj",
                                                                              None, "down_proj", None)
    assert q.linear_attn == "linear_attn" and q.attn == "self_attn"
    assert gpt2_sensor.n_layers == 3 and gpt2_sensor.d_model == 48


def test_an_unsupported_model_names_the_supported_families():
    class Mystery(torch.nn.Module):
        config = type("Config", (), {"architectures": None})()

    with pytest.raises(ValueError, match=r"'Mystery' has no TransformerLens architecture adapter.*GPT2.*Llama"):
        layout(Mystery())
    assert {"GPT2LMHeadModel", "LlamaForCausalLM", "Qwen3_5ForCausalLM"} <= set(supported_families())


def test_load_model_refuses_a_family_without_an_adapter(tmp_path):
    from transformers import BioGptConfig

    from interp.sensor.models import load_model

    from tests.conftest import _save_random

    config = BioGptConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    path = _save_random(tmp_path / "biogpt", config, seed=1)
    with pytest.raises(ValueError, match=r"'BioGptForCausalLM' has no TransformerLens architecture adapter; "
                                         r"supported decoder families: .*Llama"):
        load_model(str(path))
