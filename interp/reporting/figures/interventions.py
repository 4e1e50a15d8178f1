"""Figure 4: controlled continuations under edited histories, from interventions.json."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp.reporting import reference
from interp.reporting.figures.theme import BOTTOM_LEGEND, PALETTE, TEMPLATE, reference_markers

# The conditions of DESIGN.md in reading order; others follow alphabetically.
ORDER = ("full", "keep_latest_reasoning", "delete_latest_reasoning", "delete_all_reasoning", "clear_after_code",
         "iclr", "random", "hide_observation")


def intervention_conditions(result: dict) -> dict[str, dict]:
    """{condition: {mean, ci, n, parse_failures, reacquisition_rate}} in ORDER, from interventions.json's ``summary``.

    The layout is ``interp.continuations.run.FIELDS``: ``summary`` {name: {"mean_score" (0..1 or null),
    "ci" ([lo, hi] or null), "n_states", "parse_failures", "reacquisition_rate" (fraction or null), ...}}.
    Conditions without a score are left out.
    """
    conditions = {name: {"mean": entry["mean_score"], "ci": entry["ci"], "n": entry["n_states"],
                         "parse_failures": entry["parse_failures"], "reacquisition_rate": entry["reacquisition_rate"]}
                  for name, entry in result["summary"].items()}
    names = sorted(conditions, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    return {name: conditions[name] for name in names if conditions[name]["mean"] is not None}


def interventions_figure(result: dict) -> go.Figure:
    """Mean continuation score by history condition with CIs, and the re-acquisition rate where it was measured.

    Reads interventions.json's ``summary`` (see ``intervention_conditions``); reference
    values come from ``interp.reporting.reference``. The second panel shows the conditions
    with a re-acquisition rate (hidden feedback).
    """
    conditions = intervention_conditions(result)
    if not conditions:
        raise ValueError("no condition with a score in 'summary'")
    names = list(conditions)
    rates = [n for n in names if conditions[n].get("reacquisition_rate") is not None]
    fig = make_subplots(rows=1, cols=2 if rates else 1, column_widths=[0.72, 0.28] if rates else None,
                        horizontal_spacing=0.1, subplot_titles=(
                            "a  continuation score by history condition",
                            *(["b  re-acquisition under hidden feedback"] if rates else [])))
    label = {n: _label(n, conditions[n]) for n in names}
    mean = [conditions[n]["mean"] for n in names]
    ci = [conditions[n].get("ci") for n in names]
    fig.add_trace(go.Bar(
        x=[label[n] for n in names], y=mean, marker_color=PALETTE[0], name="ours (mean, 95% CI)",
        error_y=dict(type="data", symmetric=False, color="#333333", thickness=1.5, width=8,
                     array=[c[1] - m if c else 0 for c, m in zip(ci, mean)],
                     arrayminus=[m - c[0] if c else 0 for c, m in zip(ci, mean)]),
        hovertemplate="%{x}: %{y:.3f}<extra></extra>",
    ), 1, 1)
    known = [n for n in names if n in reference.CONTINUATIONS]
    if known:
        fig.add_trace(reference_markers([label[n] for n in known], [reference.CONTINUATIONS[n] for n in known]), 1, 1)
    fig.update_yaxes(title_text="continuation score (rubric, 0–1)", range=[0, 1.05], row=1, col=1)
    fig.update_xaxes(tickangle=0, row=1, col=1)
    if rates:
        fig.add_trace(go.Bar(
            x=[label[n] for n in rates], y=[100 * conditions[n]["reacquisition_rate"] for n in rates],
            marker_color=PALETTE[1], name="re-acquisition rate", texttemplate="%{y:.0f}%", textposition="outside",
        ), 1, 2)
        fig.update_yaxes(title_text="re-running the hidden command (% of continuations)", range=[0, 110], row=1, col=2)
    fig.update_layout(
        template=TEMPLATE, height=580,
        title=dict(text="Controlled continuations: fixed states continued under edited histories",
                   subtitle=dict(text="n = continued states per condition; re-acquisition: continuations that "
                                      "re-issue the action whose output was hidden")),
        legend=BOTTOM_LEGEND,
        margin=dict(b=200),
    )
    return fig


def _label(name: str, entry: dict) -> str:
    """Tick label: the condition name on up to two lines, then n and parse failures."""
    words = name.split("_")
    half = (len(words) + 1) // 2
    text = " ".join(words[:half]) + ("<br>" + " ".join(words[half:]) if words[half:] else "")
    failures = entry.get("parse_failures")
    return text + f"<br>n = {entry.get('n', '?')}" + (f"<br>{failures} unparsed" if failures else "")
