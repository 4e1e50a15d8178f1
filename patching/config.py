"""Settings of the patching stages, checked on construction: the CLI, the sweep, notebooks and
``interp.pipelines.stages`` get the same error for the same bad value.

Each error is a ``ValueError`` whose message starts with the field's name (``positions must be ...``), so the
CLI's ``build()`` (``interp.pipelines.cli.common``) names the option (``--positions``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from interp.data.conditions import check_condition_name
from interp.data.deletions import DRSR_UNIT_KINDS, parse_unit_kinds
from interp.sensor.limits import DEFAULT_MAX_TOKENS

PATCH_SITES = ("resid_pre", "attn_out", "mlp_out")
PATCH_METHODS = ("fast", "reference")


def _count(name: str, value: object, low: int) -> None:
    """ValueError naming ``name`` unless ``value`` is an int >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


@dataclass(frozen=True)
class PatchConfig:
    """KL Repair (``interp patch``): the deletion condition giving P_del, the site kind patched (every layer's
    site of that kind unless the stage is given a site list), the method, how many final positions are
    patched and the token limit of a boundary's render (longer ones are skipped and listed)."""

    condition: str = "delete_all_reasoning"
    site: str = "resid_pre"
    method: str = "fast"
    positions: int = 1
    max_tokens: int = DEFAULT_MAX_TOKENS

    def __post_init__(self) -> None:
        check_condition_name(self.condition)  # its message names the condition
        if self.site not in PATCH_SITES:
            raise ValueError(f"site {self.site!r}: use {', '.join(PATCH_SITES[:-1])} or {PATCH_SITES[-1]}")
        if self.method not in PATCH_METHODS:
            raise ValueError(f"method {self.method!r}: use {' or '.join(PATCH_METHODS)}")
        _count("positions", self.positions, 1)
        _count("max_tokens", self.max_tokens, 1)


@dataclass(frozen=True)
class HarmConfig:
    """Set-level deletion harm (``interp harm``): the largest set size, sampled sets per size >= 2, the sampling
    seed, the unit kinds deleted (default DRSR's: reasoning, observations, tool exchanges), the pair-ordering margin (nats/token; None: ``patching.harm.MARGIN``) and the
    token limit of a boundary's render."""

    max_k: int = 4  # DRSR's sets up to 4 units (patching.harm.DRSR_MAX_K)
    budget: int = 10
    seed: int = 0
    units: tuple[str, ...] = DRSR_UNIT_KINDS
    margin: float | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS

    def __post_init__(self) -> None:
        _count("max_k", self.max_k, 1)
        _count("budget", self.budget, 0)
        try:
            object.__setattr__(self, "units", parse_unit_kinds(self.units))  # a comma list or names, normalised
        except ValueError as exc:
            raise ValueError(f"units: {exc}") from None
        if self.margin is not None and not (isinstance(self.margin, (int, float)) and math.isfinite(self.margin)
                                            and self.margin >= 0):
            raise ValueError(f"margin must be a finite number >= 0 (nats/token), got {self.margin!r}")
        _count("max_tokens", self.max_tokens, 1)
