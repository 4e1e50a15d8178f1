"""Reasoning anchors (anchors.json) and SAE features at the boundary (sae_probe.json): figures and report sections."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp.reporting.figures.theme import BOTTOM_LEGEND, PALETTE, TEMPLATE, titled
from interp.reporting.numbers import num, pct, shown
from interp.reporting.ran import ran_line, setting

KEPT, DROPPED = PALETTE[0], PALETTE[1]
MEASURE_LABELS = {"harm": "deletion harm", "suppression": "attention suppression", "received": "receiver heads"}


def anchors_figure(doc: Mapping[str, Any]) -> go.Figure:
    """a: each reasoning block's deletion harm vs its attention-suppression KL, coloured by ICLR's decision;
    b: the share of blocks ICLR drops among each boundary's top block by each measure and among the rest."""
    rows = [r for r in doc["blocks"] if r["harm"] is not None]
    if not rows:
        raise ValueError("anchors.json has no block with a harm")
    rho, k = setting(doc, "rho"), setting(doc, "receiver_heads")
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        "a  deletion harm vs attention suppression per block", "b  blocks ICLR drops: anchors vs the rest"))
    for name, colour, dropped in (("kept by ICLR", KEPT, False), ("dropped by ICLR", DROPPED, True)):
        part = [r for r in rows if r["iclr_dropped"] == dropped]
        fig.add_trace(go.Scatter(
            x=[r["harm"] for r in part], y=[r["suppression"] for r in part], mode="markers",
            name=f"{name} ({len(part)} blocks)", marker=dict(color=colour, size=8, opacity=0.75),
            hovertext=[f"{r['task_id']}@{r['after_step']} step {r['step']} block {r['block']}" for r in part],
            hovertemplate="%{hovertext}: harm %{x:.3f}, suppression %{y:.3f}<extra></extra>"), 1, 1)
    labels, top_share, rest_share = [], [], []
    for measure, label in MEASURE_LABELS.items():
        top = [r for r in rows if r.get(f"rank_{measure}") == 1]
        rest = [r for r in rows if r.get(f"rank_{measure}") not in (None, 1)]
        labels.append(label)
        top_share.append(sum(r["iclr_dropped"] for r in top) / len(top) if top else None)
        rest_share.append(sum(r["iclr_dropped"] for r in rest) / len(rest) if rest else None)
    fig.add_trace(go.Bar(x=labels, y=top_share, name="top block of its boundary (the anchor)",
                         marker=dict(color=PALETTE[3])), 1, 2)
    fig.add_trace(go.Bar(x=labels, y=rest_share, name="other blocks", marker=dict(color=PALETTE[5])), 1, 2)
    fig.update_layout(template=TEMPLATE, height=600, barmode="group", legend=BOTTOM_LEGEND, margin=dict(b=170))
    agree = (doc["agreement"].get("harm_vs_suppression") or {})
    titled(fig, "Reasoning anchors: importance by deletion and by attention, and ICLR's drop decisions",
           [f"{len(rows)} blocks at {len({(r['task_id'], r['after_step']) for r in rows})} boundaries",
            f"ICLR rho = {rho}; receiver heads: the {k} of highest kurtosis",
            f"Spearman harm vs suppression {shown(num(agree.get('rho'), 2))} (n {agree.get('n', 0)})"])
    fig.update_xaxes(title_text="harm of deleting the block alone (nats/token)", row=1, col=1)
    fig.update_yaxes(title_text="KL with attention to the block suppressed (nats/token)", row=1, col=1)
    fig.update_xaxes(title_text="importance measure", row=1, col=2)
    fig.update_yaxes(title_text="fraction of blocks ICLR drops", range=[0, 1.05], row=1, col=2)
    return fig


def anchors_section(doc: Mapping[str, Any], folder: Path) -> list[str]:
    """The per-block importance table (first boundaries), agreement between measures and ICLR's drops."""
    iclr = doc["iclr"]
    lines = [ran_line(doc), "",
             "| task | b | step | block | tokens | harm (nats/token) | suppression KL | received | ICLR | "
             "rank harm / suppression / received |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["blocks"][:40]:
        lines.append(f"| {r['task_id']} | {r['after_step']} | {r['step']} | {r['block']} | {r['n_tokens']} | "
                     f"{shown(num(r['harm']))} | {shown(num(r['suppression']))} | {shown(num(r['received'], 4))} | "
                     f"{'dropped' if r['iclr_dropped'] else 'kept'} | {r['rank_harm']} / {r['rank_suppression']} / "
                     f"{r['rank_received']} |")
    if len(doc["blocks"]) > 40:
        lines.append(f"\n_{len(doc['blocks']) - 40} more blocks in anchors.json._")
    lines += ["", "| measures compared | Spearman rho | blocks |", "|---|---|---|"]
    for name, value in doc["agreement"].items():
        lines.append(f"| {name.replace('_', ' ')} | {shown(num((value or {}).get('rho'), 2))} | "
                     f"{(value or {}).get('n', 0)} |")
    lines += ["", f"ICLR drops {shown(pct(iclr['anchors_dropped']))} of the {iclr['n_anchors']} anchors (the top "
              f"block by deletion harm of each boundary); mean harm of dropped blocks "
              f"{shown(num(iclr['dropped']['harm']))} vs kept {shown(num(iclr['kept']['harm']))} nats/token "
              f"({iclr['dropped']['n']} vs {iclr['kept']['n']} blocks)."]
    if doc["skipped"]:
        lines.append(f"{len(doc['skipped'])} boundaries skipped (over max_tokens = {setting(doc, 'max_tokens')}).")
    return lines


def sae_figure(doc: Mapping[str, Any]) -> go.Figure:
    """a: the probe direction's top SAE features (coefficient per SD); b: KL Repair's moved features."""
    top = doc["top_features"]
    if not top:
        raise ValueError("sae_probe.json lists no top feature")
    sae = doc["sae"]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.16, subplot_titles=(
        "a  top features of the probe direction", "b  features KL Repair's patch moves"))
    for i, pooling in enumerate(dict.fromkeys(r["pooling"] for r in top)):
        part = [r for r in top if r["pooling"] == pooling]
        fig.add_trace(go.Bar(x=[r["coef_per_sd"] for r in part], y=[f"f{r['feature']} ({pooling})" for r in part],
                             orientation="h", name=f"probe, {pooling}", marker=dict(color=PALETTE[i % 4])), 1, 1)
    repair = doc["repair_features"]
    for i, pooling in enumerate(dict.fromkeys(r["pooling"] for r in repair)):
        part = [r for r in repair if r["pooling"] == pooling]
        fig.add_trace(go.Bar(x=[r["mean_diff"] for r in part], y=[f"f{r['feature']} ({pooling})" for r in part],
                             orientation="h", name=f"repair, {pooling}", marker=dict(color=PALETTE[4 + i % 4])),
                      1, 2)
    kl = doc["spliced_kl"]
    fvu = ", ".join(f"{p} {shown(num(v))}" for p, v in doc["fvu"].items())
    fig.update_layout(template=TEMPLATE, height=650, legend=BOTTOM_LEGEND, margin=dict(b=170))
    titled(fig, f"SAE features at the boundary: {sae['hook_name']}, {sae['architecture']}, d_sae {sae['d_sae']}",
           [f"probe AUROC {doc['probe']['auroc']:.3f} (permutation p {shown(num(doc['probe']['permutation_p']))})",
            f"FVU {fvu}", "spliced KL " + (f"mean {kl['mean']:.3f} nats over {kl['n']} boundaries" if kl
                                           else "not measured")])
    fig.update_xaxes(title_text="probe coefficient per SD of the feature (log-odds)", row=1, col=1)
    fig.update_xaxes(title_text="mean activation, full minus delete_all_reasoning", row=1, col=2)
    fig.update_yaxes(autorange="reversed")
    return fig


def sae_section(doc: Mapping[str, Any], folder: Path) -> list[str]:
    """Reconstruction quality (transfer), the probe on SAE features against its nulls, the named features."""
    sae, probe, kl = doc["sae"], doc["probe"], doc["spliced_kl"]
    lines = [ran_line(doc), "",
             f"SAE `{sae['path']}` at `{sae['hook_name']}` ({sae['architecture']}, d_sae {sae['d_sae']}, "
             f"k {sae['k']}), top {doc['top_k']} features stored per row; condition `{doc['condition']}`.", "",
             "| reconstruction | value |", "|---|---|"]
    lines += [f"| FVU, {p} | {shown(num(v))} |" for p, v in doc["fvu"].items()]
    lines.append("| spliced KL at the boundary (nats) | " + (f"mean {kl['mean']:.4f}, median {kl['median']:.4f}, "
                                                           f"max {kl['max']:.4f} (n {kl['n']})" if kl else "-") + " |")
    lines += ["", f"Probe on SAE features: AUROC {probe['auroc']:.3f} (95% CI {probe['auroc_ci']}), AP "
              f"{probe['ap']:.3f}, permutation p {shown(num(probe['permutation_p']))} (smallest possible "
              f"{shown(num(probe['permutation_p_min']))}), control task AUROC {probe['control_auroc']:.3f}.", "",
              "| rank | feature | pooling | coef per SD | strongest contexts |", "|---|---|---|---|---|"]
    for r in doc["top_features"]:
        contexts = "; ".join(f"{c['sample_id']} ({c['activation']:.2f})" for c in r["contexts"])
        lines.append(f"| {r['rank']} | {r['feature']} | {r['pooling']} | {r['coef_per_sd']:.3f} | {contexts} |")
    if doc["repair_features"]:
        lines += ["", "| rank | feature moved by KL Repair's patch | pooling | mean full - deleted | pairs |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['rank']} | {r['feature']} | {r['pooling']} | {r['mean_diff']:.3f} | {r['n_pairs']} |"
                  for r in doc["repair_features"]]
    return lines
