"""Context limits shared by every command that runs the model: over-long renders are skipped and recorded, never truncated.

The rule applies per boundary: a long run keeps the boundaries whose renders
fit and records the others (``skipped`` entries made by :func:`skip_record`,
with the one wording of :func:`over_limit`). Extraction, block scoring, KL
Repair, harm and continuations all use it.
"""

from __future__ import annotations

from typing import Any

from interp.sensor.protocol import ForwardSensor

DEFAULT_MAX_TOKENS = 42_000


def model_max_positions(sensor: ForwardSensor) -> int:
    """Longest context the model's position scheme supports (from its config)."""
    return int(getattr(sensor.hf_model.config, "max_position_embeddings", 1 << 30))


def context_limit(sensor: ForwardSensor, max_tokens: int = DEFAULT_MAX_TOKENS) -> int:
    """Most tokens one forward may take: ``max_tokens``, capped by the model's positions."""
    return min(max_tokens, model_max_positions(sensor))


def over_limit(n_tokens: int, limit: int) -> str | None:
    """Why a forward of ``n_tokens`` is skipped, or None when it fits ``limit``."""
    return f"context of {n_tokens} tokens exceeds the limit of {limit}" if n_tokens > limit else None


def skip_record(task_id: str, after_step: int, n_tokens: int, reason: str) -> dict[str, Any]:
    """One ``skipped`` entry of a result file: ``{task_id, after_step, n_tokens, reason}``."""
    return {"task_id": task_id, "after_step": after_step, "n_tokens": n_tokens, "reason": reason}
