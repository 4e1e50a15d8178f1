"""``qwen3.5-9b``: ``Qwen/Qwen3.5-9B`` as a text-only causal LM.

A local directory from ``--model-path`` or ``$INTERP_QWEN35_9B_PATH``, else the
local HF cache; the hub is asked only with ``allow_download=True``.
"""

from __future__ import annotations

import os
from pathlib import Path

from interp.sensor.specs.base import ModelSpec

HUB_ID = "Qwen/Qwen3.5-9B"
ENV = "INTERP_QWEN35_9B_PATH"


def resolve() -> Path | None:
    """``$INTERP_QWEN35_9B_PATH`` if set (and a checkpoint), else the local HF cache, else None."""
    env = os.environ.get(ENV)
    if env:
        return Path(env) if (Path(env) / "config.json").exists() else None
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(HUB_ID, local_files_only=True))
    except Exception:  # not in the local HF cache: unavailable offline
        return None


SPEC = ModelSpec(
    "qwen3.5-9b",
    f"{HUB_ID} text-only causal LM (32 layers: 3 Gated-DeltaNet + 1 full attention, d=4096)",
    f"pass --model-path DIR or set ${ENV} to a local checkpoint (no command downloads from the model hub)",
    resolve,
    hub_id=HUB_ID,
)
