"""Figure 7: set-level deletion harm (DRSR) is not additive, from harm.json."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp.reporting.figures.theme import BOTTOM_LEGEND, GREY, PALETTE, TEMPLATE


def harm_figure(result: dict) -> go.Figure:
    """Joint harm of each deleted set vs the sum of its singleton harms (y = x is additivity), and interaction by size.

    Reads harm.json: ``boundaries`` [{task_id, after_step, sets: [{members: [[step, block], ...],
    harm, interaction}]}] (harm, interaction in nats/token) and ``per_cardinality``
    {"k": {mean_interaction, n_sets, pair_ordering_accuracy}}.
    """
    points: dict[int, list[tuple[float, float, str]]] = {}
    for boundary in result["boundaries"]:
        single = {tuple(s["members"][0]): s["harm"] for s in boundary["sets"] if len(s["members"]) == 1}
        where = f"{boundary.get('task_id')}@{boundary.get('after_step')}"
        for s in boundary["sets"]:
            members = [tuple(m) for m in s["members"]]
            if len(members) > 1 and all(m in single for m in members):
                points.setdefault(len(members), []).append(
                    (sum(single[m] for m in members), s["harm"], f"{where} {members}"))
    if not points:
        raise ValueError("no set of two or more blocks with all its singleton harms in 'boundaries'")
    fig = make_subplots(rows=1, cols=2, column_widths=[0.58, 0.42], horizontal_spacing=0.12, subplot_titles=(
        "a  joint harm vs additive prediction", "b  interaction by set size"))
    values = [v for rows in points.values() for x, y, _ in rows for v in (x, y)]
    lo, hi = min(values + [0.0]), max(values + [0.0])
    pad = 0.05 * (hi - lo or 1.0)
    fig.add_trace(go.Scatter(x=[lo - pad, hi + pad], y=[lo - pad, hi + pad], mode="lines", name="y = x (additive)",
                             line=dict(color=GREY, dash="dash")), 1, 1)
    colour = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(sorted(points))}
    summary = {int(k): v for k, v in (result.get("per_cardinality") or {}).items()}
    category = {k: f"k = {k}" + _accuracy(summary.get(k, {})) for k in points}
    for k in sorted(points):
        x, y, text = zip(*points[k])
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="markers", name=f"k = {k} blocks", legendgroup=str(k), hovertext=text,
            marker=dict(color=colour[k], size=8, opacity=0.75, line=dict(color="white", width=0.5)),
            hovertemplate="%{hovertext}<br>sum of singles %{x:.4f}, joint %{y:.4f}<extra></extra>"), 1, 1)
        fig.add_trace(go.Box(
            x=[category[k]] * len(y), y=[b - a for a, b, _ in points[k]], name=f"k = {k} blocks", legendgroup=str(k),
            showlegend=False, marker_color=colour[k], boxpoints="all", jitter=0.4, pointpos=0,
            marker=dict(size=5, opacity=0.6)), 1, 2)
    means = [k for k in sorted(points) if summary.get(k, {}).get("mean_interaction") is not None]
    if means:
        fig.add_trace(go.Scatter(
            x=[category[k] for k in means], y=[summary[k]["mean_interaction"] for k in means], mode="markers",
            name="mean interaction", marker=dict(symbol="diamond", size=13, color="black")), 1, 2)
    fig.add_hline(y=0, line=dict(color=GREY, width=1), row=1, col=2)
    fig.update_xaxes(title_text="sum of singleton harms (nats/token)", range=[lo - pad, hi + pad], row=1, col=1)
    fig.update_yaxes(title_text="joint harm of the set (nats/token)", range=[lo - pad, hi + pad], row=1, col=1)
    fig.update_xaxes(title_text="set cardinality k (blocks deleted jointly)", row=1, col=2)
    fig.update_yaxes(title_text="interaction = joint − sum of singles (nats/token)", row=1, col=2)
    fig.update_layout(
        template=TEMPLATE, height=580,
        title=dict(text="Set-level deletion harm is not additive over single blocks",
                   subtitle=dict(text=f"{len(result['boundaries'])} boundaries; harm = change in mean-token NLL "
                                      "of the recorded next output when the blocks are deleted")),
        legend=BOTTOM_LEGEND,
        margin=dict(b=160),
    )
    return fig


def _accuracy(entry: dict) -> str:
    """Tick-label line: pair-ordering accuracy of the additive prediction, when known."""
    value = entry.get("pair_ordering_accuracy")
    return f"<br>pair-order acc. {value:.2f}" if value is not None else ""
