"""What a reviewer checks on every figure, made from the real writers' files (tests/figures/conftest.py):
tick labels that do not overprint at the export size, every drawn trace named in the legend, subtitles that
fit, and titles that claim a conclusion only when the figure's statistic supports it (tested both ways).

Tick labels: plotly's full layout (``full_figure_for_development``, needs Chromium) gives each axis's
resolved range, domain and tick angle at the export width; a category label's width is estimated from its
longest line (Liberation Sans averages 0.55 em per character) and must fit between its neighbours, with the
label horizontal (plotly rotates overprinting labels by itself, which is what the issue saw).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from interp.reporting.figures import FIGURES, load_result
from interp.reporting.figures import export
from interp.reporting.figures.harm import additivity_test, harm_figure
from interp.reporting.figures.theme import SUBTITLE_CHARS

from .conftest import write_results

pytestmark = pytest.mark.unit

CHAR_EM = 0.55
CLAIM = re.compile(r"\b(not additive|is additive|additive within|significant|outperform|improves|reproduces?|"
                   r"causes?|proves?|is encoded|confirms?)\b", re.IGNORECASE)


@pytest.fixture(scope="module")
def figures(tmp_path_factory) -> dict:
    root = write_results(tmp_path_factory.mktemp("quality"))
    return {spec.name: spec.build(load_result(root / spec.source)) for spec in FIGURES}


def _lines(text: str) -> list[str]:
    return re.sub(r"<[^>]+>", "\n", text or "").split("\n")


def _category_labels(fig, axis: str) -> list[str] | None:
    """The tick labels of a category (or ticktext) x axis, in axis order; None for a numeric axis."""
    layout = getattr(fig.layout, axis)
    if layout.ticktext:
        return list(layout.ticktext)
    ref = "x" + axis.removeprefix("xaxis")
    labels = [str(x) for trace in fig.data if (trace.xaxis or "x") == ref and trace.x is not None
              and trace.type in ("bar", "box", "scatter") for x in trace.x if isinstance(x, str)]
    return list(dict.fromkeys(labels)) or None


def overprinted(fig) -> list[str]:
    """Category tick labels wider than the space between neighbouring ticks, or turned away from horizontal."""
    fig = copy.deepcopy(fig)
    fig.update_layout(width=export.PNG_WIDTH)
    full = export.full_layout(fig)
    plot_width = export.PNG_WIDTH - full.layout.margin.l - full.layout.margin.r
    size = full.layout.font.size
    bad = []
    for axis in [k for k in full.layout.to_plotly_json() if re.fullmatch(r"xaxis\d*", k)]:
        labels = _category_labels(fig, axis)
        layout = getattr(full.layout, axis)
        if not labels or len(labels) < 2 or not layout.showticklabels:
            continue
        if layout.tickangle not in (0, None):
            bad.append(f"{axis}: tick labels at {layout.tickangle} degrees")
        lo, hi = layout.range
        step_px = plot_width * (layout.domain[1] - layout.domain[0]) / (hi - lo)
        if layout.ticktext:  # explicit ticks: spacing of tickvals
            values = list(layout.tickvals)
            gaps = [abs(b - a) * step_px for a, b in zip(values, values[1:])]
        else:
            gaps = [step_px] * (len(labels) - 1)
        widths = [max(len(line) for line in _lines(label)) * CHAR_EM * (layout.tickfont.size or size) for label in labels]
        for i, gap in enumerate(gaps):
            if (widths[i] + widths[i + 1]) / 2 > gap:
                bad.append(f"{axis}: labels {labels[i]!r} and {labels[i + 1]!r} need "
                           f"{(widths[i] + widths[i + 1]) / 2:.0f} px, have {gap:.0f} px")
    return bad


def unlabelled(fig) -> list[str]:
    """Traces that draw data but have no legend entry of their own, of their legend group or of their name."""
    shown = {(t.legendgroup or t.name) for t in fig.data if t.showlegend is not False} | \
            {t.name for t in fig.data if t.showlegend is not False}
    return [t.name or f"trace {i}" for i, t in enumerate(fig.data)
            if t.showlegend is False and t.legendgroup not in shown and t.name not in shown]


needs_chromium = pytest.mark.skipif(export.find_chromium() is None, reason="full layout needs Chromium (kaleido)")
# Each full layout starts a browser render (~3 s): slow as a set.


@pytest.mark.slow
@needs_chromium
@pytest.mark.parametrize("name", [spec.name for spec in FIGURES])
def test_no_overprinted_tick_labels(figures, name):
    assert not overprinted(figures[name])


@needs_chromium
def test_overprint_check_can_fail():
    import plotly.graph_objects as go

    long = [f"a rather long condition label number {i}" for i in range(9)]
    assert overprinted(go.Figure(go.Bar(x=long, y=list(range(9)))))
    assert not overprinted(go.Figure(go.Bar(x=[f"c{i}" for i in range(9)], y=list(range(9)))))


@pytest.mark.parametrize("name", [spec.name for spec in FIGURES])
def test_every_trace_is_in_the_legend(figures, name):
    assert not unlabelled(figures[name])


def test_legend_check_can_fail(figures):
    fig = copy.deepcopy(figures["fig6_iclr"])
    fig.data[0].showlegend = False
    assert unlabelled(fig)


@pytest.mark.parametrize("name", [spec.name for spec in FIGURES])
def test_subtitle_lines_fit_the_export_width(figures, name):
    lines = _lines(figures[name].layout.title.subtitle.text)
    assert max(map(len, lines)) <= SUBTITLE_CHARS + 40  # one part longer than the wrap width stays whole


@pytest.mark.parametrize("name", [spec.name for spec in FIGURES if spec.name != "fig7_harm"])
def test_titles_claim_nothing(figures, name):
    fig = figures[name]
    texts = [fig.layout.title.text] + [a.text for a in fig.layout.annotations]
    assert not [t for t in texts if t and CLAIM.search(t)]


def _harm(tmp_path: Path) -> dict:
    return json.loads((write_results(tmp_path) / "harm" / "harm.json").read_text())


def test_harm_title_claims_non_additivity_when_the_ci_excludes_zero(tmp_path):
    result = _harm(tmp_path)  # synthetic truth: every set's harm is 0.5-0.9 x the sum of its singletons, 4 tasks
    test = additivity_test(result)
    assert test["verdict"] == "not additive" and test["ci"][1] < 0
    title = harm_figure(result).layout.title.text
    assert "is not additive" in title and CLAIM.search(title)


def test_harm_title_claims_nothing_for_additive_sets_or_too_few_tasks(tmp_path):
    result = _harm(tmp_path)
    for boundary in result["boundaries"]:  # synthetic truth: exactly additive
        single = {tuple(s["members"][0]): s["harm"] for s in boundary["sets"] if len(s["members"]) == 1}
        for s in boundary["sets"]:
            if len(s["members"]) > 1:
                s["harm"], s["interaction"] = sum(single[tuple(m)] for m in s["members"]), 0.0
    assert additivity_test(result)["verdict"] is None  # margin 0: "additive within the margin" is never claimed
    assert not CLAIM.search(harm_figure(result).layout.title.text)
    result["margin"] = result["config"]["margin"] = 0.01  # the figure reads the recorded config
    assert additivity_test(result)["verdict"] == "additive within the margin"
    few = _harm(tmp_path)
    few["boundaries"] = few["boundaries"][:2]  # 2 tasks: no CI, no conclusion, a note on the figure
    fig = harm_figure(few)
    assert additivity_test(few)["verdict"] is None and not CLAIM.search(fig.layout.title.text)
    assert any("too few for a CI" in a.text for a in fig.layout.annotations)


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory, tiny_sensor, mini_trajectory) -> Path:
    """attention.json and iclr_blocks.csv written by the demo's own stages from a tiny-qwen3.5 store of mini.jsonl."""
    from interp.extraction.extract import ExtractConfig
    from interp.pipelines import stages

    root = tmp_path_factory.mktemp("tiny")
    config = ExtractConfig(layers=[0], sites=["resid_pre"], poolings=["last"],
                           attention_layers=tiny_sensor.full_attention_layers, block_entropy=True)
    stages.extract(tiny_sensor, [mini_trajectory], ["full", "delete_all_reasoning"], config, root / "store")
    stages.attention(root / "store", root / "attention")
    stages.iclr(tiny_sensor, [mini_trajectory], root / "store", root / "iclr")
    return root


@pytest.mark.slow
@needs_chromium
@pytest.mark.parametrize("name", ["fig5_attention", "fig6_iclr"])
def test_figures_from_a_real_tiny_model_store(tiny_results, name):
    spec = next(spec for spec in FIGURES if spec.name == name)
    fig = spec.build(load_result(tiny_results / spec.source))
    assert not overprinted(fig) and not unlabelled(fig) and not CLAIM.search(fig.layout.title.text)
    if name == "fig5_attention":
        assert [a.text.split(":")[0] for a in fig.layout.annotations[:2]] == ["a  full", "b  delete_all_reasoning"]
