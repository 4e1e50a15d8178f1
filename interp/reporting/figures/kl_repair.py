"""Figure 2: KL Repair by layer, from patching's kl_repair.json."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp.reporting.ran import provenance_of, setting
from interp.reporting import reference
from interp.reporting.figures.theme import (BOTTOM_LEGEND, PALETTE, TEMPLATE, ci_band, legend_swatch,
                                           reference_markers, rgba, titled)

_RESID = ("resid_pre", "resid_post")
_FULL_ATTENTION_COLOUR = "#B0B0B0"  # grey: a coloured shade would tint the CI bands away from their legend colours


def kl_repair_figure(result: dict) -> go.Figure:
    """Mean Repair per site with its CI band and the ratio of sums beside it, top-1 on a second axis.

    The ratio of sums (1 - sum KL_patch / sum d) weights boundaries by their
    deletion effect d, so a gap between the two lines shows the mean being
    pulled by small-d boundaries. Full-attention layers are shaded only on a hybrid model (some layers
    linear attention). Top-1 recovery has the unpatched baseline beside it: patching resid_pre.0 of the
    boundary token writes the same token embedding back (a no-op), so its top-1 is the deleted history's.
    Reads kl_repair.json: ``sites`` ("resid_pre.12", ...), ``layers``, ``repair_mean``,
    ``repair_ci`` ([[lo, hi], ...]), ``repair_ratio`` (optional), ``top1_mean``,
    ``full_attention_layers``, ``n_samples``, ``n_excluded``, ``d_threshold``,
    ``condition``, ``model`` {spec, n_layers}.
    The x axis is the residual-stream position: resid_pre.l sits at l (the input
    of layer l) and resid_post.l at l + 1 (its output), so layer l spans [l, l + 1].
    """
    sites, mean = result["sites"], result["repair_mean"]
    if not mean:
        raise ValueError("field 'repair_mean' is empty (no sample kept)")
    ci = result.get("repair_ci") or [[np.nan, np.nan]] * len(sites)
    top1 = result.get("top1_mean") or [np.nan] * len(sites)
    ratio = result.get("repair_ratio") or [np.nan] * len(sites)  # absent in files written before it existed
    model = result.get("model") or {}
    series: dict[str, list[tuple]] = {}
    for site, layer, m, (lo, hi), t, r in zip(sites, result["layers"], mean, ci, top1, ratio):
        kind = site.rsplit(".", 1)[0]
        x = layer + 1 if kind == "resid_post" else layer
        series.setdefault("residual stream" if kind in _RESID else kind, []).append((x, m, lo, hi, t, site, r))
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    full_attention = result.get("full_attention_layers") or []
    hybrid = bool(full_attention) and len(full_attention) < (model.get("n_layers") or len(result["layers"]) + 1)
    if hybrid:
        fig.add_trace(legend_swatch("full-attention layer (the others: linear attention)", _FULL_ATTENTION_COLOUR))
    for i, (name, points) in enumerate(series.items()):
        x, m, lo, hi, t, label, r = map(list, zip(*sorted(points, key=lambda p: p[:6])))
        colour = PALETTE[(2 * i) % len(PALETTE)]
        if not np.all(np.isnan(np.asarray(lo, float))):
            fig.add_trace(ci_band(x, lo, hi, colour, f"95% CI, {name} (task bootstrap)"))
        fig.add_trace(go.Scatter(
            x=x, y=m, mode="lines+markers", name=f"Repair, {name}", line=dict(color=colour, width=2.5),
            marker=dict(size=7), customdata=label, hovertemplate="%{customdata}: Repair %{y:.3f}<extra></extra>"))
        if not np.all(np.isnan(np.asarray(r, float))):
            fig.add_trace(go.Scatter(
                x=x, y=r, mode="lines+markers", name=f"Repair, ratio of sums, {name}",
                line=dict(color=colour, width=1.5, dash="dot"), marker=dict(symbol="diamond-open", size=7),
                customdata=label, hovertemplate="%{customdata}: 1 − ΣKL_patch/Σd %{y:.3f}<extra></extra>"))
        fig.add_trace(go.Scatter(
            x=x, y=t, mode="lines+markers", name=f"top-1 recovery, {name}",
            line=dict(color=PALETTE[(1 + 2 * i) % len(PALETTE)], dash="dash"),
            marker=dict(symbol="circle-open", size=7), customdata=label,
            hovertemplate="%{customdata}: top-1 %{y:.2f}<extra></extra>"), secondary_y=True)
    for layer in full_attention if hybrid else []:  # after the traces: plotly skips shapes on empty subplots
        fig.add_vrect(x0=layer, x1=layer + 1, fillcolor=rgba(_FULL_ATTENTION_COLOUR, 0.35), line_width=0, layer="below")
    _label_final_site(fig, series.get("residual stream", []))
    if "resid_pre.0" in sites and result.get("top1_mean"):
        base = result["top1_mean"][sites.index("resid_pre.0")]
        x_all = [p[0] for points in series.values() for p in points]
        fig.add_trace(go.Scatter(x=[min(x_all), max(x_all)], y=[base, base], mode="lines",
                                 line=dict(color=PALETTE[1], width=1.5, dash="dot"),
                                 name=f"top-1, unpatched deleted history ({base:.2f}; = no-op patch at resid_pre.0)"),
                      secondary_y=True)
    if model.get("n_layers") == reference.N_LAYERS:
        fig.add_trace(reference_markers(list(reference.KL_REPAIR), list(reference.KL_REPAIR.values())))
    values = [v for v in [*mean, *np.ravel(ci), *top1, *ratio] if v is not None and np.isfinite(v)]
    y_range = [min(0.0, min(values)) - 0.05, max(1.0, max(values)) + 0.08]
    fig.update_yaxes(title_text="Repair (unitless)", range=y_range, secondary_y=False)
    fig.update_yaxes(title_text="top-1 recovery (fraction of samples)", range=y_range, showgrid=False, secondary_y=True)
    fig.update_xaxes(title_text="layer l (the residual stream entering layer l is patched; last point: final output)")
    fig.update_layout(template=TEMPLATE, height=620, legend=BOTTOM_LEGEND, margin=dict(b=170))
    titled(fig, f"KL Repair by layer: {model.get('spec', 'model')}, boundary token patched", _subtitle(result))
    return fig


def _label_final_site(fig: go.Figure, points: list[tuple]) -> None:
    """Annotate the final resid_post site (patching it must restore the output exactly: Repair 1)."""
    for x, m, _lo, _hi, _t, site, _ratio in points:
        if site.startswith("resid_post"):
            fig.add_annotation(x=x, y=m, text=f"final {site}", showarrow=True, arrowhead=2, ax=-70, ay=35,
                               bgcolor="rgba(255,255,255,0.85)", font=dict(size=12))


def _subtitle(result: dict) -> list[str]:
    """Condition, the recorded layers and dtype, samples kept and excluded."""
    parts = ["Repair = 1 − KL(P_full‖P_patched) / KL(P_full‖P_del)", "mean over boundaries, ratio of sums dotted",
             f"P_del from condition {result.get('condition', '?')}", f"layers {setting(result, 'layers')}, "
             f"dtype {provenance_of(result).get('dtype')}", f"n = {result.get('n_samples', '?')} boundaries"]
    if result.get("n_excluded"):
        noise = result.get("noise_median")
        factor = result.get("noise_factor")
        parts.append(f"{result['n_excluded']} excluded (KL(full‖deleted) ≤ "
                     + (f"{factor:g} × its measured noise" if factor is not None else "the given threshold")
                     + (f", median noise {noise:.2g} nats)" if noise is not None else ")"))
    return parts
