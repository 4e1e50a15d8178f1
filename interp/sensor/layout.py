"""Where a decoder's modules live, read from the TransformerLens bridge's architecture adapter.

The bridge knows every supported family's HF module paths (its adapter's
``component_mapping``: ``blocks`` -> ``model.layers`` for Llama/Qwen,
``transformer.h`` for GPT-2, ...). :func:`layout` reads them once per call
into a :class:`Layout`, so the plain-forward hooks find the decoder layers,
the final norm, the attention projections and the MLP output projection of
any causal LM the bridge has an adapter for, instead of assuming
``model.model.layers``. A model without one fails with the supported
families named.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Layout:
    """Module paths of one decoder family (dotted, from the causal LM root or from a decoder layer)."""

    architecture: str
    layers: str  # from the root, e.g. model.layers
    embed: str  # from the root, e.g. model.embed_tokens
    final_norm: str  # from the root, e.g. model.norm
    attn: str  # softmax attention in a layer, e.g. self_attn
    linear_attn: str | None  # Gated-DeltaNet mixer in a layer (hybrid models), else None
    mlp: str  # e.g. mlp
    q: str | None  # projections inside attn (None when fused into qkv)
    k: str | None
    v: str | None
    qkv: str | None  # fused q/k/v projection inside attn (GPT-2 c_attn), else None
    o: str  # output projection inside attn
    mlp_out: str  # output projection inside mlp (its input is mlp.hook_post)


def supported_families() -> list[str]:
    """Causal-LM architectures the bridge has an adapter for (``XForCausalLM`` / ``XLMHeadModel``)."""
    from transformer_lens.factories.architecture_adapter_factory import SUPPORTED_ARCHITECTURES

    return sorted(a for a in SUPPORTED_ARCHITECTURES if a.endswith(("ForCausalLM", "LMHeadModel")))


def _name(mapping: dict[str, Any], key: str) -> str | None:
    component = mapping.get(key)
    return None if component is None else component.name


def layout(model: torch.nn.Module) -> Layout:
    """The :class:`Layout` of an HF causal LM, from its TransformerLens architecture adapter."""
    import torch
    from transformer_lens.factories.architecture_adapter_factory import (
        SUPPORTED_ARCHITECTURES,
        ArchitectureAdapterFactory,
    )
    from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_config_from_hf

    arch = type(model).__name__
    if arch not in SUPPORTED_ARCHITECTURES:
        arch = next(iter(getattr(model.config, "architectures", None) or []), arch)
    if arch not in SUPPORTED_ARCHITECTURES:
        names = ", ".join(a.removesuffix("ForCausalLM").removesuffix("LMHeadModel") for a in supported_families())
        raise ValueError(f"model architecture {arch!r} has no TransformerLens architecture adapter; "
                         f"supported decoder families: {names}")
    config = build_bridge_config_from_hf(model.config, arch, "layout", torch.float32)
    mapping: dict[str, Any] = ArchitectureAdapterFactory.select_architecture_adapter(config).component_mapping or {}
    blocks = mapping.get("blocks")
    subs = getattr(blocks, "submodules", None) or {}
    attn = subs.get("attn")
    if blocks is None or attn is None or "mlp" not in subs or "ln_final" not in mapping:
        raise ValueError(f"{arch}: its adapter has no blocks/attn/mlp/ln_final mapping (not a decoder LM)")
    a, m = attn.submodules or {}, subs["mlp"].submodules or {}
    qkv = _name(a, "qkv")
    return Layout(
        architecture=arch, layers=blocks.name, embed=_name(mapping, "embed") or "", final_norm=mapping["ln_final"].name,
        attn=attn.name, linear_attn=_name(subs, "linear_attn"), mlp=subs["mlp"].name,
        q=None if qkv else _name(a, "q"), k=None if qkv else _name(a, "k"), v=None if qkv else _name(a, "v"),
        qkv=qkv, o=_name(a, "o") or "o_proj", mlp_out=_name(m, "out") or "down_proj",
    )
