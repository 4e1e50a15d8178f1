"""Which Gated-DeltaNet and conv kernels a loaded model's linear-attention layers actually call.

transformers' Qwen3.5 modeling module (``modeling_qwen3_5``) defines four
module-level kernels, each wrapped by
``transformers.integrations.hub_kernels.use_kernel_func_from_hub_with_fallback``:

==================================  =================================  ==========================
module-level name                   fast implementation (package)       used for
==================================  =================================  ==========================
``torch_chunk_gated_delta_rule``    ``fla.ops.gated_delta_rule``        a sequence (prefill)
``torch_recurrent_gated_delta_rule`` ``fla.ops.gated_delta_rule``       one cached token
``causal_conv1d_fn``                ``causal_conv1d`` (causal-conv1d)   a sequence
``causal_conv1d_update``            ``causal_conv1d`` (causal-conv1d)   one cached token
==================================  =================================  ==========================

The wrapper imports the package once, when the modeling module is imported,
and keeps the result in its closure (``implementation``; with the ``kernels``
package installed the name is a module whose ``forward`` calls that wrapper): the package's
function when it imported, else transformers' own torch code (correct, much
slower). A float64 model of ours swaps the two delta-rule kernels for
``interp.sensor.kernels.deltanet.gated_delta_rule_fp64`` during its own forwards.

:func:`bound_kernels` reads that closure for the modules of a loaded model, so
the report names what runs, not what is installed. Values:

- ``fla``: flash-linear-attention (Triton, CUDA);
- ``causal-conv1d``: the causal-conv1d CUDA extension;
- ``torch``: transformers' torch fallback;
- ``interp-fp64``: our float64 recurrence (float64 models only);
- other packages by their top-level module name.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING

import torch

from interp.sensor.kernels.deltanet import gated_deltanet_modules

if TYPE_CHECKING:
    from transformers import PretrainedConfig

KERNELS = {"torch_chunk_gated_delta_rule": "gated_delta_rule", "torch_recurrent_gated_delta_rule": "gated_delta_rule",
           "causal_conv1d_fn": "conv1d", "causal_conv1d_update": "conv1d"}  # module-level name -> family
PACKAGES = {"fla": "fla", "causal_conv1d": "causal-conv1d", "transformers": "torch"}  # top-level module -> label


def _closure(fn: object) -> dict[str, object]:
    """The free variables a function closes over, by name (``{}`` for anything else)."""
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
    names = code.co_freevars if code is not None else ()
    return dict(zip(names, (c.cell_contents for c in cells)))


def _wrapper(fn: object) -> dict[str, object]:
    """The closure of the transformers kernel wrapper behind ``fn`` (``{}`` where ``fn`` is not one).

    Where the ``kernels`` package is installed (transformers >= 5.25 requires it), the wrapper is itself
    wrapped: the module-level name is an ``nn.Module`` instance whose class's ``forward`` closes over the
    transformers wrapper as ``func``. That layer is followed to the same closure.
    """
    current: object = fn
    for _ in range(4):  # wrapper depth is 1 (transformers alone) or 2 (with kernels)
        target = current if hasattr(current, "__code__") else getattr(type(current), "forward", None)
        bound = _closure(target)
        if "implementation" in bound:
            return bound
        if "func" not in bound:
            break
        current = bound["func"]
    return {}


def implementation(fn: object, device_type: str | None = None) -> object:
    """The function a transformers kernel wrapper calls on ``device_type`` inputs, or ``fn`` itself.

    transformers >= 5.25 records the devices a package kernel runs on (``supported_devices``) and calls
    its torch code for inputs elsewhere (fla on CPU tensors): then that torch code is what runs.
    """
    bound = _wrapper(fn)
    if not bound:
        return fn
    devices = bound.get("supported_devices")
    if device_type is not None and isinstance(devices, tuple) and device_type not in devices:
        return bound.get("torch_function", fn)
    return bound["implementation"]


def module_kernels(owner: ModuleType, device_type: str | None = None) -> dict[str, str]:
    """``{kernel name: implementation label}`` for the kernels a modeling module defines (see module docstring)."""
    found = {}
    for name in KERNELS:
        fn = getattr(owner, name, None)
        if fn is not None:
            root = getattr(implementation(fn, device_type), "__module__", "") or ""
            found[name] = PACKAGES.get(root.split(".")[0], root.split(".")[0] or "unknown")
    return found


def bound_kernels(model: torch.nn.Module, dtype: torch.dtype | None = None) -> dict[str, str]:
    """What ``model``'s Gated-DeltaNet layers call on its device, per kernel; ``{}`` for a model without such layers.

    ``dtype`` float64: the delta-rule kernels are our float64 recurrence (bound per model at load).
    """
    owners = {owner.__name__: owner for _, owner in gated_deltanet_modules(model)}
    device = next((p.device.type for p in model.parameters()), None)
    found: dict[str, str] = {}
    for owner in owners.values():
        found.update(module_kernels(owner, device))
    if dtype == torch.float64:
        found.update({name: "interp-fp64" for name in found if KERNELS[name] == "gated_delta_rule"})
    return found


def config_kernels(config: PretrainedConfig) -> dict[str, str]:
    """:func:`bound_kernels` from a config alone (no weights): the modeling module of its causal-LM class, if hybrid."""
    from transformers import AutoModelForCausalLM

    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if "linear_attention" not in (getattr(text, "layer_types", None) or []):
        return {}
    cls = AutoModelForCausalLM._model_mapping.get(type(text), None)
    owner = sys.modules.get(cls.__module__) if cls is not None else None
    return module_kernels(owner) if owner is not None else {}


def kernels_line(found: dict[str, str]) -> str:
    """One line for logs: ``Gated-DeltaNet: fla; conv: causal-conv1d`` (per kernel where a family's two differ)."""
    if not found:
        return "none (no Gated-DeltaNet layers)"
    parts = []
    for family, label in (("gated_delta_rule", "Gated-DeltaNet"), ("conv1d", "conv")):
        mine = {name: impl for name, impl in found.items() if KERNELS[name] == family}
        values = sorted(set(mine.values()))
        if len(values) == 1:
            parts.append(f"{label}: {values[0]}")
        elif values:
            parts.append(f"{label}: " + ", ".join(f"{name}={impl}" for name, impl in mine.items()))
    return "; ".join(parts)
