"""The one way numbers and confidence intervals are written in tables, report.md and figure labels."""

from __future__ import annotations

from collections.abc import Sequence


def num(value: float | None, digits: int = 3, signed: bool = False) -> str | None:
    """value with fixed decimals (``signed``: always with its sign, a gain); a value that rounds to zero prints
    without a minus; None stays None."""
    if value is None:
        return None
    text = f"{value:{'+' if signed else ''}.{digits}f}"
    return ("+" if signed else "") + text.lstrip("+-") if float(text) == 0 else text


def pct(value: float | None, signed: bool = False) -> str | None:
    """A fraction as a percentage with one decimal ("67.3%"; ``signed``: always with its sign, a change "+4.1%")."""
    return None if value is None else f"{100 * value:{'+' if signed else ''}.1f}%"


def shown(value: str | None) -> str:
    """A formatted number as a table cell or label shows it: ``NA`` for a missing one."""
    return NA if value is None else value


NA = "n/a"


def ci_text(ci: Sequence[float | None] | None, scale: float = 1.0, unit: str = "", signed: bool = False) -> str | None:
    """'[lo, hi]' with three decimals, or one decimal and a unit when scaled to % / pp (``signed``: ends with their
    sign, the CI of a gain); None without both ends."""
    if not ci or ci[0] is None or ci[1] is None:
        return None
    digits = 3 if scale == 1.0 else 1
    return f"[{num(scale * ci[0], digits, signed)}, {num(scale * ci[1], digits, signed)}]{unit}"
