"""Reasoning persistence in long-horizon LLM agents: hooked sensor, trajectories, rendering, conditions.

Typical use::

    from interp import load_model, load_trajectories, render, apply_condition
    sensor = load_model("smollm2-135m")
    traj = load_trajectories("data/demo/trajectories.jsonl")[0]
    edited, log = apply_condition("delete_all_reasoning", traj, after_step=3)
    prompt = render(edited, 3, sensor.tokenizer)
    logits, cache = sensor.run_with_cache(prompt)   # TransformerLens names, last token only

The public names (``load_model``, ``run_with_cache``, ``run_with_hooks``,
``hooks``, ``render``, ``apply_condition``, ``Store``, ``extract_to_store``,
``patch``, ``kl_repair_trajectory``, ``boundary_harm``, ``run_probe``, ...)
are in ``__all__``.

The package is layered; each layer imports only the ones before it::

    interp.data          trajectories, rendering, conditions, labels, parsing
    interp.sensor        model specs, load_model -> Sensor, hooks, forward engine, kernels
    interp.extraction    boundary features, pooling, block entropy, activation store
    interp.externalization, interp.continuations   G labels + risk; controlled continuations
    (probes/, patching/  probes and patching, on the layers above)
    interp.reporting     reference numbers, figures, tables, report.md
    interp.pipelines     stages (one function per analysis), CLI, demo, sweep

``import interp`` is light: the names below are imported on first use, so
``interp --help`` and ``interp validate`` do not pay for torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it (resolved lazily by __getattr__)
_LAZY = {
    "CONDITIONS": "interp.data.conditions", "EditLog": "interp.data.conditions",
    "apply_condition": "interp.data.conditions",
    "Rendered": "interp.data.render", "Segment": "interp.data.render", "render": "interp.data.render",
    "Trajectory": "interp.data.trajectory", "TrajectoryError": "interp.data.trajectory",
    "load_trajectories": "interp.data.trajectory", "validate_file": "interp.data.trajectory",
    "LoadedSensor": "interp.sensor.models", "ModelUnavailable": "interp.sensor.models", "Sensor": "interp.sensor.models",
    "load_model": "interp.sensor.models", "load_tokenizer": "interp.sensor.models",
    # the fast TransformerLens-style API (interp.sensor.api) and the analyses' entry points
    "Hook": "interp.sensor.api", "hooks": "interp.sensor.api", "run_with_cache": "interp.sensor.api",
    "run_with_hooks": "interp.sensor.api", "ExtractConfig": "interp.extraction.extract",
    "extract_trajectory": "interp.extraction.extract", "extract_to_store": "interp.extraction.batch",
    "Store": "interp.extraction.store", "PatchResult": "patching.patch", "patch": "patching.patch",
    "kl_repair_trajectory": "patching.kl_repair", "boundary_harm": "patching.harm", "run_probe": "probes.report",
    "FeatureSet": "probes.data", "continue_states": "interp.continuations.run",
    # hand labels: the labelling page from a notebook
    "start_annotation": "interp.annotation.server", "annotation_iframe": "interp.annotation.notebook",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    """Import a public name's module on first access (keeps ``import interp`` free of torch)."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'interp' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
