"""Sparse autoencoders in SAELens' on-disk format: load, save, encode, train a small one, splice it into a forward.

SAELens (``sae-lens``) cannot be imported beside the pinned transformer-lens 4.3 (6.54 requires
transformer-lens < 4; 6.49.2 installs but imports ``transformer_lens.HookedTransformer``, gone in 4.x), so this
module reads and writes its directory format itself, as SAELens' ``SAE.save_model`` / ``SAE.load_from_disk``
document it (sae_lens v6: ``sae_lens/constants.py``, ``sae_lens/saes/sae.py``):

    <dir>/cfg.json                  {"architecture": "standard" | "topk" | "jumprelu", "d_in", "d_sae",
                                     "dtype", "device", "apply_b_dec_to_input", "normalize_activations",
                                     "reshape_activations", "k" (topk), "metadata": {"hook_name",
                                     "model_name", ...}}
    <dir>/sae_weights.safetensors   W_enc [d_in, d_sae], W_dec [d_sae, d_in], b_enc [d_sae], b_dec [d_in],
                                    threshold [d_sae] (jumprelu only)

Files of SAELens before v6 (``hook_name`` / ``model_name`` at the top level, ``activation_fn_kwargs.k``) load
too. The forward pass (``x`` [..., d_in], ``f`` [..., d_sae]):

    pre  = (x - b_dec if apply_b_dec_to_input else x) @ W_enc + b_enc
    f    = relu(pre)                                   standard
           relu(pre) kept on its k largest entries     topk
           pre * (pre > threshold)                     jumprelu
    xhat = f @ W_dec + b_dec

Only ``normalize_activations: "none"`` and ``reshape_activations: "none"`` are served (a residual-stream SAE
of the toolkit's hook names, ``blocks.{l}.hook_resid_pre|resid_post|attn_out|mlp_out``); other files are
refused with the field named.

Transfer is measured, not assumed: :func:`fvu` (fraction of variance unexplained of the reconstruction) and
:func:`spliced_kl` (KL of the boundary's next-token distribution, clean vs the forward whose hooked activation
is replaced by its reconstruction at every position).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from safetensors.torch import load_file, save

from interp.io import atomic_write_bytes, atomic_write_json, file_sha256, read_json
from interp.sensor.hooks import SITES
from interp.params import Integer, Real, param, validate
from interp.sensor.protocol import Sensor

SAE_CFG_FILENAME = "cfg.json"
SAE_WEIGHTS_FILENAME = "sae_weights.safetensors"
ARCHITECTURES = ("standard", "topk", "jumprelu")
_HOOK_RE = re.compile(r"^blocks\.(\d+)\.hook_(" + "|".join(SITES) + r")$")
_DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class SparseAutoencoder:
    """One SAE's weights and settings (SAELens' fields; shapes in the module docstring)."""

    W_enc: torch.Tensor
    W_dec: torch.Tensor
    b_enc: torch.Tensor
    b_dec: torch.Tensor
    hook_name: str
    architecture: str = "topk"
    k: int | None = None
    threshold: torch.Tensor | None = None
    apply_b_dec_to_input: bool = True
    model_name: str = ""

    @property
    def d_in(self) -> int:
        """Width of the hooked activation."""
        return int(self.W_enc.shape[0])

    @property
    def d_sae(self) -> int:
        """Number of features."""
        return int(self.W_enc.shape[1])

    @property
    def site(self) -> tuple[str, int]:
        """``(site, layer)`` of the hook (``interp.sensor.hooks.SITES``)."""
        match = _HOOK_RE.match(self.hook_name)
        if match is None:
            raise ValueError(f"hook_name {self.hook_name!r}: not a residual site blocks.<l>.hook_<{'|'.join(SITES)}>")
        return match.group(2), int(match.group(1))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Feature activations [..., d_sae] of ``x`` [..., d_in] (float32)."""
        x = x.to(torch.float32)
        pre = (x - self.b_dec if self.apply_b_dec_to_input else x) @ self.W_enc + self.b_enc
        if self.architecture == "jumprelu":
            assert self.threshold is not None  # checked on load
            return pre * (pre > self.threshold)
        acts = torch.relu(pre)
        if self.architecture == "topk":
            assert self.k is not None  # checked on load
            values, ids = acts.topk(min(self.k, self.d_sae), dim=-1)
            acts = torch.zeros_like(acts).scatter(-1, ids, values)
        return acts

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        """Reconstruction [..., d_in] of feature activations ``f``."""
        return f @ self.W_dec + self.b_dec

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        """``decode(encode(x))`` in ``x``'s dtype."""
        return self.decode(self.encode(x)).to(x.dtype)


@dataclass(frozen=True)
class SaeTrainConfig:
    """A small TopK SAE fitted on a store's pooled residuals (``interp sae-train``; :func:`train_sae`)."""

    analysis: ClassVar[str] = "sae_train"
    precision: ClassVar[str | None] = None  # reads a store; runs no model

    d_sae: int = param(1024, Integer(1), "Number of SAE features.", "features")
    k: int = param(16, Integer(1), "Active features per row (TopK).", "features")
    steps: int = param(600, Integer(1), "Full-batch Adam updates.")
    lr: float = param(1e-2, Real(0, low_open=True), "Adam learning rate.")
    seed: int = param(0, Integer(0), "Seed of the initialisation and of the held-out split.")
    held_out: float = param(0.2, Real(0, 1, high_open=True), "Fraction of rows held out for the reported FVU.")

    def __post_init__(self) -> None:
        validate(self)


def sae_cfg(sae: SparseAutoencoder) -> dict[str, Any]:
    """The ``cfg.json`` of ``sae`` (SAELens v6 field names)."""
    cfg: dict[str, Any] = {
        "architecture": sae.architecture, "d_in": sae.d_in, "d_sae": sae.d_sae, "dtype": "float32", "device": "cpu",
        "apply_b_dec_to_input": sae.apply_b_dec_to_input, "normalize_activations": "none",
        "reshape_activations": "none",
        "metadata": {"hook_name": sae.hook_name, "model_name": sae.model_name, "hook_head_index": None,
                     "prepend_bos": True, "context_size": None},
    }
    if sae.architecture == "topk":
        cfg["k"] = sae.k
    return cfg


def save_sae(sae: SparseAutoencoder, path: Path | str) -> Path:
    """Write ``sae`` as SAELens' directory (``cfg.json`` + ``sae_weights.safetensors``, each atomically)."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {"W_enc": sae.W_enc, "W_dec": sae.W_dec, "b_enc": sae.b_enc, "b_dec": sae.b_dec}
    if sae.threshold is not None:
        tensors["threshold"] = sae.threshold
    atomic_write_bytes(folder / SAE_WEIGHTS_FILENAME,
                       save({k: v.detach().to(torch.float32).contiguous() for k, v in tensors.items()}))
    atomic_write_json(folder / SAE_CFG_FILENAME, sae_cfg(sae))
    return folder


def load_sae(path: Path | str) -> SparseAutoencoder:
    """The SAE in SAELens' directory ``path``; ValueError naming the file and field of anything not served."""
    folder = Path(path)
    cfg_path, weights_path = folder / SAE_CFG_FILENAME, folder / SAE_WEIGHTS_FILENAME
    for p in (cfg_path, weights_path):
        if not p.is_file():
            raise ValueError(f"{folder}: not a SAELens SAE directory (no {p.name}; expected {SAE_CFG_FILENAME} "
                             f"and {SAE_WEIGHTS_FILENAME})")
    cfg = read_json(cfg_path)
    if not isinstance(cfg, dict):
        raise ValueError(f"{cfg_path}: not a JSON object")
    meta: dict[str, Any] = cfg["metadata"] if isinstance(cfg.get("metadata"), dict) else {}
    hook = meta.get("hook_name") or cfg.get("hook_name")

    def refuse(name: str, why: str) -> ValueError:
        return ValueError(f"{cfg_path}: field {name}: {why}")

    arch = cfg.get("architecture", "standard")
    if arch not in ARCHITECTURES:
        raise refuse("architecture", f"{arch!r} is not served (served: {', '.join(ARCHITECTURES)})")
    for name in ("normalize_activations", "reshape_activations"):
        if cfg.get(name, "none") not in ("none", None):
            raise refuse(name, f"{cfg[name]!r} is not served (only 'none')")
    if not isinstance(hook, str) or _HOOK_RE.match(hook) is None:
        raise refuse("metadata.hook_name", f"{hook!r} is not a residual site blocks.<l>.hook_<{'|'.join(SITES)}>")
    if cfg.get("dtype", "float32") not in _DTYPES:
        raise refuse("dtype", f"{cfg.get('dtype')!r} is not a torch float dtype name")
    weights = {k: v.to(torch.float32) for k, v in load_file(str(weights_path)).items()}
    k = cfg.get("k", (cfg.get("activation_fn_kwargs") or {}).get("k"))
    if arch == "topk" and not (isinstance(k, int) and k >= 1):
        raise refuse("k", f"a topk SAE needs an integer k >= 1, got {k!r}")
    needed = ["W_enc", "W_dec", "b_enc", "b_dec"] + (["threshold"] if arch == "jumprelu" else [])
    if missing := [n for n in needed if n not in weights]:
        raise ValueError(f"{weights_path}: tensors {missing} missing (has {sorted(weights)})")
    d_in, d_sae = cfg.get("d_in"), cfg.get("d_sae")
    shapes = {"W_enc": (d_in, d_sae), "W_dec": (d_sae, d_in), "b_enc": (d_sae,), "b_dec": (d_in,),
              "threshold": (d_sae,)}
    for n in needed:
        if tuple(weights[n].shape) != shapes[n]:
            raise ValueError(f"{weights_path}: tensor {n} has shape {tuple(weights[n].shape)}, cfg.json's d_in "
                             f"{d_in} and d_sae {d_sae} say {shapes[n]}")
    return SparseAutoencoder(weights["W_enc"], weights["W_dec"], weights["b_enc"], weights["b_dec"], hook,
                             arch, k if arch == "topk" else None, weights.get("threshold"),
                             bool(cfg.get("apply_b_dec_to_input", True)), str(meta.get("model_name")
                                                                              or cfg.get("model_name") or ""))


def sae_identity(path: Path | str) -> dict[str, Any]:
    """What a result records of an SAE: its folder, hook, architecture, sizes and the sha256 of its two files."""
    folder = Path(path)
    sae = load_sae(folder)
    return {"path": str(folder), "hook_name": sae.hook_name, "architecture": sae.architecture, "d_in": sae.d_in,
            "d_sae": sae.d_sae, "k": sae.k, "model_name": sae.model_name,
            "sha256": {name: file_sha256(folder / name) for name in (SAE_CFG_FILENAME, SAE_WEIGHTS_FILENAME)}}


def top_features(f: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids int64, values float32)`` [..., k] of the k largest feature activations (zeros where fewer are active)."""
    values, ids = f.topk(min(k, f.shape[-1]), dim=-1)
    return ids.to(torch.int64), values.to(torch.float32)


def fvu(x: torch.Tensor, xhat: torch.Tensor) -> float:
    """Fraction of variance unexplained: sum ||x - xhat||^2 / sum ||x - mean(x)||^2 over rows [n, d]."""
    x, xhat = x.to(torch.float64), xhat.to(torch.float64)
    return float(((x - xhat) ** 2).sum() / ((x - x.mean(0)) ** 2).sum())


def train_sae(x: torch.Tensor, d_sae: int, k: int, hook_name: str, steps: int = 300, lr: float = 1e-2,
              seed: int = 0, model_name: str = "") -> SparseAutoencoder:
    """A TopK SAE fitted to rows ``x`` [n, d_in] by Adam on the reconstruction MSE (decoder rows kept unit norm).

    Small and fast by design (a demo store's residuals on a CPU): full-batch, ``steps`` updates, seeded; the
    encoder starts as the decoder's transpose and ``b_dec`` at the rows' mean (the usual TopK recipe)."""
    g = torch.Generator().manual_seed(seed)
    x = x.to(torch.float32)
    scale = x.std().clamp_min(1e-8)
    z = x / scale  # trained on a unit scale, folded back below
    w_dec = torch.randn(d_sae, x.shape[1], generator=g)
    w_dec = (w_dec / w_dec.norm(dim=1, keepdim=True)).requires_grad_()
    w_enc = w_dec.detach().T.clone().requires_grad_()
    b_enc = torch.zeros(d_sae, requires_grad=True)
    b_dec = z.mean(0).clone().requires_grad_()
    opt = torch.optim.Adam([w_enc, w_dec, b_enc, b_dec], lr=lr)
    for _ in range(steps):
        acts = torch.relu((z - b_dec) @ w_enc + b_enc)
        values, ids = acts.topk(k, dim=-1)
        rec = torch.zeros_like(acts).scatter(-1, ids, values) @ w_dec + b_dec
        loss = ((rec - z) ** 2).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            w_dec /= w_dec.norm(dim=1, keepdim=True).clamp_min(1e-8)
    # x = scale * z: encoder sees x / scale (W_enc / scale), decoder outputs scale * z (W_dec, b_dec * scale)
    with torch.no_grad():
        return SparseAutoencoder(w_enc.detach() / scale, w_dec.detach() * scale, b_enc.detach(),
                                 b_dec.detach() * scale, hook_name, "topk", k, None, True, model_name)


def spliced_kl(sensor: Sensor, input_ids: list[int] | torch.Tensor, sae: SparseAutoencoder) -> float:
    """``KL(P_clean || P_spliced)`` [nats] of the last token's next-token distribution, where the spliced forward
    replaces the SAE's hooked activation by its reconstruction at every position (the SAE's transfer cost)."""
    ids = torch.as_tensor(input_ids, dtype=torch.long).reshape(1, -1)
    clean = sensor.run_with_hooks(ids).float().log_softmax(-1)[0, -1]
    spliced = sensor.run_with_hooks(ids, fwd_hooks=[(sae.hook_name, lambda x, hook: sae.reconstruct(x))])
    logq = spliced.float().log_softmax(-1)[0, -1]
    return float((clean.exp() * (clean - logq)).sum())

