"""Figure 7: set-level deletion harm (DRSR) against its additive prediction, from harm.json.

The title states a conclusion only when ``additivity_test`` supports it: the
mean interaction (exact harm minus the sum of singleton harms, over sets of
two or more units) with a 95% bootstrap CI over tasks (``interp.stats``) is
"not additive" when the CI excludes 0 and the mean exceeds the file's pair
margin, "additive within the margin" when the CI lies inside ±margin, and
otherwise (or with fewer than ``MIN_TASKS`` tasks) no conclusion is drawn.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp.data.deletions import drsr_compared
from interp.reporting.figures.theme import (BOTTOM_LEGEND, GREY, PALETTE, TEMPLATE, has_ci, note,
                                           titled)
from interp.reporting.ran import setting
from interp.stats import task_bootstrap_ci

MIN_TASKS = 3
"""Fewer tasks than this: no CI and no conclusion (a bootstrap over 1-2 tasks has next to no spread)."""


def additivity_test(result: dict, n_boot: int = 2000) -> dict:
    """{"verdict": "not additive" | "additive within the margin" | None, "mean", "ci", "n_sets", "n_tasks",
    "margin", "why"}: the mean interaction of sets of 2+ units of DRSR's block kinds over the boundaries (sets
    holding a whole step are reported apart), CI resampling tasks."""
    rows = [(b.get("task_id"), s["interaction"]) for b in result["boundaries"] for s in b["sets"]
            if len(s["members"]) > 1 and s.get("interaction") is not None and drsr_compared(s["members"])]
    margin = setting(result, "margin")
    out: dict[str, Any] = {"verdict": None, "mean": None, "ci": None, "n_sets": len(rows), "margin": margin,
           "n_tasks": len({t for t, _ in rows})}
    if not rows:
        return {**out, "why": "no set of 2+ units"}
    values = np.array([[v] for _, v in rows], float)
    out["mean"] = float(values.mean())
    if out["n_tasks"] < MIN_TASKS:
        return {**out, "why": f"{out['n_tasks']} task(s): too few for a CI (need {MIN_TASKS})"}
    lo, hi = task_bootstrap_ci(values, np.array([t for t, _ in rows]), n_boot=n_boot)[0]
    out["ci"] = [float(lo), float(hi)]
    if (lo > 0 or hi < 0) and abs(out["mean"]) > margin:
        return {**out, "verdict": "not additive", "why": "the CI of the mean interaction excludes 0"}
    if margin > 0 and -margin < lo and hi < margin:
        return {**out, "verdict": "additive within the margin", "why": "the CI lies inside ±margin"}
    return {**out, "why": "the CI does not separate the mean interaction from 0 (or from ±margin)"}


def harm_figure(result: dict) -> go.Figure:
    """Exact harm of each deleted set vs its additive prediction (sum of singleton harms; y = x), and interaction by size,
    over the sets of DRSR's block kinds (the rows compared with DRSR; sets holding a whole step are counted apart).

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
            if len(members) > 1 and all(m in single for m in members) and drsr_compared(members):
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
    category = {k: f"k = {k}<br>{len(points[k])} sets" + _accuracy(additive.get(str(k), {})) for k in points}
    for k in sorted(points):
        x, y, text = zip(*points[k])
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="markers", name=f"k = {k} units", legendgroup=str(k), hovertext=text,
            marker=dict(color=colour[k], size=8, opacity=0.75, line=dict(color="white", width=0.5)),
            hovertemplate="%{hovertext}<br>additive %{x:.4f}, exact %{y:.4f}<extra></extra>"), 1, 1)
        fig.add_trace(go.Scatter(
            x=[category[k]] * len(y), y=[b - a for a, b, _ in points[k]], name=f"k = {k} units", legendgroup=str(k),
            showlegend=False, mode="markers", marker=dict(color=colour[k], size=7, opacity=0.7),
            hovertext=text, hovertemplate="%{hovertext}: %{y:.4f}<extra></extra>"), 1, 2)
    means = [k for k in sorted(points) if summary.get(k, {}).get("mean_interaction") is not None]
    if means:
        fig.add_trace(go.Scatter(
            x=[category[k] for k in means], y=[summary[k]["mean_interaction"] for k in means], mode="markers",
            name="mean interaction (n sets under the axis)", marker=dict(symbol="diamond", size=13, color="black")),
            1, 2)
    fig.add_hline(y=0, line=dict(color=GREY, width=1), row=1, col=2)
    units = ", ".join(result.get("units") or []) or "?"
    margin = f"{setting(result, 'margin'):.3f} nats/token"
    fig.update_xaxes(title_text="additive prediction: sum of singleton harms (nats/token)", range=[lo - pad, hi + pad],
                     row=1, col=1)
    fig.update_yaxes(title_text="exact harm of the set (nats/token)", range=[lo - pad, hi + pad], row=1, col=1)
    fig.update_xaxes(title_text="set cardinality k (units deleted jointly)", row=1, col=2)
    fig.update_yaxes(title_text="interaction = exact − additive (nats/token)", row=1, col=2)
    test = additivity_test(result)
    fig.update_layout(template=TEMPLATE, height=600, legend=BOTTOM_LEGEND, margin=dict(b=160))
    if test["ci"] is None:
        note(fig, f"mean interaction {test['mean']:.4f} nats/token: {test['why']}" if test["mean"] is not None
             else test["why"], "2")
    stat = (f"mean interaction {test['mean']:+.4f} nats/token [{test['ci'][0]:+.4f}, {test['ci'][1]:+.4f}], "
            f"{test['n_sets']} sets, {test['n_tasks']} tasks" if has_ci(test["ci"]) else None)
    title = (f"Set-level deletion harm is {test['verdict']} over single units" if test["verdict"]
             else "Set-level deletion harm vs the additive prediction from single units")
    titled(fig, title, [*([stat] if stat else []), f"{len(result['boundaries'])} boundaries", f"units: {units}",
                        "harm = change in mean-token NLL of the recorded next output when the units are deleted",
                        f"pair order counted at a margin of {margin}; sets up to {setting(result, 'max_k')} units, "
                        f"{setting(result, 'budget')} sampled per size",
                        *([f"sets of DRSR's block kinds; {result['step_sets']['n_sets']} sets holding a whole step "
                           "are reported apart (harm.json step_sets)"] if result.get("step_sets") else [])])
    return fig


def _accuracy(entry: dict) -> str:
    """Tick-label lines: pair-ordering accuracy and MAE of the additive prediction, when known."""
    acc, mae = entry.get("pair_accuracy"), entry.get("mae")
    return ((f"<br>pair-order acc. {acc:.2f}" if acc is not None else "")
            + (f"<br>additive MAE {mae:.3f}" if mae is not None else ""))
