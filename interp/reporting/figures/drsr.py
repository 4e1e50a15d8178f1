"""DRSR's mechanistic appendix figures from ``drsr.json`` (``patching.drsr``): history granularity (Fig 4),
relations across depth and accuracy against the margin (Fig 3), interaction structure (Fig 2, Fig 6) and
attention density (Fig 10). Titles describe; they draw no conclusion.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp.reporting import reference as ref
from interp.reporting.numbers import num, shown
from interp.reporting.ran import setting
from interp.reporting.figures.theme import (BOTTOM_LEGEND, GREY, PALETTE, TEMPLATE, ci_band, ci_whiskers, note,
                                           reference_markers, rgba, titled)

FAMILY_LABEL = {"relation": "decision-conditioned relation", "block": "block only (candidate alone)",
                "mismatched": "mismatched state (control)", "state": "current state only (control)",
                "surface": "surface features (tokens, recency, kind, position)"}
KIND_ABBREV = {"reasoning": "R", "observation": "O", "tool_exchange": "T", "step": "S"}


def _where(result: dict) -> str:
    """Boundaries, the recorded set sizes and budget, model and dtype (the result's record)."""
    model = (result.get("model") or {}).get("spec", "?")
    return (f"{len(result['boundaries'])} boundaries, sets up to {setting(result, 'max_k')} units "
            f"({setting(result, 'budget')} per size), CIs from {setting(result, 'n_boot')} task-bootstrap resamples, "
            f"model {model}")


def granularity_figure(result: dict) -> go.Figure:
    """a: step harm against normalised position; b: parent-step harm against its lowest-harm block, with the
    unsafe-parent / safe-child region shaded."""
    g = result["granularity"]
    u = setting(result, "unsafe")
    steps = g["steps"]
    if not steps:
        raise ValueError("no step units in drsr.json: run with --units including step and a block kind")
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        "a  step harm by historical position", "b  parent step vs its lowest-harm block"))
    text = [f"{s['task_id']}@{s['after_step']} step {s['step']}" for s in steps]
    fig.add_trace(go.Scatter(x=[s["position"] for s in steps], y=[s["harm"] for s in steps], mode="markers",
                             name="whole step", hovertext=text, marker=dict(color=PALETTE[0], size=8, opacity=0.75)),
                  1, 1)
    kids = [s for s in steps if s["min_child_harm"] is not None]
    xs = [s["harm"] for s in kids]
    ys = [s["min_child_harm"] for s in kids]
    hi = max([u * 2, *xs, *ys]) * 1.05
    lo = min([0.0, *xs, *ys]) * 1.05
    fig.add_shape(type="rect", x0=u, x1=hi, y0=lo, y1=u, fillcolor=rgba(PALETTE[3], 0.12), line=dict(width=0),
                  row=1, col=2)
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name="unsafe parent, safe block (shaded)",
                             marker=dict(symbol="square", size=14, color=rgba(PALETTE[3], 0.35))), 1, 2)
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name="step with blocks",
                             hovertext=[f"{s['task_id']}@{s['after_step']} step {s['step']}" for s in kids],
                             marker=dict(color=PALETTE[1], size=8, opacity=0.8)), 1, 2)
    for axis in ("x", "y"):
        getattr(fig, f"add_{'v' if axis == 'x' else 'h'}line")(
            **{axis: u}, line=dict(color=GREY, dash="dot"), row=1, col=2)
    fig.add_hline(y=u, line=dict(color=GREY, dash="dot"), row=1, col=1)
    fig.update_xaxes(title_text="step position in the history (step / b; 1 = latest)", row=1, col=1)
    fig.update_yaxes(title_text="harm of deleting the step (nats/token)", row=1, col=1)
    fig.update_xaxes(title_text="parent step harm (nats/token)", range=[lo, hi], row=1, col=2)
    fig.update_yaxes(title_text="lowest harm of one of its blocks (nats/token)", range=[lo, hi], row=1, col=2)
    frac = g["unsafe_parent_safe_child_fraction"]
    sr, br = g["step_range"], g["block_range"]
    parts = [f"median within-state range: steps {shown(num(sr['median']))} ({sr['n_states']} states), blocks "
             f"{shown(num(br['median']))} ({br['n_states']} states); reference {ref.DRSR_GRANULARITY['step_range']} vs "
             f"{ref.DRSR_GRANULARITY['block_range']}",
             f"unsafe parents holding a safe block: {g['n_unsafe_parents_with_safe_child']} of {g['n_unsafe_parents']}"
             + (f" ({frac:.1%})" if frac is not None else "")
             + f"; reference {ref.DRSR_GRANULARITY['unsafe_parent_safe_child']:.1%}",
             f"unsafe: harm above {u:.3f} nats/token (dotted)", _where(result)]
    fig.update_layout(template=TEMPLATE, height=600, legend=BOTTOM_LEGEND, margin=dict(b=150))
    titled(fig, "Deletion harm of whole steps and of their blocks at the same state", parts)
    return fig


def relations_figure(result: dict) -> go.Figure:
    """a: pair-ordering accuracy at the margin by layer per feature family (grouped CV by trajectory); b: accuracy
    against the margin for the singleton aggregators and the families at the chosen layer."""
    rel, margin = result["relations"], setting(result, "margin")
    if not rel["families"]:
        raise ValueError(f"relations: no grouped cross-validation ({rel['n_tasks']} trajectories; need 2)")
    fig = make_subplots(rows=1, cols=2, column_widths=[0.55, 0.45], horizontal_spacing=0.1, subplot_titles=(
        f"a  pair-ordering accuracy by layer (margin {margin:.3f})", "b  accuracy against the harm margin"))
    colour = {f: PALETTE[i] for i, f in enumerate(FAMILY_LABEL)}
    for family, rows in rel["families"].items():
        if family == "surface":
            continue
        layered = [r for r in rows if r["pair_accuracy"] is not None]
        x, y = [r["layer"] for r in layered], [r["pair_accuracy"] for r in layered]
        with_ci = [r for r in layered if r["ci"]]
        if with_ci:
            fig.add_trace(ci_band([r["layer"] for r in with_ci], [r["ci"][0] for r in with_ci],
                                  [r["ci"][1] for r in with_ci], colour[family], FAMILY_LABEL[family],
                                  showlegend=False, legendgroup=family), 1, 1)
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=FAMILY_LABEL[family], legendgroup=family,
                                 line=dict(color=colour[family])), 1, 1)
    surface = rel["families"].get("surface", [{}])[0].get("pair_accuracy")
    if surface is not None:
        fig.add_trace(go.Scatter(x=[rel["layers"][0], rel["layers"][-1]], y=[surface] * 2, mode="lines",
                                 name=FAMILY_LABEL["surface"], legendgroup="surface",
                                 line=dict(color=colour["surface"], dash="dash")), 1, 1)
    if all(r["pair_accuracy"] is None for rows in rel["families"].values() for r in rows):
        note(fig, f"no pair of sets differs by the margin {margin:.3f}", "")
    fig.add_trace(reference_markers([rel["layers"][-1]], [ref.DRSR_STATE_ONLY],
                                    text=["current state only: 0.500"]), 1, 1)
    curve = rel["margin_curve"]
    aggs = {"sum": PALETTE[5], "mean": PALETTE[6], "max": PALETTE[7], "min": GREY}
    for name, ys in curve["accuracy"].items():
        if name in aggs:
            fig.add_trace(go.Scatter(x=curve["margins"], y=ys, mode="lines+markers", name=f"{name} of singleton harms",
                                     line=dict(color=aggs[name], dash="dot")), 1, 2)
        elif name in ("relation", "surface", "mismatched"):
            fig.add_trace(go.Scatter(x=curve["margins"], y=ys, mode="lines", name=FAMILY_LABEL[name],
                                     legendgroup=name, showlegend=False, line=dict(color=colour[name])), 1, 2)
    fig.add_vline(x=margin, line=dict(color=GREY, dash="dot"), row=1, col=2)
    fig.add_trace(reference_markers([margin] * 4, list(ref.DRSR_PAIR_ACCURACY.values()), showlegend=False,
                                    text=[f"{k}: {v}" for k, v in ref.DRSR_PAIR_ACCURACY.items()]), 1, 2)
    fig.add_hline(y=0.5, line=dict(color=GREY, width=1), row=1, col=1)
    fig.add_hline(y=0.5, line=dict(color=GREY, width=1), row=1, col=2)
    fig.update_xaxes(title_text="layer (0-based resid_pre)", row=1, col=1)
    fig.update_yaxes(title_text="pair-ordering accuracy (out of fold)", range=[0, 1.02], row=1, col=1)
    fig.update_xaxes(title_text="margin (nats/token; dotted: primary)", row=1, col=2)
    fig.update_yaxes(title_text="pair-ordering accuracy", range=[0, 1.02], row=1, col=2)
    fig.update_layout(template=TEMPLATE, height=640, legend=BOTTOM_LEGEND, margin=dict(b=200))
    titled(fig, "Which features order deletion sets by their exact harm, layer by layer", [
        f"{rel['n_sets']} sets of 2+ units from {rel['n_tasks']} trajectories; ridge on summed member features, "
        "grouped 5-fold CV by trajectory; bands: 95% task bootstrap",
        f"b: families at layer {curve['layer']}; reference (diamonds): aggregators at 0.020, state only 0.500",
        _where(result)])
    return fig


def _group_label(key: str, group: object) -> str:
    if key == "composition":  # stacked one kind a line, so many compositions fit side by side
        return "<br>".join(KIND_ABBREV.get(k, k) for k in str(group).split("+"))
    return str(group)


def interaction_figure(result: dict) -> go.Figure:
    """Mean interaction (exact minus additive harm) with task-bootstrap CIs by set size, composition, semantic
    overlap, attention-head overlap and temporal span."""
    inter = result["interaction"]
    panels = [("size", "set size (units)"), ("span", "temporal span (steps)"),
              ("semantic", f"member cosine at layer {result['relation_layer']}"),
              ("heads", f"heads attending to both (mass >= {inter['head_threshold']})"),
              ("composition", "kinds in the set (R O T S)")]
    if not inter["sets"]:
        raise ValueError("no set of two or more units with an interaction in drsr.json")
    fig = make_subplots(rows=2, cols=3, horizontal_spacing=0.09, vertical_spacing=0.24,
                        specs=[[{}, {}, {}], [{}, {"colspan": 2}, None]],
                        subplot_titles=[f"{chr(97 + i)}  by {key}" for i, (key, _) in enumerate(panels)])
    for i, (key, label) in enumerate(panels):
        row, col = 1 + i // 3, 1 + i % 3
        rows = inter[f"by_{key}"]
        x = [_group_label(key, r["group"]) for r in rows]
        y = [r["mean_interaction"] for r in rows]
        fig.add_trace(go.Bar(x=x, y=y, name="mean interaction (95% task-bootstrap CI)", legendgroup="mean",
                             showlegend=i == 0, marker=dict(color=PALETTE[0]),
                             hovertext=[f"{r['n_sets']} sets, {r['n_tasks']} tasks" for r in rows]), row, col)
        whiskers = ci_whiskers(x, y, [r["ci"] for r in rows], legendgroup="mean")
        if whiskers is not None:
            fig.add_trace(whiskers, row, col)
        fig.update_xaxes(title_text=label, type="category", row=row, col=col)
        fig.add_hline(y=0, line=dict(color=GREY, width=1), row=row, col=col)
    sizes = [str(k) for k in ref.DRSR_INTERACTION if k >= 2]
    fig.add_trace(reference_markers(sizes, [ref.DRSR_INTERACTION[int(k)] for k in sizes]), 1, 1)
    fig.update_yaxes(title_text="interaction (nats/token)", row=1, col=1)
    fig.update_yaxes(title_text="interaction (nats/token)", row=2, col=1)
    fig.update_layout(template=TEMPLATE, height=820, legend=BOTTOM_LEGEND, margin=dict(b=150))
    titled(fig, "Interaction of jointly deleted units, by what the set holds", [
        f"{len(inter['sets'])} sets; interaction = exact harm minus the sum of singleton harms",
        "kinds: R reasoning, O observation, T tool exchange, S step", _where(result)])
    return fig


def density_split_labels(dens: dict) -> tuple[str, str, str]:
    """The (selected, retained, source) labels of an attention-density split: the gate's selection (DRSR's split)
    or exact singleton harm (the toolkit's)."""
    if dens.get("split") == "gate":
        return ("deleted by the gate", "retained by the gate",
                f"split by the gate's selection among its pool (DRSR's split; scorer {dens.get('scorer')})")
    return (f"selected by exact harm (harm <= {dens['unsafe_threshold']:.3f})",
            f"retained (harm > {dens['unsafe_threshold']:.3f})",
            "split by exact singleton harm, the toolkit's split (DRSR splits by the gate's selection: "
            "interp drsr --gate-scorer)")


def attention_density_figure(result: dict) -> go.Figure:
    """The boundary token's attention mass per token on each candidate at every full-attention layer, for the
    candidates selected for deletion and those retained: by the gate (split "gate") or by exact harm ("harm")."""
    dens = result["attention_density"]
    cands = dens["candidates"]
    layers = [entry["layer"] for entry in dens["layers"]]
    if not cands or not layers:
        raise ValueError("no candidate attention in drsr.json (no full-attention layer, or no candidates)")
    selected, retained, source = density_split_labels(dens)
    fig = go.Figure()
    for name, flag, colour in ((selected, True, PALETTE[2]), (retained, False, PALETTE[3])):
        mine = [c for c in cands if c["selected"] is flag]
        fig.add_trace(go.Box(x=[f"L{layer}" for c in mine for layer in layers],
                             y=[d for c in mine for d in c["density"]], name=f"{name}: {len(mine)} candidates",
                             marker=dict(color=colour), boxpoints="outliers"))
    fig.update_layout(template=TEMPLATE, height=560, boxmode="group", legend=BOTTOM_LEGEND, margin=dict(b=150))
    fig.update_xaxes(title_text="full-attention layer (0-based)")
    fig.update_yaxes(title_text="attention mass per token (mean over heads)", type="log")
    note(fig, "Lower attention alone is not a deletion-safety test:<br>the densities only describe the split.")
    gate = dens.get("split") == "gate"
    titled(fig, "Boundary attention density on deletion candidates, split by the gate's selection" if gate
           else "Boundary attention density on deletion candidates, split by exact harm", [source, _where(result)])
    return fig
