"""The final norm and the unembedding in float32 at least, whatever the model's dtype: the one home of logits.

A bfloat16 model's HF forward applies its final norm in bfloat16 and
``lm_head`` to bfloat16 hidden states, so every logit carries bfloat16
rounding (~2^-8 relative) before any float32 log-softmax. Every analysis
that reads a distribution (KL Repair, harm NLL, ICLR entropies, the
TransformerLens-style API's logits) goes through this module instead:

- :func:`float_final_norm` (a context manager, entered by every forward of
  the toolkit: ``interp.sensor.forward.run_plan``,
  ``interp.sensor.kernels.variants.run_variants``, ``interp.sensor.api``)
  puts a forward hook on the model's final norm that replaces its output by
  the same norm applied in float32 to its (model-dtype) input, so
  ``last_hidden_state`` and the ``ln_final.hook_out`` site are float32. It is
  registered before any user hook, which therefore sees (and may replace)
  the float32 output;
- :func:`logits` applies the unembedding with a float32 copy of its weight
  (and bias) to such a final-norm output;
- :func:`log_probs`: their float32 log-softmax.

A model whose dtype is already float32 or float64 is untouched (no hook, its
own weights: float32 results are bit-identical to the plain forward; a
float64 model stays float64). The float32 copies are built once per sensor
on first use and cached on the sensor (:func:`unembedding`; rebuilt if the
weights are replaced or modified in place). Extra memory for a half-precision
model: ``vocab x d_model x 4`` bytes for the unembedding (tied or not; e.g.
SmolLM2-135M 49152 x 576 x 4 = 113 MB, Qwen3.5-9B 248320 x 4096 x 4 =
4.1 GB) plus the norm's few kilobytes; plus, per forward, the float32 final
hidden states of a chunk (``n x d_model x 4`` bytes). Logit soft-capping or
scaling that a family applies outside ``lm_head`` is not applied (nor was it
before).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from interp.sensor.layout import layout
from interp.sensor.protocol import ForwardSensor

CACHE_ATTR = "unembedding_cache"  # the attribute of the sensor the float32 copies live in


def logit_dtype(dtype: torch.dtype) -> torch.dtype:
    """Dtype of norm/unembedding/log-softmax/KL arithmetic: float32 at least, float64 for a float64 model."""
    return torch.float64 if dtype == torch.float64 else torch.float32


@dataclass
class Unembedding:
    """Float32 (at least) copies of a model's final norm and unembedding, and what they were copied from."""

    norm: Any  # a copy of the final norm module in ``dtype`` (no hooks)
    final_norm: Any  # the model's own final norm module (where float_final_norm hooks)
    weight: torch.Tensor  # [vocab, d_model], ``dtype`` (the model's own tensor when it is already ``dtype``)
    bias: torch.Tensor | None
    dtype: torch.dtype
    source: tuple[Any, ...]  # identity and version of the tensors copied: a change rebuilds the copies

    @property
    def extra_bytes(self) -> int:
        """Bytes these copies add over the model's own weights (0 for a float32/float64 model)."""
        if self.source[0] == self.dtype:
            return 0
        return sum(t.numel() * t.element_size() for t in (self.weight, self.bias, *self.norm.parameters(),
                                                            *self.norm.buffers()) if t is not None)


def _model_dtype(model: Any) -> torch.dtype:
    return model.get_output_embeddings().weight.dtype


def _source(model: Any, norm: Any) -> tuple[Any, ...]:
    head = model.get_output_embeddings()
    tensors = [head.weight, getattr(head, "bias", None), *norm.parameters()]
    return (head.weight.dtype, *[(t.data_ptr(), t._version) for t in tensors if t is not None])


def _build(model: Any) -> Unembedding:
    acc = logit_dtype(_model_dtype(model))
    head = model.get_output_embeddings()
    original = model.get_submodule(layout(model).final_norm)
    source = _source(model, original)
    norm = copy.deepcopy(original).to(acc)
    for hooks in (norm._forward_hooks, norm._forward_pre_hooks, norm._forward_hooks_with_kwargs,
                  norm._forward_pre_hooks_with_kwargs):
        hooks.clear()  # a copy taken while a hook is on the original must not carry it
    bias = getattr(head, "bias", None)
    return Unembedding(norm, original, head.weight.to(acc), None if bias is None else bias.to(acc), acc, source)


def unembedding(sensor: ForwardSensor) -> Unembedding:
    """The sensor's float32 final norm and unembedding, built on first use and cached on the sensor (module doc)."""
    model = sensor.hf_model
    cached = getattr(sensor, CACHE_ATTR, None)
    if isinstance(cached, Unembedding) and cached.source == _source(model, cached.final_norm):
        return cached
    with torch.inference_mode(False), torch.no_grad():
        built = _build(model)
    setattr(sensor, CACHE_ATTR, built)
    return built


def promotes(sensor: ForwardSensor) -> bool:
    """Whether the model's own final norm/unembedding run below float32 (half precision): then this module steps in."""
    return _model_dtype(sensor.hf_model) not in (torch.float32, torch.float64)


@contextlib.contextmanager
def float_final_norm(sensor: ForwardSensor) -> Iterator[None]:
    """For the block, the model's final norm outputs the float32 norm of its input (no-op for a float32 model)."""
    if not promotes(sensor):
        yield
        return
    u = unembedding(sensor)
    module = u.final_norm

    def hook(m: torch.nn.Module, args: tuple, kwargs: dict,
             output: torch.Tensor | tuple) -> torch.Tensor | tuple:
        x = args[0] if args else kwargs["hidden_states"]
        new = u.norm(x.to(u.dtype))
        return (new, *output[1:]) if isinstance(output, tuple) else new

    handle = module.register_forward_hook(hook, with_kwargs=True, prepend=True)
    try:
        yield
    finally:
        handle.remove()


def final_norm(sensor: ForwardSensor, pre: torch.Tensor) -> torch.Tensor:
    """The final norm of pre-norm hidden states ``pre`` in float32 at least (the model's own norm for a float32 model)."""
    if not promotes(sensor):
        return unembedding(sensor).final_norm(pre)
    u = unembedding(sensor)
    return u.norm(pre.to(u.dtype))


def logits(sensor: ForwardSensor, final: torch.Tensor) -> torch.Tensor:
    """Float32 (at least) logits ``[..., vocab]`` of final-norm outputs ``final`` (``[..., d_model]``)."""
    if not promotes(sensor):
        return sensor.hf_model.get_output_embeddings()(final).to(logit_dtype(final.dtype))
    u = unembedding(sensor)
    return torch.nn.functional.linear(final.to(u.dtype), u.weight, u.bias)


def log_probs(sensor: ForwardSensor, final: torch.Tensor) -> torch.Tensor:
    """Float32 (at least) log-softmax of :func:`logits` over the vocabulary."""
    return torch.log_softmax(logits(sensor, final), dim=-1)
