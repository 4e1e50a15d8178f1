"""TransformerLens hook names served by plain torch hooks on the HF modules (plain-forward speed).

The TransformerLens bridge forces eager attention and builds the N x N pattern;
at 8K tokens that was measured 6x slower than a plain sdpa forward. Analyses
therefore run the *same* HF modules the bridge wraps, under sdpa, with torch
hooks registered behind the bridge's own names:

| TL name                      | HF module hook                                  | tensor            |
|------------------------------|-------------------------------------------------|-------------------|
| ``blocks.{l}.hook_resid_pre``  | forward-pre of decoder layer ``l``              | [batch, pos, d_model] |
| ``blocks.{l}.hook_resid_post`` | forward of decoder layer ``l``                  | [batch, pos, d_model] |
| ``blocks.{l}.hook_attn_out``   | forward of ``self_attn`` / ``linear_attn``      | [batch, pos, d_model] |
| ``blocks.{l}.hook_mlp_out``    | forward of ``mlp``                              | [batch, pos, d_model] |
| ``ln_final.hook_out``          | forward of the final norm                       | [batch, pos, d_model] |

A hook function has TransformerLens's signature ``fn(tensor, hook_name)`` and
may return a replacement tensor (activation patching). Values equal the
bridge's ``run_with_cache`` at the same names (parity-tested); attention
patterns (``hook_pattern``) are not served here: the boundary attention row is
computed from rotated q and k instead (``interp.sensor.kernels.attention_rows``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import torch

HookFn = Callable[[torch.Tensor, str], "torch.Tensor | None"]
_NAME_RE = re.compile(r"^blocks\.(\d+)\.hook_(resid_pre|resid_post|attn_out|mlp_out)$")
SITES = ("resid_pre", "resid_post", "attn_out", "mlp_out")


def hook_name(site: str, layer: int) -> str:
    """TransformerLens name of ``site`` at ``layer`` (e.g. ``blocks.4.hook_resid_pre``)."""
    if site not in SITES:
        raise ValueError(f"unknown site {site!r}; known: {', '.join(SITES)}")
    return f"blocks.{layer}.hook_{site}"


def decoder_layers(model: Any) -> Any:
    """The decoder layer list of an HF causal LM (``model.model.layers``)."""
    return model.model.layers


def _mixer(layer: Any) -> Any:
    return getattr(layer, "self_attn", None) or getattr(layer, "linear_attn")


def _replace_output(output: Any, new: torch.Tensor) -> Any:
    if isinstance(output, tuple):
        return (new, *output[1:])
    return new


def _first(output: Any) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


@contextlib.contextmanager
def hooks(model: Any, fwd_hooks: list[tuple[str, HookFn]]) -> Iterator[None]:
    """Register TL-named hooks on the HF modules for the duration of the block."""
    handles = []
    layers = decoder_layers(model)
    try:
        for name, fn in fwd_hooks:
            if name == "ln_final.hook_out":
                handles.append(model.model.norm.register_forward_hook(
                    lambda m, a, out, fn=fn, name=name: _call_out(fn, out, name)))
                continue
            match = _NAME_RE.match(name)
            if match is None:
                raise ValueError(f"hook {name!r} is not served on the plain-forward path; "
                                 f"use sensor.bridge for it (served: blocks.L.hook_{{{','.join(SITES)}}}, ln_final.hook_out)")
            layer, site = int(match.group(1)), match.group(2)
            if not 0 <= layer < len(layers):
                raise ValueError(f"hook {name!r}: layer {layer} out of range 0..{len(layers) - 1}")
            if site == "resid_pre":
                handles.append(layers[layer].register_forward_pre_hook(
                    lambda m, args, kwargs, fn=fn, name=name: _call_pre(fn, args, kwargs, name), with_kwargs=True))
            else:
                module = {"resid_post": layers[layer], "attn_out": _mixer(layers[layer]),
                          "mlp_out": layers[layer].mlp}[site]
                handles.append(module.register_forward_hook(
                    lambda m, a, out, fn=fn, name=name: _call_out(fn, out, name)))
        yield
    finally:
        for h in handles:
            h.remove()


def _call_pre(fn: HookFn, args: tuple, kwargs: dict, name: str):
    if args:
        new = fn(args[0], name)
        return None if new is None else ((new, *args[1:]), kwargs)
    new = fn(kwargs["hidden_states"], name)
    return None if new is None else (args, {**kwargs, "hidden_states": new})


def _call_out(fn: HookFn, output: Any, name: str):
    new = fn(_first(output), name)
    return None if new is None else _replace_output(output, new)


@contextlib.contextmanager
def plain_attention(model: Any, implementation: str = "sdpa") -> Iterator[None]:
    """Run the HF model with ``implementation`` attention (the bridge leaves it eager)."""
    previous = model.config._attn_implementation
    model.set_attn_implementation(implementation)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)


@contextlib.contextmanager
def attention_implementation(model: Any, name: str, fn: Callable[..., Any]) -> Iterator[None]:
    """Run the HF model with ``fn`` as its attention, registered as ``name`` only inside the block.

    ``fn`` has transformers' attention-function signature
    ``(module, query, key, value, attention_mask, **kwargs) -> (out, weights)``.
    It goes into transformers' attention registry (``ALL_ATTENTION_FUNCTIONS``)
    on entry and out again on exit, exception or not, and the model's previous
    implementation is restored; an entry that was there before under ``name`` is
    put back. A closure can carry per-call data (e.g. shared prefix K/V) this way.
    """
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    previous = ALL_ATTENTION_FUNCTIONS.get(name)
    ALL_ATTENTION_FUNCTIONS[name] = fn
    try:
        with plain_attention(model, name):
            yield
    finally:
        del ALL_ATTENTION_FUNCTIONS[name]
        if previous is not None and ALL_ATTENTION_FUNCTIONS.get(name) is not previous:
            ALL_ATTENTION_FUNCTIONS[name] = previous
