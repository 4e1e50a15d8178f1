"""Fixtures of the public-API tests: GPT-2-style and Llama-style random-init checkpoints, saved in tmp and loaded by path."""

from __future__ import annotations

import pytest


def _save_random(path, config, seed: int):
    """A seeded random-init causal LM of ``config`` with the tiny-qwen3.5 tokenizer, saved to ``path``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from interp.sensor.specs import SPECS

    tokenizer = AutoTokenizer.from_pretrained(SPECS["tiny-qwen3.5"].fetch())
    config.vocab_size = len(tokenizer)
    config.eos_token_id = config.bos_token_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def gpt2_sensor(tmp_path_factory):
    """A 3-layer GPT-2 (fused qkv Conv1D, LayerNorm, learned positions), loaded with ``load_model(path)``."""
    from transformers import GPT2Config

    from interp.sensor.models import load_model

    config = GPT2Config(n_layer=3, n_embd=48, n_head=4, n_positions=512, initializer_range=0.2)
    return load_model(str(_save_random(tmp_path_factory.mktemp("gpt2"), config, seed=5)))


@pytest.fixture(scope="session")
def llama_sensor(tmp_path_factory):
    """A 3-layer Llama (GQA 4 heads / 2 KV heads, gated MLP, RMSNorm, rotary), loaded with ``load_model(path)``."""
    from transformers import LlamaConfig

    from interp.sensor.models import load_model

    config = LlamaConfig(hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.2)
    return load_model(str(_save_random(tmp_path_factory.mktemp("llama"), config, seed=6)))
