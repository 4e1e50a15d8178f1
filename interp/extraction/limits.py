"""Context limits shared by extraction and block scoring: renders longer than these are skipped, never truncated."""

from __future__ import annotations

from typing import Any

DEFAULT_MAX_TOKENS = 42_000


def model_max_positions(sensor: Any) -> int:
    """Longest context the model's position scheme supports (from its config)."""
    return int(getattr(sensor.hf_model.config, "max_position_embeddings", 1 << 30))


def context_limit(sensor: Any, max_tokens: int = DEFAULT_MAX_TOKENS) -> int:
    """Most tokens one forward may take: ``max_tokens``, capped by the model's positions."""
    return min(max_tokens, model_max_positions(sensor))
