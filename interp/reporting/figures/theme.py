"""The one look of every figure: a white Plotly template with an Okabe-Ito palette, and shared trace styles.

Every figure passes ``template=TEMPLATE`` itself; the global ``plotly.io``
default is left alone so a notebook's own plots are not restyled. Importing
this module registers the template as ``plotly.io.templates["interp"]``, so
your own figures can take the house style::

    import plotly.io as pio
    import interp.reporting.figures  # registers "interp"
    fig.update_layout(template="interp")          # one figure
    pio.templates.default = "interp"              # or every figure of the session
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
import plotly.io as pio

from interp.data.render import SEGMENT_KINDS

# Okabe & Ito (2008), "Color Universal Design": distinguishable under the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
GREY = "#8C8C8C"
# One colour per segment kind (interp.data.render.SEGMENT_KINDS), the same in every figure and notebook that
# colours by kind (``color_discrete_map=SEGMENT_COLOURS`` with plotly express).
SEGMENT_COLOURS = {kind: colour for kind, colour in zip(SEGMENT_KINDS, (
    "#000000", GREY, "#56B4E9", "#D55E00", "#0072B2", "#009E73", "#F0E442"))}
# Liberation Sans (fonts-liberation, which Debian's chromium pulls in) has Arial's metrics; then fall back.
FONT = "Liberation Sans, Arial, Helvetica, sans-serif"

_AXIS = dict(
    showline=True, linecolor="#444444", linewidth=1, mirror=False, ticks="outside", tickcolor="#444444",
    showgrid=True, gridcolor="#E6E6E6", zeroline=False, automargin=True, title=dict(standoff=10),
)

TEMPLATE = go.layout.Template(layout=go.Layout(
    font=dict(family=FONT, size=14, color="#222222"),
    title=dict(font=dict(size=18), x=0.01, xanchor="left", y=0.97, yanchor="top"),
    colorway=PALETTE,
    paper_bgcolor="white",
    plot_bgcolor="white",
    xaxis=_AXIS,
    yaxis=_AXIS,
    legend=dict(bgcolor="rgba(255,255,255,0.85)", bordercolor="#CCCCCC", borderwidth=1, font=dict(size=13)),
    margin=dict(l=80, r=30, t=100, b=70),
    hoverlabel=dict(font=dict(family=FONT)),
    bargap=0.25,
))

TEMPLATE_NAME = "interp"


def register_template(name: str = TEMPLATE_NAME) -> str:
    """Register the house template as ``plotly.io.templates[name]`` (idempotent); return the name."""
    pio.templates[name] = TEMPLATE
    return name


register_template()

REFERENCE_LABEL = "reference study (Qwen3.5-9B)"

# A horizontal legend pinned to the bottom of the whole figure, below any axis titles; pair with margin b >= 150.
BOTTOM_LEGEND = dict(orientation="h", x=0.5, xanchor="center", yref="container", y=0.02, yanchor="bottom")


def ci_band(x: Sequence[float], lo: Sequence[float], hi: Sequence[float], color: str, name: str,
            showlegend: bool = True, legendgroup: str | None = None) -> go.Scatter:
    """A filled polygon between lo and hi along x (a confidence band), drawn under the lines."""
    return go.Scatter(
        x=[*x, *reversed(x)], y=[*hi, *reversed(lo)], fill="toself", fillcolor=rgba(color, 0.18),
        line=dict(width=0), mode="lines", hoverinfo="skip", name=name, showlegend=showlegend,
        legendgroup=legendgroup,
    )


def reference_markers(x: Sequence, y: Sequence[float], showlegend: bool = True, text: Sequence[str] | None = None,
                      ) -> go.Scatter:
    """Grey open diamonds for the reference study's values, one legend entry shared by all panels."""
    return go.Scatter(
        x=list(x), y=list(y), mode="markers", name=REFERENCE_LABEL, legendgroup="reference", showlegend=showlegend,
        marker=dict(symbol="diamond-open", size=12, color=GREY, line=dict(width=2.5)),
        hovertext=text, hovertemplate="reference study: %{y}<extra></extra>",
    )


def legend_swatch(name: str, color: str) -> go.Scatter:
    """A legend-only entry (no data) for shapes such as shaded layer bands."""
    return go.Scatter(x=[None], y=[None], mode="markers", name=name,
                      marker=dict(symbol="square", size=14, color=rgba(color, 0.35)))


def has_ci(ci: Sequence[float | None] | None) -> bool:
    """True for an interval with two finite ends and positive width (a bootstrap over 1 task gives lo == hi)."""
    if not ci or len(ci) < 2:
        return False
    lo, hi = ci[0], ci[1]
    return lo is not None and hi is not None and lo == lo and hi == hi and hi > lo


def ci_whiskers(x: Sequence, values: Sequence[float | None], cis: Sequence, scale: float = 1.0, name: str = "95% CI",
                legendgroup: str | None = None, color: str = "#333333") -> go.Scatter | None:
    """Error bars (an invisible-marker trace) at the points that have a CI (``has_ci``), none elsewhere; None if none."""
    keep = [i for i, (c, v) in enumerate(zip(cis, values)) if has_ci(c) and v is not None]
    if not keep:
        return None
    return go.Scatter(
        x=[x[i] for i in keep], y=[values[i] for i in keep], mode="markers", marker=dict(size=1, opacity=0),
        name=name, legendgroup=legendgroup, showlegend=legendgroup is None, hoverinfo="skip",
        error_y=dict(type="data", symmetric=False, color=color, thickness=1.5, width=8,
                     array=[scale * cis[i][1] - values[i] for i in keep],
                     arrayminus=[values[i] - scale * cis[i][0] for i in keep]))


def note(fig: go.Figure, text: str, axis: str = "") -> None:
    """A boxed grey note in the top-left corner of a panel (``axis`` "", "2", ...), e.g. "too few samples for a CI"."""
    fig.add_annotation(text=text, xref=f"x{axis} domain", yref=f"y{axis} domain", x=0.01, y=0.99, xanchor="left",
                       yanchor="top", showarrow=False, font=dict(size=12, color="#444444"), align="left",
                       bgcolor="rgba(255,255,255,0.9)", bordercolor="#BBBBBB", borderwidth=1)


SUBTITLE_CHARS = 130  # a subtitle line at 14 px fits ~150 characters of the 1100 px export


def subtitle(parts: Sequence[str], chars: int = SUBTITLE_CHARS) -> tuple[str, int]:
    """Parts joined with "; " and broken into lines of at most ``chars`` characters; (text, number of lines)."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 2 + len(part) <= chars:
            lines[-1] += "; " + part
        else:
            lines.append(part)
    return "<br>".join(lines), len(lines)


def titled(fig: go.Figure, title: str, parts: Sequence[str]) -> None:
    """Set the title and the wrapped subtitle, with a top margin that makes room for every subtitle line."""
    text, n = subtitle(parts)
    fig.update_layout(title=dict(text=title, subtitle=dict(text=text)), margin=dict(t=80 + 20 * n))


def rgba(hex_color: str, alpha: float) -> str:
    """A palette colour ('#RRGGBB') with transparency, for fills and shaded bands."""
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"
