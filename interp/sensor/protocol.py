"""What downstream code may rely on in a sensor: typed protocols, no implementation.

:class:`Sensor` is the full interface (``interp.sensor.models.load_model``
returns a :class:`~interp.sensor.models.LoadedSensor`, which implements it).
:class:`ForwardSensor` is the part the forward engine reads
(``interp.sensor.forward.run_plan``, ``interp.sensor.kernels.variants.run_variants``):
a bare object with ``hf_model`` and ``device`` is enough there (benchmarks use one).
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from transformer_lens.ActivationCache import ActivationCache

    from interp.sensor.api import AttentionMask, NamesFilter, Positions, TLHook, Tokens


@runtime_checkable
class ForwardSensor(Protocol):
    """A plain HF causal LM and the device its inputs go to."""

    hf_model: Any  # transformers PreTrainedModel (sdpa; shares its tensors with ``bridge``)
    device: torch.device


@runtime_checkable
class Sensor(ForwardSensor, Protocol):
    """The frozen hooked model: a TransformerLens ``TransformerBridge`` plus what analyses need.

    ``bridge`` is the user-facing hooked model (TransformerLens hook names such
    as ``blocks.{l}.hook_resid_pre``). Extraction and patching run the same
    modules at plain-forward speed through ``interp.sensor.hooks`` (same names,
    plain torch hooks, sdpa attention); ``hf_model`` is the module both share.
    """

    spec: str
    bridge: Any  # transformer_lens.model_bridge.TransformerBridge
    tokenizer: Any  # transformers tokenizer, with its chat template
    chat_template: str
    n_layers: int
    d_model: int
    layer_types: list[str]
    dtype: torch.dtype
    revision: str
    path: Path | None
    kernels: dict[str, str]  # kernel -> the implementation bound (``interp.sensor.kernels.binding``)

    @property
    def full_attention_layers(self) -> list[int]:
        """Indices of layers with softmax attention (the only ones with a pattern)."""
        ...

    @property
    def linear_attention_layers(self) -> list[int]:
        """Indices of Gated-DeltaNet (linear attention) layers."""
        ...

    def describe(self) -> dict[str, Any]:
        """JSON-able identity of the sensor, written into every result file."""
        ...

    def run_with_cache(self, tokens: Tokens, names_filter: NamesFilter = None, positions: Positions = -1,
                       fwd_hooks: Sequence[tuple[Any, TLHook]] = (),
                       attention_mask: AttentionMask = None) -> tuple[torch.Tensor, ActivationCache]:
        """``(logits, ActivationCache)`` at each row's ``positions`` on the fast path (``interp.sensor.api``)."""
        ...

    def run_with_hooks(self, tokens: Tokens, fwd_hooks: Sequence[tuple[Any, TLHook]] = (), positions: Positions = -1,
                       attention_mask: AttentionMask = None) -> torch.Tensor:
        """Logits at each row's ``positions`` under TransformerLens-style hooks, fast path (``interp.sensor.api``)."""
        ...

    def to_tokens(self, input: str | list[str], prepend_bos: bool | None = None, padding_side: str | None = None,
                  move_to_device: bool = True, truncate: bool = True) -> torch.Tensor:
        """``[batch, pos]`` tokens of a string or strings (``HookedTransformer.to_tokens``)."""
        ...

    def to_string(self, tokens: Tokens) -> str | list[str]:
        """Text of ``[pos]`` tokens, or one text per row of ``[batch, pos]`` (``HookedTransformer.to_string``)."""
        ...

    def to_str_tokens(self, input: Tokens, prepend_bos: bool | None = None,
                      padding_side: str | None = None) -> list[str] | list[list[str]]:
        """Each token as its string (``HookedTransformer.to_str_tokens``)."""
        ...
