"""The written labelling guideline (a placeholder: the judge helper's module replaces this stub at merge).

One home of the labelling definitions of G and y, rendered on the labelling
page (:func:`guideline_html`) and in the docs (:func:`guideline_markdown`).
"""

from __future__ import annotations

import html

_TEXT = (
    "# Labelling guideline (placeholder)\n\n"
    "G (externalization gap) at boundary b: 1 when derived state the agent needs lives only in its reasoning "
    "up to step b, not in any action, observation or given text; else 0.\n\n"
    "y (future necessity) at boundary b: 1 when the steps after b re-derive, add reasoning for, or re-plan "
    "what was already worked out before b; else 0.\n"
)


def guideline_markdown() -> str:
    """The guideline as Markdown (for the docs and the judge's rubric)."""
    return _TEXT


def guideline_html() -> str:
    """The guideline as an HTML fragment (for the labelling page); the text is escaped, no markup is passed through."""
    return "".join(f"<p>{html.escape(p.lstrip('# '))}</p>" for p in _TEXT.split("\n\n") if p.strip())
