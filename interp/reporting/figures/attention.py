"""Figure 5: where the boundary token attends, by segment kind and full-attention layer, from attention.json."""

from __future__ import annotations

import plotly.graph_objects as go

from interp.reporting.figures.theme import PALETTE, TEMPLATE


def attention_figure(result: dict) -> go.Figure:
    """Stacked bars: mean attention mass of the boundary token on each segment kind, per full-attention layer.

    Reads attention.json: ``layers`` [full-attention layer indices], ``kinds`` [segment
    kinds], ``mass`` [n_layers][n_kinds] (mean over heads and samples, a fraction of the
    row's mass), ``n`` (samples), ``condition``.
    """
    layers, kinds, mass = result["layers"], result["kinds"], result["mass"]
    if len(mass) != len(layers) or any(len(row) != len(kinds) for row in mass):
        raise ValueError(f"field 'mass' must be [len(layers)={len(layers)}][len(kinds)={len(kinds)}]")
    fig = go.Figure()
    for k, kind in enumerate(kinds):
        fig.add_trace(go.Bar(
            x=[str(layer) for layer in layers], y=[row[k] for row in mass], name=kind.replace("_", " "),
            marker=dict(color=PALETTE[k % len(PALETTE)], line=dict(color="white", width=0.5)),
            hovertemplate=f"layer %{{x}}, {kind}: %{{y:.3f}}<extra></extra>",
        ))
    fig.update_layout(
        template=TEMPLATE, height=540, barmode="stack",
        title=dict(text="Boundary-token attention mass by segment kind",
                   subtitle=dict(text=f"full-attention layers only; condition {result.get('condition', '?')}; "
                                      f"n = {result.get('n', '?')} boundaries; mean over heads and boundaries")),
        xaxis=dict(title="full-attention layer (index)", type="category"),
        yaxis=dict(title="attention mass from the boundary token (fraction)",
                   range=[0, 1.02 * max(1.0, *map(sum, mass))]),
        legend=dict(title=dict(text="segment kind"), traceorder="reversed", x=1.02, xanchor="left", y=1),
    )
    return fig
