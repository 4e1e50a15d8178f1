"""Figure 5: where the boundary token attends, by segment kind, layer and history condition, from attention.json."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp.reporting.figures.theme import BOTTOM_LEGEND, PALETTE, TEMPLATE, titled

MAX_LAYERS = 6  # bars per kind: more overprint at the export width and overflow the legend


def shown_layers(n: int, most: int = MAX_LAYERS) -> list[int]:
    """Indices of at most ``most`` of ``n`` layers, evenly spaced, first and last included (all when n <= most)."""
    if n <= most:
        return list(range(n))
    return sorted({round(i * (n - 1) / (most - 1)) for i in range(most)})


def attention_figure(result: dict) -> go.Figure:
    """Per condition (columns): raw attention mass per segment kind (top) and mass per token of the kind (bottom,
    log scale), bars per layer (at most MAX_LAYERS, evenly spaced), whiskers the 25th-75th percentile over boundaries.

    Reads attention.json (``interp.extraction.attention_summary.FIELDS``): ``layers``, ``kinds``, ``conditions``
    {condition: {n, mass, mass_q, per_token, per_token_q, tokens}}; a file without ``conditions`` (older layout)
    draws its one ``condition``'s mean ``mass`` without spread or per-token row. Colours are layers, not kinds,
    so a kind that takes most of the mass (glue tokens) does not dominate the picture.
    """
    layers, kinds = result["layers"], result["kinds"]
    conditions = result.get("conditions") or {
        result.get("condition", "?"): {"n": result.get("n"), "mass": result["mass"]}}
    for name, entry in conditions.items():
        if len(entry["mass"]) != len(layers) or any(len(row) != len(kinds) for row in entry["mass"]):
            raise ValueError(f"field 'mass' of {name} must be [len(layers)={len(layers)}][len(kinds)={len(kinds)}]")
    per_token = all(entry.get("per_token") is not None for entry in conditions.values())
    rows = 2 if per_token else 1
    fig = make_subplots(rows=rows, cols=len(conditions), shared_yaxes="rows", horizontal_spacing=0.06,
                        vertical_spacing=0.16, subplot_titles=[
                            *(f"{chr(97 + i)}  {name}: attention mass (n = {entry.get('n', '?')} boundaries)"
                              for i, (name, entry) in enumerate(conditions.items())),
                            *((f"{chr(97 + len(conditions) + i)}  {name}: mass per token of the kind"
                               for i, name in enumerate(conditions)) if per_token else ())])
    labels = [kind.replace("_", "<br>") for kind in kinds]
    shown = shown_layers(len(layers))
    for col, entry in enumerate(conditions.values(), start=1):
        for row, key in ((1, "mass"), (2, "per_token"))[:rows]:
            for colour, i in enumerate(shown):
                layer = layers[i]
                values = entry[key][i]
                quartiles = (entry.get(f"{key}_q") or [None] * len(layers))[i]
                error = None
                if quartiles:
                    error = dict(type="data", symmetric=False, color="#333333", thickness=1.2, width=4,
                                 array=[q[1] - v if q and q[1] is not None and v is not None else None
                                        for q, v in zip(quartiles, values)],
                                 arrayminus=[v - q[0] if q and q[0] is not None and v is not None else None
                                             for q, v in zip(quartiles, values)])
                fig.add_trace(go.Bar(
                    x=labels, y=values, error_y=error, name=f"layer {layer}", legendgroup=str(layer),
                    showlegend=row == 1 and col == 1, marker_color=PALETTE[colour % len(PALETTE)],
                    hovertemplate=f"layer {layer}, %{{x}}: %{{y:.3g}}<extra></extra>"), row, col)
    fig.update_yaxes(title_text="mass (fraction of the row)", rangemode="tozero", row=1, col=1)
    if per_token:
        fig.update_yaxes(type="log", row=2)
        fig.update_yaxes(title_text="mass per token (log)", row=2, col=1)
    fig.update_xaxes(tickangle=0, tickfont=dict(size=12))
    fig.update_layout(template=TEMPLATE, height=760 if per_token else 520, barmode="group", legend=BOTTOM_LEGEND,
                      margin=dict(b=130))
    fig.update_layout(legend_title_text="full-attention layer (whiskers: 25th-75th percentile over boundaries)")
    tokens = next(iter(conditions.values())).get("tokens")
    parts = ["boundary token's attention, mean over heads, then over boundaries"]
    if len(shown) < len(layers):
        parts[0] += (f"; {len(shown)} of {len(layers)} layers shown, evenly spaced (all are in attention.json)")
    if tokens:
        parts.append("mean tokens per kind: " + ", ".join(f"{k.replace('_', ' ')} {t:.0f}" for k, t in zip(kinds, tokens)))
    titled(fig, "Boundary-token attention by segment kind, layer and history condition", parts)
    return fig
