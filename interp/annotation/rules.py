"""The labelling rules the page shows, cut from the one place they are written: the labelling guideline.

G (externalization gap): the guideline's sections *Derived state*, *Carriers*
and *G: externalization gap* (:mod:`interp.annotation.guideline`).
y (future necessity): its sections *Re-derivation*, *Added reasoning*,
*Re-planning* and *y: future necessity*, then the rule labeler's reading of
them (the three rules of :mod:`probes.targets` with its replanning cues,
``probes.targets.REPLAN_CUES``), marked as a proxy.
Nothing here restates a rule; a change to the guideline or a docstring changes the page.
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
    """reST and Markdown markup a reader does not need dropped (backquotes, ``::`` literal markers, emphasis)."""
    text = rst.replace("`", "").replace("::\n", ":\n")
    return re.sub(r"(?<!\w)\*{1,2}([^*\n]+)\*{1,2}(?!\w)", r"\1", text)


def labelling_rules() -> dict[str, str]:
    """``{field: plain text}``: what counts for each label, for the page (the guideline's sections; y adds the rule labeler)."""
    from interp.annotation.guideline import section
    from probes import targets

    def parts(*titles: str) -> str:
        return "\n\n".join(f"{t}:\n\n{section(t)}" for t in titles)

    g = parts("Derived state", "Carriers", "G: externalization gap")
    y = (parts("Re-derivation", "Added reasoning", "Re-planning", "y: future necessity")
         + "\n\nThe rule labeler's reading of it (a transparent proxy, not the definition):\n\n"
         + _section(targets.__doc__, "The three rules", "A step without reasoning")
         + "\n\nReplanning cues: " + ", ".join(repr(c) for c in targets.REPLAN_CUES))
    return {"externalization_gap": _plain(g), "future_necessity": _plain(y)}
