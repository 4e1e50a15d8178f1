"""The hooked loader: ``load_model(spec) -> LoadedSensor`` (a :class:`~interp.sensor.protocol.Sensor`).

A spec is a name from ``interp.sensor.specs.SPECS`` (``interp models`` lists
them with their offline availability: ``smollm2-135m``, ``tiny-qwen3.5``,
``qwen3.5-9b``) or any local HF directory. Loading is offline unless
``allow_download``. A float64 model runs its Gated-DeltaNet layers in float64
(``interp.sensor.kernels.deltanet.bind_float64_kernels``, scoped to that
model's own forwards).

Weights load straight onto ``device`` (``from_pretrained(device_map=device)``:
safetensors shards are read into device memory, no full host copy of the
model is made). The default dtype (``auto``) is float32, on CUDA too: an
analysis that allows bfloat16 says so in its config (``precision``), and its
stage or command loads the sensor in that dtype (``interp.pipelines.configs``). The final norm, the unembedding, log-softmax, KL,
entropy and NLL are float32 whatever the model dtype (``interp.sensor.unembed``).
``LoadedSensor.kernels`` records which
Gated-DeltaNet and conv kernels the model's layers call
(``interp.sensor.kernels.binding``).
"""

from __future__ import annotations

import copy
import hashlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from interp.sensor.kernels.binding import bound_kernels
from interp.sensor import api
from interp.sensor.api import AttentionMask, NamesFilter, Positions, TLHook, Tokens
from interp.sensor.hooks import decoder_layers
from interp.sensor.layout import layout
from interp.sensor.kernels.deltanet import bind_float64_kernels
from interp.sensor.protocol import Sensor
from interp.sensor.specs import SPECS, ModelSpec, ModelUnavailable, cache_dir

if TYPE_CHECKING:
    from transformer_lens.ActivationCache import ActivationCache
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["DTYPES", "SPECS", "LoadedSensor", "ModelSpec", "ModelUnavailable", "Sensor", "cache_dir",
           "check_device", "load_model", "load_tokenizer", "resolve_dtype", "resolve_spec", "weights_checksum"]

DTYPES = {"float64": torch.float64, "fp64": torch.float64, "float32": torch.float32, "fp32": torch.float32,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


@dataclass
class LoadedSensor:
    """What :func:`load_model` returns; implements :class:`~interp.sensor.protocol.Sensor` (see there)."""

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
    kernels: dict[str, str] = field(default_factory=dict)  # kernel -> implementation (kernels.binding)
    # float32 copies of the final norm and unembedding of a half-precision model (interp.sensor.unembed), lazily
    unembedding_cache: Any = field(default=None, repr=False, compare=False)

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

    def run_with_cache(self, tokens: Tokens, names_filter: NamesFilter = None, positions: Positions = -1,
                       fwd_hooks: Sequence[tuple[Any, TLHook]] = (),
                       attention_mask: AttentionMask = None) -> tuple[torch.Tensor, ActivationCache]:
        """``(logits, ActivationCache)`` at each row's ``positions`` (default: its last token), fast path."""
        return api.run_with_cache(self, tokens, names_filter, positions, fwd_hooks, attention_mask)

    def run_with_hooks(self, tokens: Tokens, fwd_hooks: Sequence[tuple[Any, TLHook]] = (),
                       positions: Positions = -1, attention_mask: AttentionMask = None) -> torch.Tensor:
        """Logits at each row's ``positions`` under TransformerLens-style hooks ``fn(activation, hook)``, fast path."""
        return api.run_with_hooks(self, tokens, fwd_hooks, positions, attention_mask)

    def to_tokens(self, input: str | list[str], prepend_bos: bool | None = None, padding_side: str | None = None,
                  move_to_device: bool = True, truncate: bool = True) -> torch.Tensor:
        """``[batch, pos]`` tokens of a string or strings, as ``HookedTransformer.to_tokens`` (the bridge's)."""
        return self.bridge.to_tokens(input, prepend_bos=prepend_bos, padding_side=padding_side,
                                     move_to_device=move_to_device, truncate=truncate)

    def to_string(self, tokens: Tokens) -> str | list[str]:
        """The text of ``[pos]`` tokens (a string) or ``[batch, pos]`` tokens (one per row), as TransformerLens."""
        return self.bridge.to_string(tokens)

    def to_str_tokens(self, input: Tokens, prepend_bos: bool | None = None,
                      padding_side: str | None = None) -> list[str] | list[list[str]]:
        """Each token of ``input`` (text or tokens) as its string, as ``HookedTransformer.to_str_tokens``."""
        return self.bridge.to_str_tokens(input, prepend_bos=prepend_bos, padding_side=padding_side)


def resolve_dtype(dtype: str | torch.dtype, device: str | torch.device = "cpu",
                  precision: str | torch.dtype | None = None) -> torch.dtype:
    """Map ``fp32``/``bf16``/``fp16``/``fp64`` (or a torch dtype) to a torch dtype; ``auto``: float32 off CUDA, on
    CUDA ``precision`` (the dtype the caller's analysis allows; none given: float32, correct for every analysis).

    The sensor layer knows no analysis: each analysis's config says its precision (``interp.pipelines.configs``)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        if torch.device(device).type != "cuda" or precision is None:
            return torch.float32
        return precision if isinstance(precision, torch.dtype) else resolve_dtype(precision)
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use auto or one of {sorted(DTYPES)}")
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
        fetch = SPECS[spec].fetch
        if found is None and SPECS[spec].local_build and fetch is not None:
            found = fetch()
        if found is not None:
            return spec, found
        hub_id = SPECS[spec].hub_id
        if allow_download and hub_id:
            return spec, hub_id
        raise ModelUnavailable(f"model {spec!r} is not available offline: {SPECS[spec].how_to_get}")
    path = Path(spec)
    if (path / "config.json").exists():
        return str(path), path
    raise ModelUnavailable(
        f"unknown model spec {spec!r}: use one of {', '.join(SPECS)} or a local HF directory with config.json"
    )


def check_device(device: str | torch.device) -> torch.device:
    """The torch device ``device`` names, if this machine has it; ValueError (naming ``--device``) otherwise."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"--device {device}: not a torch device; use cpu, cuda, cuda:1 or mps") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {device}: CUDA is not available on this machine (torch "
                             f"{torch.__version__}{'' if torch.version.cuda else ', built without CUDA'}); use cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"--device {device}: MPS is not available on this machine; use cpu")
    elif dev.type not in ("cpu", "cuda", "mps", "meta"):  # meta: shapes without data (device-correctness tests)
        raise ValueError(f"--device {device}: unsupported device type {dev.type!r}; use cpu, cuda or mps")
    return dev


def weights_checksum(path: Path) -> str:
    """SHA-256 of a weight file's content, cached in ``cache_dir()/checksums.json`` by path, size and mtime."""
    from interp.io import atomic_write_json, file_sha256, read_json

    path = Path(path).resolve()
    stat = path.stat()
    key = f"{path}:{stat.st_size}:{stat.st_mtime_ns}"
    cache_file = cache_dir() / "checksums.json"
    try:
        cached = read_json(cache_file) if cache_file.is_file() else {}
    except (OSError, ValueError):
        cached = {}
    if not isinstance(cached, dict):
        cached = {}
    if key not in cached:
        cached[key] = file_sha256(path)
        try:
            atomic_write_json(cache_file, cached)
        except OSError:
            pass  # a read-only cache only costs the hash again next time
    return cached[key]


def _revision(path: Path | str) -> str:
    """A short hash of the checkpoint's content: config, tokenizer and weight files (or the hub id)."""
    path = Path(path)
    if not path.exists():
        return str(path)
    h = hashlib.sha256()
    for name in sorted(p.name for p in path.iterdir() if p.suffix in {".json", ".safetensors"} or p.name == "RECIPE"):
        p = path / name
        h.update(name.encode())
        h.update(p.read_bytes() if p.suffix != ".safetensors" else weights_checksum(p).encode())
    return h.hexdigest()[:12]


def _load_hf(source: Path | str, dtype: torch.dtype, trust_remote_code: bool, allow_download: bool,
             device: str | torch.device = "cpu"):
    """The HF causal LM with its weights read straight onto ``device`` (one device: no dispatch hooks), and its tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    local_only = not allow_download
    config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code, local_files_only=local_only)
    if hasattr(config, "text_config"):  # multimodal Qwen3.5 checkpoints: text-only causal LM
        config = config.text_config
    model = AutoModelForCausalLM.from_pretrained(
        source, config=config, dtype=dtype, trust_remote_code=trust_remote_code,
        local_files_only=local_only, attn_implementation="sdpa", device_map=torch.device(device),
        use_kernels=False,  # transformers >= 5.25 kernelizes from the hub by default: offline here, unreported numerics
    )
    require_cache_argument(model, source)
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code, local_files_only=local_only)
    return model.eval(), tokenizer


def require_cache_argument(model: PreTrainedModel, source: Path | str) -> None:
    """Refuse a model whose forward takes no ``cache`` argument, before any analysis runs.

    Every cached forward here (prefix snapshots, chunked prefill, the online
    sensor) passes ``cache=``: transformers' name since 5.24. Older versions
    (``past_key_values``) and remote code written for them take an unknown
    ``cache`` into ``**kwargs`` and drop it, so a continuation would run
    without its prefix and every number after it would be silently wrong
    (measured on transformers 5.23: the cache stays empty)."""
    import transformers

    if "cache" not in inspect.signature(model.base_model.forward).parameters:
        raise RuntimeError(
            f"{source}: {type(model.base_model).__name__}.forward takes no 'cache' argument (transformers "
            f"{transformers.__version__}); this toolkit passes the KV/recurrent cache as 'cache', which "
            "transformers >= 5.24 names so: upgrade transformers (pip install 'transformers>=5.24,<6')")


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


def load_tokenizer(spec: str, model_path: str | Path | None = None,
                   allow_download: bool = False) -> PreTrainedTokenizerBase:
    """Load only the tokenizer (and chat template) of a spec, e.g. for rendering."""
    from transformers import AutoTokenizer

    _, source = resolve_spec(spec, model_path, allow_download)
    return AutoTokenizer.from_pretrained(source, local_files_only=not allow_download)


def load_model(
    spec: str,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = "auto",
    model_path: str | Path | None = None,
    allow_download: bool = False,
    trust_remote_code: bool = False,
) -> LoadedSensor:
    """Load a spec as a :class:`LoadedSensor` on ``device`` (offline unless ``allow_download``; see the module docstring)."""
    from transformer_lens.model_bridge import TransformerBridge

    check_device(device)
    name, source = resolve_spec(spec, model_path, allow_download)
    torch_dtype = resolve_dtype(dtype, device)
    model, tokenizer = _load_hf(source, torch_dtype, trust_remote_code, allow_download, device)
    where = layout(model)  # before the bridge boots: an unsupported family fails naming the supported ones
    for p in model.parameters():
        p.requires_grad_(False)
    plain = _weight_sharing_twin(model)  # the bridge swaps its own components into `model`
    if torch_dtype == torch.float64:  # Gated-DeltaNet's torch kernels would otherwise run in float32
        for hf in (model, plain):  # hooks on the modules themselves: the bridge keeps `model`'s layers
            bind_float64_kernels(hf)
    bridge = TransformerBridge.boot_transformers(
        str(source), hf_model=model, tokenizer=tokenizer, device=str(device), dtype=torch_dtype,
        trust_remote_code=trust_remote_code,
    )
    bridge.eval()
    cfg = model.config
    n_layers = len(decoder_layers(plain, where))
    layer_types = list(getattr(cfg, "layer_types", None) or ["full_attention"] * n_layers)
    return LoadedSensor(
        spec=name,
        bridge=bridge,
        hf_model=plain,
        tokenizer=tokenizer,
        chat_template=tokenizer.chat_template or "",
        n_layers=n_layers,
        d_model=cfg.get_text_config().hidden_size,
        layer_types=layer_types,
        device=torch.device(device),
        dtype=torch_dtype,
        revision=_revision(source),
        path=Path(source) if Path(source).exists() else None,
        kernels=bound_kernels(plain, torch_dtype),
    )
