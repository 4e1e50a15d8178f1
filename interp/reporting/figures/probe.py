"""Figure 1: the future-necessity probe, from probes.report's probe_results.json and oof_predictions.csv."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from sklearn.metrics import average_precision_score, precision_recall_curve, roc_auc_score, roc_curve

from interp.reporting import reference
from interp.reporting.numbers import ci_text, num
from interp.reporting.figures.theme import (BOTTOM_LEGEND, GREY, PALETTE, REFERENCE_LABEL, TEMPLATE, ci_band, note,
                                           titled)

BASELINE_COLOUR = "#8B4513"
"""The position baseline's band and line (outside PALETTE, which colours the poolings)."""


def probe_figure(result: dict) -> go.Figure:
    """AUROC by layer per pooling (descriptive), the nested-CV headline with its CI, the position baseline as a
    reference band, each fold's chosen layer.

    Reads probe_results.json: ``layer_curve`` {pooling: {layers, auroc}}, ``auroc``,
    ``auroc_ci`` ([lo, hi] or null), ``folds`` [{fold, layer, pooling}], ``baseline``
    and ``probe_plus_baseline`` ({auroc, auroc_ci} or null) and ``gain`` ({auroc, auroc_ci})
    when present, and for the subtitle ``n_samples``, ``n_tasks``, ``n_positive``,
    ``permutation_p`` and ``permutation_p_position`` when present.
    """
    curve = result["layer_curve"]
    if not curve:
        raise ValueError("field 'layer_curve' is empty")
    colours = {pooling: PALETTE[i % len(PALETTE)] for i, pooling in enumerate(curve)}
    layers = [layer for entry in curve.values() for layer in entry["layers"]]
    x = [min(layers) - 0.5, max(layers) + 0.5]
    auroc, ci = result["auroc"], result.get("auroc_ci")
    fig = go.Figure()
    headline = f"nested-CV AUROC {auroc:.3f}" + (f" {ci_text(ci)}" if ci_text(ci) else "")
    if ci:
        fig.add_trace(ci_band(x, [ci[0]] * 2, [ci[1]] * 2, "#000000", "95% CI of the nested-CV AUROC (task bootstrap)"))
    fig.add_trace(go.Scatter(x=x, y=[auroc] * 2, mode="lines", line=dict(color="black", width=2), name=headline))
    references = _baseline_traces(result, x)
    for trace in references:
        fig.add_trace(trace)
    fig.add_trace(go.Scatter(x=x, y=[0.5, 0.5], mode="lines", line=dict(color=GREY, dash="dot"), name="chance (0.5)"))
    fig.add_trace(go.Scatter(x=x, y=[reference.PROBE["auroc"]] * 2, mode="lines", line=dict(color=GREY, dash="dash"),
                             name=f"{REFERENCE_LABEL}: AUROC {reference.PROBE['auroc']}"))
    shift = {pooling: 0.08 * (i - (len(curve) - 1) / 2) for i, pooling in enumerate(curve)}  # whiskers side by side
    for pooling, entry in curve.items():
        fig.add_trace(go.Scatter(
            x=[layer + shift[pooling] for layer in entry["layers"]], y=entry["auroc"], mode="lines+markers",
            error_y=_whiskers(entry),
            name=f"{pooling} pooling (fixed probe, per layer" + (", 95% CI)" if entry.get("auroc_ci") else ")"),
            legendgroup=pooling,
            line=dict(color=colours[pooling], width=2), marker=dict(size=7),
            customdata=entry["layers"], hovertemplate=f"{pooling}, layer %{{customdata}}: AUROC %{{y:.3f}}<extra></extra>",
        ))
    fig.add_trace(_fold_choices(result.get("folds", []), curve, colours, auroc, shift))
    if not any(ci for entry in curve.values() for ci in entry.get("auroc_ci") or []):
        note(fig, "per-layer points: descriptive, no CI in this file; the band is the headline's CI")
    values = [v for entry in curve.values() for v in entry["auroc"]] + [auroc, *(ci or []), reference.PROBE["auroc"]]
    values += [v for trace in references for v in trace.y if v is not None]
    values += [v for entry in curve.values() for c in entry.get("auroc_ci") or [] if c for v in c]
    fig.update_layout(
        template=TEMPLATE, height=620,
        xaxis=dict(title="layer (index of the probed residual stream)", range=x, dtick=_dtick(x)),
        yaxis=dict(title="held-out AUROC (unitless)",
                   range=[min(0.4, min(values) - 0.03), min(1.0, max(values) + 0.05)]),
        legend=BOTTOM_LEGEND, margin=dict(b=230),
    )
    titled(fig, "Future-necessity probe: held-out AUROC by layer and pooling", _subtitle(result))
    return fig


def roc_pr_figure(oof: pd.DataFrame) -> go.Figure:
    """ROC and PR curves of the pooled out-of-fold predictions, with the operating point of the per-fold thresholds.

    Reads oof_predictions.csv columns ``y`` (0/1), ``score`` (held-out log-odds), ``pred`` (0/1).
    """
    y, score, pred = oof["y"].to_numpy(int), oof["score"].to_numpy(float), oof["pred"].to_numpy(int)
    if np.unique(y).size < 2:
        raise ValueError("column 'y' holds one class only; ROC and PR curves need both")
    fpr, tpr, _ = roc_curve(y, score)
    precision, recall, _ = precision_recall_curve(y, score)
    prevalence = y.mean()
    tp = int(((pred == 1) & (y == 1)).sum())
    op_tpr, op_fpr = tp / (y == 1).sum(), int(((pred == 1) & (y == 0)).sum()) / (y == 0).sum()
    op_precision = tp / pred.sum() if pred.sum() else float("nan")
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        f"ROC (AUROC {roc_auc_score(y, score):.3f})", f"Precision-recall (AP {average_precision_score(y, score):.3f})"))
    fig.add_trace(go.Scatter(x=fpr, y=tpr, mode="lines", line=dict(color=PALETTE[0], width=2.5, shape="hv"),
                             name="out-of-fold probe (pooled)", legendgroup="probe"), 1, 1)
    fig.add_trace(go.Scatter(x=recall, y=precision, mode="lines", line=dict(color=PALETTE[0], width=2.5, shape="hv"),
                             name="out-of-fold probe (pooled)", legendgroup="probe", showlegend=False), 1, 2)
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", line=dict(color=GREY, dash="dot"),
                             name="chance", legendgroup="chance"), 1, 1)
    fig.add_trace(go.Scatter(x=[0, 1], y=[prevalence] * 2, mode="lines", line=dict(color=GREY, dash="dot"),
                             name="chance", legendgroup="chance", showlegend=False), 1, 2)
    point = dict(mode="markers", name="operating point (each fold's threshold)", legendgroup="op",
                 marker=dict(symbol="star", size=16, color=PALETTE[3], line=dict(color="black", width=1)))
    fig.add_trace(go.Scatter(x=[op_fpr], y=[op_tpr], **point), 1, 1)
    fig.add_trace(go.Scatter(x=[op_tpr], y=[op_precision], showlegend=False, **point), 1, 2)
    fig.update_xaxes(range=[-0.02, 1.02], constrain="domain")
    fig.update_yaxes(range=[-0.02, 1.02])
    fig.update_xaxes(title_text="false positive rate (fraction of y=0)", row=1, col=1)
    fig.update_yaxes(title_text="true positive rate (fraction of y=1)", row=1, col=1)
    fig.update_xaxes(title_text="recall (fraction of y=1)", row=1, col=2)
    fig.update_yaxes(title_text="precision (fraction of predicted 1)", row=1, col=2)
    n_tasks = oof["task_id"].nunique() if "task_id" in oof else "?"
    fig.update_layout(
        template=TEMPLATE, height=540,
        title=dict(text="Future-necessity probe: out-of-fold ROC and precision-recall",
                   subtitle=dict(text=f"{len(y)} boundaries, {n_tasks} tasks, {int(y.sum())} positive; "
                                      f"task-level nested CV")),
        legend=BOTTOM_LEGEND,
        margin=dict(b=160),
    )
    return fig


def _whiskers(entry: dict) -> dict | None:
    """Thin error bars of a layer curve's per-point CIs (task bootstrap), or None when the file has none."""
    cis = entry.get("auroc_ci") or []
    if not any(cis):
        return None
    return dict(type="data", symmetric=False, thickness=1, width=3,
                array=[c[1] - v if c else None for c, v in zip(cis, entry["auroc"])],
                arrayminus=[v - c[0] if c else None for c, v in zip(cis, entry["auroc"])])


def _fold_choices(folds: list[dict], curve: dict, colours: dict, fallback: float,
                  shift: dict[str, float]) -> go.Scatter:
    """A star per distinct (layer, pooling) chosen by the outer folds, on its curve; labelled when chosen 2+ times."""
    chosen: dict[tuple[int, str], list[int]] = defaultdict(list)
    for i, fold in enumerate(folds):
        chosen[int(fold["layer"]), fold["pooling"]].append(int(fold.get("fold", i)))
    x, y, colour, text, hover = [], [], [], [], []
    for (layer, pooling), indices in sorted(chosen.items()):
        entry = curve.get(pooling, {"layers": [], "auroc": []})
        y.append(dict(zip(entry["layers"], entry["auroc"])).get(layer, fallback))
        x.append(layer + shift.get(pooling, 0.0))
        colour.append(colours.get(pooling, "black"))
        text.append(f"{len(indices)}/{len(folds)} folds" if len(indices) > 1 else "")  # one fold: no label clutter
        hover.append(f"layer {layer}, {pooling} pooling: chosen in outer fold(s) {', '.join(map(str, indices))}")
    return go.Scatter(
        x=x, y=y, mode="markers+text", text=text, textposition="top center", hovertext=hover, hoverinfo="text",
        marker=dict(symbol="star", size=18, color=colour, line=dict(color="black", width=1.2)),
        name="layer chosen by an outer fold (label: how many)", textfont=dict(size=12),
    )


def _baseline_traces(result: dict, x: list[float]) -> list[go.Scatter]:
    """The position baseline as a reference band (its CI) and line, and probe + baseline as a dashed line."""
    traces = []
    base = result.get("baseline")
    if base:
        ci = base.get("auroc_ci")
        if ci:
            traces.append(ci_band(x, [ci[0]] * 2, [ci[1]] * 2, BASELINE_COLOUR, "position baseline 95% CI"))
        traces.append(go.Scatter(x=x, y=[base["auroc"]] * 2, mode="lines", line=dict(color=BASELINE_COLOUR, width=2),
                                 name=f"position baseline AUROC {base['auroc']:.3f} (same nested CV)"))
    both = result.get("probe_plus_baseline")
    if both:
        traces.append(go.Scatter(x=x, y=[both["auroc"]] * 2, mode="lines", line=dict(color="black", dash="dash"),
                                 name=f"probe + baseline AUROC {both['auroc']:.3f}"))
    return traces


def _subtitle(result: dict) -> list[str]:
    """Gain over the position baseline, sample counts and permutation p-values, where the file has them."""
    parts = []
    gain = result.get("gain")
    if gain:
        ci = gain.get("auroc_ci")
        interval = ci_text(ci, signed=True)
        parts.append(f"gain over position baseline {num(gain['auroc'], signed=True)}"
                     + (f" {interval}" if interval else ""))
    parts += [f"{result[key]} {label}" for key, label in
              (("n_samples", "boundaries"), ("n_tasks", "tasks"), ("n_positive", "positive")) if key in result]
    n_perm = (result.get("config") or {}).get("n_perm")
    perms = f"{n_perm} permutations, smallest possible p {1 / (n_perm + 1):.3g}" if n_perm else "permutations: ?"
    if result.get("permutation_p") is not None:
        parts.append(f"permutation p = {result['permutation_p']:.3g} (across tasks)"
                     + (f", {result['permutation_p_position']:.3g} (position kept)"
                        if result.get("permutation_p_position") is not None else "") + f" ({perms})")
    return parts + ["curves are descriptive, the headline is the nested CV"]


def _dtick(x_range: list[float]) -> int:
    """Tick step giving at most ~16 layer ticks."""
    return max(1, int(np.ceil((x_range[1] - x_range[0]) / 16)))
