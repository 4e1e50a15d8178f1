"""TransformerLens hook names served by plain torch hooks on the HF modules (plain-forward speed).

The TransformerLens bridge forces eager attention and builds the N x N pattern;
at 8K tokens that was measured 6x slower than a plain sdpa forward. Analyses
therefore run the *same* HF modules the bridge wraps, under sdpa, with torch
hooks registered behind the bridge's own names. The modules are found through
the bridge's architecture adapter (``interp.sensor.layout``), so any decoder
family it supports works (Llama, Qwen3/3.5, GPT-2, ...).

Sites (``b`` batch, ``p`` positions, ``h`` heads of that projection, ``dh``
head dim; a site exists only where the layer has that module):

| TL name | shape | fires |
|---|---|---|
| ``hook_embed`` | [b, p, d_model] | output of the token embedding |
| ``blocks.{l}.hook_resid_pre`` | [b, p, d_model] | input of decoder layer l |
| ``blocks.{l}.hook_attn_out`` | [b, p, d_model] | output of the layer's mixer (softmax or Gated-DeltaNet) |
| ``blocks.{l}.hook_mlp_out`` | [b, p, d_model] | output of the MLP |
| ``blocks.{l}.hook_resid_post`` | [b, p, d_model] | output of decoder layer l |
| ``blocks.{l}.attn.hook_q`` | [b, p, h, dh] | q projection output, before q-norm and rotary (Qwen3.5: query and gate, 2h heads) |
| ``blocks.{l}.attn.hook_k`` / ``hook_v`` | [b, p, n_kv_heads, dh] | k / v projection output, before k-norm and rotary |
| ``blocks.{l}.attn.hook_z`` | [b, p, h, dh] | per-head attention output, input of the output projection |
| ``blocks.{l}.attn.hook_pattern`` | [b, h, q, p] | softmax rows of the q captured query positions only (``interp.sensor.api``; capture only) |
| ``blocks.{l}.mlp.hook_post`` | [b, p, d_mlp] | MLP hidden activation, input of its output projection |
| ``blocks.{l}.linear_attn.hook_recurrence_out`` | [b, p, n_v_heads, dv] | Gated-DeltaNet delta-rule output, before its gated norm |
| ``ln_final.hook_out`` | [b, p, d_model] | output of the final norm |

A hook function here has the signature ``fn(tensor, hook_name)`` and may
return a replacement tensor of the same shape (activation patching);
``interp.sensor.api`` wraps TransformerLens-style ``fn(activation, hook)``
functions onto it. Values equal the bridge's ``run_with_cache`` at the same
names (``tests/api/test_api_parity.py``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import torch

from interp.sensor.layout import Layout, layout

if TYPE_CHECKING:
    from transformers import PreTrainedModel

HookFn = Callable[[torch.Tensor, str], "torch.Tensor | None"]
_NAME_RE = re.compile(r"^blocks\.(\d+)\.(hook_resid_pre|hook_resid_post|hook_attn_out|hook_mlp_out|attn\.hook_[qkvz]"
                      r"|attn\.hook_pattern|mlp\.hook_post|linear_attn\.hook_recurrence_out)$")
SITES = ("resid_pre", "resid_post", "attn_out", "mlp_out")
LAYER_SITES = ("hook_resid_pre", "hook_attn_out", "hook_mlp_out", "hook_resid_post", "attn.hook_q", "attn.hook_k",
               "attn.hook_v", "attn.hook_z", "attn.hook_pattern", "mlp.hook_post", "linear_attn.hook_recurrence_out")


def hook_name(site: str, layer: int) -> str:
    """TransformerLens name of ``site`` at ``layer`` (e.g. ``blocks.4.hook_resid_pre``)."""
    if site not in SITES:
        raise ValueError(f"unknown site {site!r}; known: {', '.join(SITES)}")
    return f"blocks.{layer}.hook_{site}"


def decoder_layers(model: torch.nn.Module, where: Layout | None = None) -> torch.nn.ModuleList:
    """The decoder layer list of an HF causal LM (found through its architecture adapter)."""
    return cast(torch.nn.ModuleList, model.get_submodule((where or layout(model)).layers))


def served_names(model: torch.nn.Module) -> list[str]:
    """Every TL name :func:`hooks` serves on ``model`` (``attn.hook_pattern`` only through ``interp.sensor.api``)."""
    where = layout(model)
    names = ["hook_embed"]
    for i, layer in enumerate(decoder_layers(model, where)):
        names += [f"blocks.{i}.{s}" for s in LAYER_SITES if _site_module(layer, where, s) is not None]
    return names + ["ln_final.hook_out"]


def _site_module(layer: Any, where: Layout, site: str) -> Any:
    """The module a layer site hooks, or None where the layer has no such module."""
    attn = getattr(layer, where.attn, None)
    linear = getattr(layer, where.linear_attn, None) if where.linear_attn else None
    if site in ("hook_resid_pre", "hook_resid_post"):
        return layer
    if site == "hook_attn_out":
        return attn if attn is not None else linear
    if site == "hook_mlp_out":
        return getattr(layer, where.mlp)
    if site == "mlp.hook_post":
        return getattr(layer, where.mlp).get_submodule(where.mlp_out)
    if site == "linear_attn.hook_recurrence_out":
        return getattr(linear, "norm", None)
    if attn is None:
        return None
    if site == "attn.hook_pattern":
        return attn
    if site == "attn.hook_z":
        return attn.get_submodule(where.o)
    proj = getattr(where, site[-1])
    return attn.get_submodule(proj) if proj else attn.get_submodule(where.qkv)


def _replace_output(output: Any, new: torch.Tensor) -> Any:
    if isinstance(output, tuple):
        return (new, *output[1:])
    return new


def _first(output: Any) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


def _heads(x: torch.Tensor, head_dim: int) -> torch.Tensor:
    return x.view(*x.shape[:-1], -1, head_dim)


@contextlib.contextmanager
def hooks(model: torch.nn.Module, fwd_hooks: list[tuple[str, HookFn]]) -> Iterator[None]:
    """Register TL-named hooks on the HF modules for the duration of the block (sites: module docstring)."""
    handles = []
    where = layout(model)
    layers = decoder_layers(model, where)
    try:
        for name, fn in fwd_hooks:
            if name in ("ln_final.hook_out", "hook_embed"):
                module = model.get_submodule(where.final_norm if name == "ln_final.hook_out" else where.embed)
                handles.append(module.register_forward_hook(
                    lambda m, a, out, fn=fn, name=name: _call_out(fn, out, name)))
                continue
            match = _NAME_RE.match(name)
            if match is None or match.group(2) == "attn.hook_pattern":
                raise ValueError(f"hook {name!r} is not served on the plain-forward path; use sensor.bridge for it "
                                 f"(served: hook_embed, blocks.L.{{{','.join(LAYER_SITES)}}}, ln_final.hook_out; "
                                 "attn.hook_pattern rows through sensor.run_with_cache only)")
            layer, site = int(match.group(1)), match.group(2)
            if not 0 <= layer < len(layers):
                raise ValueError(f"hook {name!r}: layer {layer} out of range 0..{len(layers) - 1}")
            module = _site_module(layers[layer], where, site)
            if module is None:
                raise ValueError(f"hook {name!r}: layer {layer} has no module for {site} "
                                 "(softmax-attention sites on a linear-attention layer, or the reverse)")
            handles += _register(layers[layer], where, site, module, fn, name)
        yield
    finally:
        for h in handles:
            h.remove()


def _register(layer: Any, where: Layout, site: str, module: Any, fn: HookFn, name: str) -> list[Any]:
    """Torch hooks that call ``fn`` with the site's activation (in its TL shape) and write back a replacement."""
    if site in ("hook_resid_pre", "mlp.hook_post"):  # the input of the layer / of the MLP's down projection
        return [module.register_forward_pre_hook(
            lambda m, args, kwargs: _call_pre(fn, args, kwargs, name), with_kwargs=True)]
    if site in ("hook_resid_post", "hook_attn_out", "hook_mlp_out"):
        return [module.register_forward_hook(lambda m, a, out: _call_out(fn, out, name))]
    if site == "attn.hook_z":
        dh = getattr(layer, where.attn).head_dim
        return [module.register_forward_pre_hook(
            lambda m, args, kwargs: _call_pre(fn, args, kwargs, name, lambda x: _heads(x, dh)), with_kwargs=True)]
    if site == "linear_attn.hook_recurrence_out" and where.linear_attn:
        mixer = getattr(layer, where.linear_attn)
        shape: dict[str, tuple[int, int]] = {}

        def remember(m: torch.nn.Module, args: tuple, kwargs: dict) -> None:
            x = args[0] if args else kwargs["hidden_states"]
            shape["bp"] = (x.shape[0], x.shape[1])

        view = (lambda x: x.view(*shape["bp"], -1, x.shape[-1]))
        return [mixer.register_forward_pre_hook(remember, with_kwargs=True),
                module.register_forward_pre_hook(lambda m, args, kwargs: _call_pre(fn, args, kwargs, name, view),
                                                 with_kwargs=True)]
    dh = getattr(layer, where.attn).head_dim
    if getattr(where, site[-1]):  # a separate q/k/v projection
        return [module.register_forward_hook(lambda m, a, out: _call_out(fn, out, name, lambda x: _heads(x, dh)))]
    part = "qkv".index(site[-1])

    def joint(m: torch.nn.Module, a: tuple, out: torch.Tensor) -> torch.Tensor | None:  # fused qkv (GPT-2): thirds of the last dim
        pieces = list(out.split(out.shape[-1] // 3, dim=-1))
        new = fn(_heads(pieces[part], dh), name)
        if new is None:
            return None
        pieces[part] = new.reshape(pieces[part].shape).to(out.dtype)
        return torch.cat(pieces, dim=-1)
    return [module.register_forward_hook(joint)]


def _call_pre(fn: HookFn, args: tuple, kwargs: dict, name: str,
              view: Callable[[torch.Tensor], torch.Tensor] | None = None):
    x = args[0] if args else kwargs["hidden_states"]
    new = fn(view(x) if view else x, name)
    if new is None:
        return None
    new = new.reshape(x.shape)
    return ((new, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": new})


def _call_out(fn: HookFn, output: Any, name: str, view: Callable[[torch.Tensor], torch.Tensor] | None = None):
    x = _first(output)
    new = fn(view(x) if view else x, name)
    return None if new is None else _replace_output(output, new.reshape(x.shape))


@contextlib.contextmanager
def plain_attention(model: PreTrainedModel, implementation: str = "sdpa") -> Iterator[None]:
    """Run the HF model with ``implementation`` attention (the bridge leaves it eager)."""
    previous = model.config._attn_implementation
    model.set_attn_implementation(implementation)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)


@contextlib.contextmanager
def attention_implementation(model: PreTrainedModel, name: str, fn: Callable[..., tuple[torch.Tensor, torch.Tensor | None]]) -> Iterator[None]:
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
