"""Figure 16: attribution maps beside their exact oracle, from patching's attribution.json."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp.reporting.figures.theme import PALETTE, TEMPLATE


def attribution_figure(result: dict) -> go.Figure:
    """Three panels, first order vs exact: (a) mean tail Repair per site over boundaries, both lines; (b) sampled
    history sites, estimate vs exact KL change; (c) singleton harm, first order vs exact (empty where harm did not
    run). Each panel's title carries the pooled Spearman and MAE (``agreement``). Reads attribution.json:
    ``sites``, ``layers``, ``boundaries`` [{repair_linear, repair_exact, history, harm}], ``agreement``,
    ``condition``, ``model`` {spec}."""
    rows, agree = result["boundaries"], result["agreement"]
    if not rows:
        raise ValueError("field 'boundaries' is empty (no boundary ran)")

    def title(part: str, name: str) -> str:
        a = agree[part]
        rho = "-" if a["spearman"] is None else f"{a['spearman']:.2f}"
        mae = "-" if a["mae"] is None else f"{a['mae']:.2g}"
        return f"{name}: Spearman {rho}, MAE {mae} (n={a['n']})"

    fig = make_subplots(rows=1, cols=3, subplot_titles=(
        title("tail", "(a) boundary tail, Repair by site"), title("history", "(b) history sites, KL change"),
        title("harm", "(c) singleton harm")))

    def mean(key: str) -> list[float | None]:
        """Per site, the mean over boundaries where the value exists (exact Repair is null where excluded)."""
        columns = zip(*(r[key] for r in rows))
        return [float(np.mean(kept)) if (kept := [v for v in c if v is not None]) else None for c in columns]

    x = list(range(len(result["sites"])))
    for i, (key, name) in enumerate((("repair_exact", "exact KL Repair"), ("repair_linear", "first order"))):
        fig.add_trace(go.Scatter(x=x, y=mean(key), mode="lines+markers", name=name, customdata=result["sites"],
                                 line=dict(color=PALETTE[2 * i % len(PALETTE)]),
                                 hovertemplate="%{customdata}: %{y:.3f}<extra></extra>"), row=1, col=1)
    for col, (points, name) in enumerate(((
            [(h["exact"], h["estimate"]) for r in rows for h in r["history"]], "history site"),
            ([(u["harm_exact"], u["harm_linear"]) for r in rows for u in r["harm"].get("units", [])], "unit")), 2):
        if points:
            ex, est = map(list, zip(*points))
            lo, hi = min(ex + est), max(ex + est)
            fig.add_trace(go.Scatter(x=ex, y=est, mode="markers", name=name, marker=dict(size=6, opacity=0.7,
                                     color=PALETTE[col % len(PALETTE)])), row=1, col=col)
            fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="estimate = exact",
                                     line=dict(color="#888888", dash="dot"), showlegend=col == 2), row=1, col=col)
    fig.update_xaxes(title_text="site (resid_pre.0 ... last)", row=1, col=1)
    fig.update_yaxes(title_text="Repair (mean over boundaries)", row=1, col=1)
    for col, unit in ((2, "nats"), (3, "nats/token")):
        fig.update_xaxes(title_text=f"exact ({unit})", row=1, col=col)
        fig.update_yaxes(title_text=f"first order ({unit})", row=1, col=col)
    model = (result.get("model") or {}).get("spec", "?")
    fig.update_layout(template=TEMPLATE, width=1500, height=560, title=dict(
        text=f"Attribution maps vs exact patching ({model}, condition {result['condition']}, "
             f"{len(rows)} boundaries)"))
    return fig
