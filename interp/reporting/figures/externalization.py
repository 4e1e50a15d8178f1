"""Figure 3: state externalization (G) and future behavioural risk, from externalization.json.

The layout is ``interp.externalization.risk.FIELDS``: ``p_y_given_g1``/``p_y_given_g0``
{"estimate", "ci", "n", ...}, ``within_task_gap`` {"estimate", "ci", "n_tasks", "per_task":
{task_id: diff}}, ``hidden_score_gap`` {"logodds": {same as within_task_gap}, "probability": {...}}
or null. ``externalization_sections`` turns it into the panels' sections "risk", "within_task",
"hidden_score" (per-task paired gaps of the probe score in probability units, the reference
study's, when the file has them; else on the log-odds scale, ``units`` says which). Reference
values come from ``interp.reporting.reference`` and are drawn only in their own units
(probability), never on a log-odds axis.

Probabilities, risk differences and CIs are fractions, plotted in % and percentage points.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp.reporting import reference
from interp.reporting.figures.theme import BOTTOM_LEGEND, GREY, PALETTE, TEMPLATE, reference_markers

GROUPS = ("G0", "G1")
GROUP_LABEL = {"G0": "G = 0<br>externalized", "G1": "G = 1<br>only in reasoning"}
GROUP_COLOUR = {"G0": PALETTE[0], "G1": PALETTE[3]}


def externalization_sections(result: dict) -> dict:
    """Sections "risk", "within_task", "hidden_score" of externalization.json (module docstring); empty ones left out."""
    risk = {g: {"p": entry["estimate"], "ci": entry.get("ci"), "n": entry.get("n")}
            for g, key in (("G1", "p_y_given_g1"), ("G0", "p_y_given_g0"))
            if (entry := result.get(key)) and entry.get("estimate") is not None}
    sections = {
        "risk": risk,
        "within_task": _paired(result.get("within_task_gap")),
        "hidden_score": _hidden_score(result.get("hidden_score_gap") or {}),
    }
    return {key: value for key, value in sections.items() if value}


def externalization_figure(result: dict) -> go.Figure:
    """Risk by G with CIs, within-task paired differences and probe scores by G (the panels the file has data for)."""
    sections = externalization_sections(result)
    titles = {"risk": "future behavioural risk by G", "within_task": "within-task difference, G=1 − G=0",
              "hidden_score": "probe score on the boundary by G"}
    if not sections:
        raise ValueError("none of the fields 'p_y_given_g1', 'p_y_given_g0', 'within_task_gap', 'hidden_score_gap' "
                         "holds data")
    fig = make_subplots(rows=1, cols=len(sections), horizontal_spacing=0.1,
                        subplot_titles=[f"{'abc'[i]}  {titles[key]}" for i, key in enumerate(sections)])
    for col, (key, section) in enumerate(sections.items(), start=1):
        if key == "risk":
            _risk(fig, section, col)
        elif key == "within_task":
            _paired_panel(fig, section, col, 100, "pp", reference.WITHIN_TASK_GAP,
                          "risk difference, G=1 − G=0 (percentage points)")
        elif section["units"] == "probability":
            _paired_panel(fig, section, col, 1, "", reference.HIDDEN_SCORE_GAP,
                          "probe-score difference, G=1 − G=0 (probability)")
        else:  # the reference value is a probability difference: not drawn on a log-odds axis
            _paired_panel(fig, section, col, 1, "", None, "probe-score difference, G=1 − G=0 (log-odds)")
    fig.update_xaxes(tickangle=0)
    fig.update_layout(
        template=TEMPLATE, height=560,
        title=dict(text="State externalization: derived state held only in reasoning and later behavioural risk",
                   subtitle=dict(text="G = 1 when task-specific derived state is not yet in code, files, "
                                      "tool output or feedback; error bars: 95% CI over tasks")),
        legend=BOTTOM_LEGEND,
        margin=dict(b=160),
    )
    return fig


def _hidden_score(gap: dict) -> dict | None:
    """The probe-score gap in probability units when present (the reference's), else log-odds; ``units`` says which."""
    for units in ("probability", "logodds"):
        if section := _paired(gap.get(units)):
            return {**section, "units": units}
    return None


def _paired(entry: dict | None) -> dict | None:
    """A paired-gap entry {estimate, ci, n_tasks, per_task: {task: diff}} as {gap, ci, n_tasks, per_task: [{task_id, diff}]}."""
    if not entry or entry.get("estimate") is None:
        return None
    per_task = entry.get("per_task") or {}
    rows = [{"task_id": t, "diff": d} for t, d in per_task.items()] if isinstance(per_task, dict) else per_task
    return {"gap": entry["estimate"], "ci": entry.get("ci"), "n_tasks": entry.get("n_tasks"), "per_task": rows}


def _risk(fig: go.Figure, risk: dict, col: int) -> None:
    groups = [g for g in GROUPS if g in risk]
    labels = [f"{GROUP_LABEL[g]}<br>n = {risk[g].get('n', '?')}" for g in groups]
    p = [100 * risk[g]["p"] for g in groups]
    ci = [risk[g].get("ci") for g in groups]
    fig.add_trace(go.Bar(
        x=labels, y=p, marker_color=[GROUP_COLOUR[g] for g in groups], name="risk by G (ours, 95% CI)",
        error_y=dict(type="data", symmetric=False, color="#333333", thickness=1.5, width=8,
                     array=[100 * c[1] - v if c else 0 for c, v in zip(ci, p)],
                     arrayminus=[v - 100 * c[0] if c else 0 for c, v in zip(ci, p)]),
        hovertemplate="%{y:.1f}%<extra></extra>",
    ), 1, col)
    fig.add_trace(reference_markers(labels, [100 * reference.RISK[g] for g in groups]), 1, col)
    fig.update_yaxes(title_text="future behavioural risk (% of boundaries)", rangemode="tozero", row=1, col=col)


def _paired_panel(fig: go.Figure, section: dict, col: int, scale: float, unit: str, ref: float | None,
                  y_title: str) -> None:
    """Per-task paired differences sorted, then their mean with its CI and the reference value (same units) beside it."""
    per_task = sorted(section.get("per_task") or [], key=lambda row: row["diff"])
    mean_x = len(per_task) + 2
    gap, ci = scale * section["gap"], section.get("ci")
    fig.add_trace(go.Scatter(
        x=list(range(1, len(per_task) + 1)), y=[scale * row["diff"] for row in per_task], mode="markers",
        name="one task", showlegend=not any(trace.name == "one task" for trace in fig.data),
        marker=dict(color=PALETTE[2], size=9, line=dict(color="white", width=0.5)),
        hovertext=[str(row.get("task_id")) for row in per_task], hovertemplate="%{hovertext}: %{y:.3g}<extra></extra>",
    ), 1, col)
    fig.add_trace(go.Scatter(
        x=[mean_x], y=[gap], mode="markers", name="mean (95% CI)",
        showlegend=not any(trace.name == "mean (95% CI)" for trace in fig.data),
        marker=dict(symbol="square", size=11, color="black"),
        error_y=dict(type="data", symmetric=False, color="black", thickness=2, width=8,
                     array=[scale * ci[1] - gap] if ci else [0], arrayminus=[gap - scale * ci[0]] if ci else [0]),
    ), 1, col)
    if ref is not None:
        fig.add_trace(reference_markers([mean_x], [scale * ref], showlegend=False), 1, col)
    fig.add_hline(y=0, line=dict(color=GREY, width=1), row=1, col=col)
    digits = 1 if unit else 3
    fig.update_xaxes(title_text=f"tasks (n = {section.get('n_tasks') or len(per_task)}), sorted by difference",
                     range=[0, mean_x + 1.5], tickvals=[mean_x], ticktext=[f"mean<br>{gap:.{digits}f} {unit}".strip()],
                     row=1, col=col)
    fig.update_yaxes(title_text=y_title, row=1, col=col)
