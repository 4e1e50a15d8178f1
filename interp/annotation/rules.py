"""The labelling rules the page shows, cut from the one place they are written: the labelers' docstrings.

G (externalization gap): the *Definitions* section of
:mod:`interp.externalization.labeler` (derived state, carriers, when G = 1).
y (future necessity): the opening of :mod:`probes.targets` (what the later
trajectory must contain) and its three rules (re-derivation, extra reasoning,
re-planning) with the replanning cues (``probes.targets.REPLAN_CUES``).
Nothing here restates a rule; a change to a docstring changes the page.
"""

from __future__ import annotations

import re


def _section(doc: str | None, start: str, end: str) -> str:
    """The text of ``doc`` from the line starting with ``start`` up to (not including) the one starting with ``end``."""
    text = doc or ""
    begin = text.index(start)
    stop = text.index(end, begin)
    return text[begin:stop].strip()


def _plain(rst: str) -> str:
    """reStructuredText markup a reader does not need dropped (double backquotes, ``::`` literal markers, emphasis)."""
    text = rst.replace("``", "").replace("::\n", ":\n")
    return re.sub(r"(?<!\w)\*{1,2}([^*\n]+)\*{1,2}(?!\w)", r"\1", text)


def labelling_rules() -> dict[str, str]:
    """``{field: plain text}``: what counts for each label, for the page (G from the labeler, y from the targets)."""
    from interp.externalization import labeler
    from probes import targets

    g = _section(labeler.__doc__, "Definitions (the reference study's):", "Labels come from")
    y = (_section(targets.__doc__, "``y = 1`` at boundary b", "**Undefined boundaries.**")
         + "\n\nThe rule labeler's reading of it (a transparent proxy, not the definition):\n\n"
         + _section(targets.__doc__, "The three rules", "A step without reasoning")
         + "\n\nReplanning cues: " + ", ".join(repr(c) for c in targets.REPLAN_CUES))
    return {"externalization_gap": _plain(g), "future_necessity": _plain(y)}
