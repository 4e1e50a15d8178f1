"""Figure 7: set-level deletion harm (DRSR) is not additive, from harm.json."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp.reporting.figures.theme import BOTTOM_LEGEND, GREY, PALETTE, TEMPLATE


def harm_figure(result: dict) -> go.Figure:
    """Exact harm of each deleted set vs its additive prediction (sum of singleton harms; y = x), and interaction by size.

    Reads harm.json: ``boundaries`` [{task_id, after_step, sets: [{members: [[kind, step, index], ...],
    harm, interaction}]}] (harm, interaction in nats/token), ``per_cardinality`` {"k": {mean_interaction,
    n_sets, ...}}, ``aggregates`` (the sum aggregator's pair-ordering accuracy at ``margin`` and MAE per k),
    ``units`` and ``margin``.
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
        raise ValueError("no set of two or more units with all its singleton harms in 'boundaries'")
    fig = make_subplots(rows=1, cols=2, column_widths=[0.58, 0.42], horizontal_spacing=0.12, subplot_titles=(
        "a  exact harm vs additive prediction", "b  interaction by set size"))
    values = [v for rows in points.values() for x, y, _ in rows for v in (x, y)]
    lo, hi = min(values + [0.0]), max(values + [0.0])
    pad = 0.05 * (hi - lo or 1.0)
    fig.add_trace(go.Scatter(x=[lo - pad, hi + pad], y=[lo - pad, hi + pad], mode="lines", name="y = x (additive)",
                             line=dict(color=GREY, dash="dash")), 1, 1)
    colour = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(sorted(points))}
    summary = {int(k): v for k, v in (result.get("per_cardinality") or {}).items()}
    additive = {row["cardinality"]: row for row in result.get("aggregates") or [] if row.get("aggregator") == "sum"}
    category = {k: f"k = {k}" + _accuracy(additive.get(str(k), {})) for k in points}
    for k in sorted(points):
        x, y, text = zip(*points[k])
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="markers", name=f"k = {k} units", legendgroup=str(k), hovertext=text,
            marker=dict(color=colour[k], size=8, opacity=0.75, line=dict(color="white", width=0.5)),
            hovertemplate="%{hovertext}<br>additive %{x:.4f}, exact %{y:.4f}<extra></extra>"), 1, 1)
        fig.add_trace(go.Box(
            x=[category[k]] * len(y), y=[b - a for a, b, _ in points[k]], name=f"k = {k} units", legendgroup=str(k),
            showlegend=False, marker_color=colour[k], boxpoints="all", jitter=0.4, pointpos=0,
            marker=dict(size=5, opacity=0.6)), 1, 2)
    means = [k for k in sorted(points) if summary.get(k, {}).get("mean_interaction") is not None]
    if means:
        fig.add_trace(go.Scatter(
            x=[category[k] for k in means], y=[summary[k]["mean_interaction"] for k in means], mode="markers",
            name="mean interaction", marker=dict(symbol="diamond", size=13, color="black")), 1, 2)
    fig.add_hline(y=0, line=dict(color=GREY, width=1), row=1, col=2)
    units = ", ".join(result.get("units") or []) or "?"
    margin = f"{result['margin']:.3f} nats/token" if result.get("margin") is not None else "?"
    fig.update_xaxes(title_text="additive prediction: sum of singleton harms (nats/token)", range=[lo - pad, hi + pad],
                     row=1, col=1)
    fig.update_yaxes(title_text="exact harm of the set (nats/token)", range=[lo - pad, hi + pad], row=1, col=1)
    fig.update_xaxes(title_text="set cardinality k (units deleted jointly)", row=1, col=2)
    fig.update_yaxes(title_text="interaction = exact − additive (nats/token)", row=1, col=2)
    fig.update_layout(
        template=TEMPLATE, height=580,
        title=dict(text="Set-level deletion harm is not additive over single units",
                   subtitle=dict(text=f"{len(result['boundaries'])} boundaries; units: {units}; harm = change in "
                                      "mean-token NLL of the recorded next output when the units are deleted; "
                                      f"pair order counted at a margin of {margin}")),
        legend=BOTTOM_LEGEND,
        margin=dict(b=160),
    )
    return fig


def _accuracy(entry: dict) -> str:
    """Tick-label lines: pair-ordering accuracy and MAE of the additive prediction, when known."""
    acc, mae = entry.get("pair_accuracy"), entry.get("mae")
    return ((f"<br>pair-order acc. {acc:.2f}" if acc is not None else "")
            + (f"<br>additive MAE {mae:.3f}" if mae is not None else ""))
