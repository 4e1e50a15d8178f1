"""The labelling guideline of G and y: its one home (``guideline.md`` beside this module), as Markdown or HTML.

The guideline defines derived state, carriers, re-derivation, added reasoning
and re-planning, says what G = 0/1 and y = 0/1 mean, works examples from the
demo set and lists edge cases. Everything that states the rules reads it from
here: the labelling page (:func:`guideline_html`), the judge's rubric
(:mod:`interp.annotation.judge`, :func:`guideline_markdown`), one section at a
time (:func:`section`) and the docs
(docs/guides/externalization-and-labelling.md, "The labelling guideline"). The rule labelers'
docstrings (:mod:`interp.externalization.labeler`, :mod:`probes.targets`)
cite its definitions by section name instead of restating them.
"""

from __future__ import annotations

import re
from importlib import resources

GUIDELINE_FILE = "guideline.md"


def guideline_markdown() -> str:
    """The guideline as Markdown (the package-data file ``interp/annotation/guideline.md``, read each call)."""
    return resources.files("interp.annotation").joinpath(GUIDELINE_FILE).read_text(encoding="utf-8")


def guideline_html() -> str:
    """The guideline as an HTML fragment (CommonMark via markdown-it-py; raw HTML in the source is escaped)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).render(guideline_markdown())


def section(title: str) -> str:
    """The Markdown of the guideline's ``##``/``###`` section ``title`` (heading excluded), up to the next heading
    of the same or a higher level; ``KeyError`` naming the known titles when there is none."""
    text = guideline_markdown()
    headings = list(re.finditer(r"^(#{2,3}) (.+)$", text, re.M))
    for i, h in enumerate(headings):
        if h.group(2).strip() != title:
            continue
        level = len(h.group(1))
        end = next((n.start() for n in headings[i + 1:] if len(n.group(1)) <= level), len(text))
        return text[h.end():end].strip()
    raise KeyError(f"guideline: no section {title!r}; sections: {', '.join(h.group(2) for h in headings)}")
