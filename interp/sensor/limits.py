"""Context limits shared by every command that runs the model: over-long renders are skipped and recorded, never truncated.

The rule applies per boundary: a long run keeps the boundaries whose renders
fit and records the others (``skipped`` entries made by :func:`skip_record`,
with the one wording of :func:`over_limit`). Extraction, block scoring, KL
Repair, harm and continuations all use it.

The limit is a setting (``--max-tokens`` on every command that runs the
model; ``max_tokens`` in the APIs), defaulting to :data:`DEFAULT_MAX_TOKENS`.
The reference study skips ICLR scoring "when the scorer context exceeds 42K
tokens" without saying which 42K: the default reads it as 42,000 (the decimal
figure it reports); 42 x 1024 = 43,008 is the other reading, one flag away
(``--max-tokens 43008``). The demo's trajectories are far below either, so
the two give the same results there. What is counted is the whole input a
forward would be given (for ICLR: the history and the current completed
step, action and observation included; ``interp.extraction.entropy``).
"""

from __future__ import annotations

from typing import Any

from interp.sensor.protocol import ForwardSensor

DEFAULT_MAX_TOKENS = 42_000  # "42K" read as 42,000, not 43,008 (module docstring)


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
