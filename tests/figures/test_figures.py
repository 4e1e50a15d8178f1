"""make_figures on synthetic result files: which figures, self-contained HTML, their content, skips, PNG export."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from interp.record import record
from interp.reporting.figures import (FIGURES, PALETTE, externalization_figure, interventions_figure, kl_repair_figure,
                                     load_result, make_figures, summary)
from patching.config import PatchConfig
from interp.reporting.figures import export
from interp.reporting.figures.theme import REFERENCE_LABEL

from .conftest import risk_layout_externalization, summary_layout_interventions, write_results

pytestmark = pytest.mark.unit

NAMES = [spec.name for spec in FIGURES]

# Strings each HTML must contain (JSON in the page escapes non-ASCII and "/", so these are plain ASCII).
EXPECTED = {
    "fig1_probe": ["Future-necessity probe: held-out AUROC by layer and pooling", "nested-CV AUROC 0.812 [0.751, 0.868]",
                   "last pooling (fixed probe, per layer)", "layer chosen by an outer fold (label: how many)",
                   "4/5 folds", "held-out AUROC (unitless)", "position baseline AUROC 0.700 (same nested CV)",
                   "position baseline 95% CI", "probe + baseline AUROC 0.825",
                   "gain over position baseline +0.112 [+0.051, +0.170]", "0.036 (position kept)"],
    "fig1b_probe_roc_pr": ["out-of-fold ROC and precision-recall", "false positive rate (fraction of y=0)",
                           "precision (fraction of predicted 1)", "operating point (each fold's threshold)"],
    "fig2_kl_repair": ["KL Repair by layer: qwen3.5-toy", "Repair, residual stream", "top-1 recovery, residual stream",
                       "Repair, ratio of sums, residual stream", "ratio of sums dotted",
                       "final resid_post.31", REFERENCE_LABEL, "Repair (unitless)",
                       "top-1 recovery (fraction of samples)"],
    "fig3_externalization": ["State externalization", "future behavioural risk (% of boundaries)", "one task",
                             "risk difference, G=1", "(percentage points)", "probe-score difference, G=1",
                             "(probability)", "c  probe score on the boundary by G"],
    "fig4_interventions": ["Controlled continuations", "ours (mean, 95% CI where there is one)", "score (rubric, 0",
                           "re-acquisition rate", "% of generations", "keep latest"],
    "fig5_attention": ["Boundary-token attention by segment kind, layer and history condition",
                       "observation", "full-attention layer", "mass (fraction of the row)", "mass per token (log)",
                       "delete_all_reasoning: mass per token of the kind", "25th-75th percentile"],
    "fig6_iclr": ["ICLR: predictive entropy of reasoning blocks", "kept (", "replaced by [SKIP] (",
                  "mean token predictive entropy of the block (bits",
                  "reasoning tokens replaced (fraction of the step)",
                  "2 steps not scored", "rho = 0.8"],
    "fig7_harm": ["Set-level deletion harm is not additive over single units", "y = x (additive)", "k = 2 units", "k = 3 units",
                  "additive prediction: sum of singleton harms (nats", "exact harm of the set (nats",
                  "mean interaction", "pair-order acc. 0.80", "additive MAE", "units: reasoning",
                  "margin of 0.000 nats"],
    "fig8_granularity": ["Deletion harm of whole steps and of their blocks at the same state", "whole step",
                         "unsafe parent, safe block (shaded)", "step position in the history (step", "reference 0.312",
                         "lowest harm of one of its blocks (nats", "8 boundaries, sets up to 4 units (10 per size), CIs from 100 task-bootstrap resamples, model qwen3.5-toy"],
    "fig9_relations": ["Which features order deletion sets by their exact harm, layer by layer",
                       "decision-conditioned relation", "mismatched state (control)", "current state only (control)",
                       "surface features (tokens, recency, kind, position)", "sum of singleton harms",
                       "grouped 5-fold CV by trajectory", "margin (nats"],
    "fig10_interaction": ["Interaction of jointly deleted units, by what the set holds", "a  by size", "e  by composition",
                          "mean interaction (95% task-bootstrap CI)", "temporal span (steps)", "R reasoning"],
    "fig11_attention_density": ["Boundary attention density on deletion candidates, split by exact harm",
                                "selected by exact harm (harm ", "retained (harm ",
                                "Lower attention alone is not a deletion-safety test"],
    "fig13_gate_scores": ["Unsafe scores of candidate deletion sets by exact label", "a  calibration sets (out-of-fold)",
                          "b  test sets (held out)", "unsafe (exact harm above the threshold)", "DRSR's tau 0.0741 is on its set model's scale, not this axis"],
    "fig14_gate_operating_curve": ["Risk-gate operating curve on the held-out trajectories", "risk threshold tau",
                                   "a  empirical unsafe rate of the measured deletions", "boundaries with a measured deletion",
                                   "fraction (of measured deletions; of boundaries)"],
    "fig15_gate_beta": ["Gate coverage, saving and unsafe rate across beta", "uncertainty coefficient beta",
                        "empirical unsafe rate", "reference frozen beta 0.0"],
    "fig12_tokens": ["Tokens sent, cached and generated under each history policy", "input read from the cache",
                     "input written to the cache", "direct removal (input tokens)", "paired amplification"],
}


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, dict]:
    """Every input present, HTML only."""
    root = write_results(tmp_path_factory.mktemp("made"))
    return root, make_figures(root, png=False)


def test_every_figure_is_made_from_a_full_results_dir(made):
    root, report = made
    assert list(report["written"]) == NAMES
    assert report["skipped"] == {} and report["failed"] == {}
    assert report["png_skipped"] == "png=False"
    assert all(paths == [root / "figures" / f"{name}.html"] for name, paths in report["written"].items())


@pytest.mark.parametrize("name", NAMES)
def test_html_loads_the_one_plotlyjs_beside_it(made, name):
    text = (made[0] / "figures" / f"{name}.html").read_text(encoding="utf-8")
    assert re.search(r"<script[^>]*\bsrc\s*=\s*[\"']plotly\.min\.js[\"']", text), "plotly.js from the directory"
    assert not re.search(r"<script[^>]*\bsrc\s*=\s*[\"']?(https?:)?//", text), "no script loaded from the network"
    assert len(text) < 200_000, "plotly.js is not inlined"
    library = (made[0] / "figures" / "plotly.min.js").read_text(encoding="utf-8")
    assert re.search(r"plotly\.js v\d+\.\d+\.\d+", library) and len(library) > 1_000_000


def test_template_is_registered_for_users():
    import plotly.graph_objects as go
    import plotly.io as pio

    from interp.reporting.figures.theme import TEMPLATE

    assert pio.templates["interp"] == TEMPLATE
    fig = go.Figure(go.Scatter(y=[1, 2]), layout=dict(template="interp"))
    assert fig.layout.template.layout.colorway == PALETTE


@pytest.mark.parametrize("name", NAMES)
def test_html_has_titles_traces_and_axis_titles(made, name):
    """Every figure of the registry: its title, a trace and titled axes in the HTML; then the content known for it."""
    text = (made[0] / "figures" / f"{name}.html").read_text(encoding="utf-8")
    spec = next(s for s in FIGURES if s.name == name)
    fig = spec.build(load_result(made[0] / spec.source))
    axes = [fig.layout[k].title.text for k in fig.layout if k.startswith(("xaxis", "yaxis")) and fig.layout[k].title.text]
    assert fig.layout.title.text and fig.data and axes, name
    expected = [fig.layout.title.text.split("<")[0], *axes, *EXPECTED.get(name, ())]
    escaped = {"/": "\\u002f", "<": "\\u003c", ">": "\\u003e", "&": "\\u0026"}  # as plotly writes JSON into HTML
    missing = [s for s in expected if json.dumps(s)[1:-1].translate(str.maketrans(escaped)) not in text]
    assert not missing


def test_missing_inputs_are_skipped_and_reported(tmp_path, capsys):
    write_results(tmp_path)
    for name in ("probe/probe_results.json", "harm/harm.json", "iclr/iclr_blocks.csv"):
        (tmp_path / name).unlink()
    report = make_figures(tmp_path, png=False)
    assert report["skipped"] == {"fig1_probe": "no probe/probe_results.json", "fig6_iclr": "no iclr/iclr_blocks.csv",
                                 "fig7_harm": "no harm/harm.json"}
    assert "fig1b_probe_roc_pr" in report["written"] and not (tmp_path / "figures" / "fig1_probe.html").exists()
    assert capsys.readouterr().out == "", "make_figures is library code: it prints nothing"
    line = summary(report, tmp_path / "figures")
    assert f"{len(NAMES) - 3} written" in line and "skipped fig1_probe (no probe/probe_results.json)" in line


def test_an_empty_results_dir_skips_everything(tmp_path):
    report = make_figures(tmp_path, png=True)
    assert report["written"] == {} and set(report["skipped"]) == set(NAMES) and report["png_skipped"] is None


def test_a_malformed_file_fails_alone_with_file_and_field(tmp_path, capsys):
    write_results(tmp_path)
    path = tmp_path / "patching" / "kl_repair.json"
    result = json.loads(path.read_text())
    del result["repair_mean"]
    path.write_text(json.dumps(result))
    report = make_figures(tmp_path, png=False)
    assert report["failed"] == {"fig2_kl_repair": f"{path}: missing field 'repair_mean'"}
    assert len(report["written"]) == len(NAMES) - 1
    assert "FAILED fig2_kl_repair" in summary(report, tmp_path / "figures")


def test_a_field_of_the_wrong_shape_fails_with_file_and_field(tmp_path):
    write_results(tmp_path)
    path = tmp_path / "patching" / "kl_repair.json"
    result = json.loads(path.read_text())
    result["repair_mean"] = result["repair_mean"][:-1]  # one site short
    path.write_text(json.dumps(result))
    failed = make_figures(tmp_path, png=False)["failed"]["fig2_kl_repair"]
    assert failed.startswith(f"{path}: field 'repair_mean'") and "dimension 'n_sites'" in failed


def test_excluded_samples_are_null_in_the_file_and_drawn(tmp_path):
    root = write_results(tmp_path)
    text = (root / "patching" / "kl_repair.json").read_text()
    assert "NaN" not in text
    result = json.loads(text)
    assert result["n_excluded"] == 2 and all(r is None for s in result["per_sample"] if s["excluded"]
                                             for r in s["repair"])
    result["repair_ci"] = [[None, None]] * len(result["sites"])  # as written when no CI could be computed
    assert kl_repair_figure(result).data


def test_reference_points_only_on_a_32_layer_model(tmp_path):
    result = json.loads((write_results(tmp_path) / "patching" / "kl_repair.json").read_text())
    assert REFERENCE_LABEL in [trace.name for trace in kl_repair_figure(result).data]
    result["model"]["n_layers"] = 30
    assert REFERENCE_LABEL not in [trace.name for trace in kl_repair_figure(result).data]


def test_kl_repair_sites_of_other_kinds_get_their_own_series():
    sites = ["attn_out.0", "attn_out.1", "mlp_out.0", "mlp_out.1", "resid_pre.0", "resid_pre.1", "resid_post.1"]
    layers = [0, 1, 0, 1, 0, 1, 1]
    fig = kl_repair_figure({"sites": sites, "layers": layers, "repair_mean": [0.1] * 7, "top1_mean": [0.5] * 7,
                            "repair_ci": [[0.0, 0.2]] * 7, "model": {"n_layers": 2}, **record(PatchConfig())})
    repair = {trace.name: list(trace.x) for trace in fig.data if trace.name.startswith("Repair")}
    assert repair == {"Repair, attn_out": [0, 1], "Repair, mlp_out": [0, 1], "Repair, residual stream": [0, 1, 2]}  # no repair_ratio: no ratio line


def test_kl_repair_ratio_of_sums_is_drawn_beside_the_mean(tmp_path):
    result = json.loads((write_results(tmp_path) / "patching" / "kl_repair.json").read_text())
    traces = {trace.name: trace for trace in kl_repair_figure(result).data}
    ratio, mean = traces["Repair, ratio of sums, residual stream"], traces["Repair, residual stream"]
    assert list(ratio.x) == list(mean.x) and list(ratio.y) == pytest.approx(result["repair_ratio"])


def test_externalization_draws_the_panels_present(tmp_path):
    result = json.loads((write_results(tmp_path) / "externalization" / "externalization.json").read_text())
    only_risk = externalization_figure({key: result[key] for key in ("p_y_given_g1", "p_y_given_g0")})
    assert [a.text for a in only_risk.layout.annotations] == ["a  future behavioural risk by G"]
    with pytest.raises(ValueError, match="none of the fields"):
        externalization_figure({"schema": {}})


def test_externalization_reads_the_interp_risk_layout(tmp_path):
    fig = externalization_figure(risk_layout_externalization(tmp_path))
    assert [a.text for a in fig.layout.annotations] == ["a  future behavioural risk by G",
                                                        "b  within-task difference, G=1 − G=0",
                                                        "c  probe score on the boundary by G"]
    tasks = [trace for trace in fig.data if trace.name == "one task"]
    assert [len(trace.y) for trace in tasks] == [4, 4] and [trace.showlegend for trace in tasks] == [True, False]
    assert list(tasks[0].y) == pytest.approx([10, 20, 30, 40])  # risk differences in percentage points, sorted
    assert fig.layout.yaxis3.title.text == "probe-score difference, G=1 − G=0 (probability)"  # the reference's units
    logodds_only = risk_layout_externalization(tmp_path)
    logodds_only["hidden_score_gap"]["probability"] = None
    fig = externalization_figure(logodds_only)
    assert fig.layout.yaxis3.title.text == "probe-score difference, G=1 − G=0 (log-odds)"
    assert [trace.name for trace in fig.data if trace.xaxis == "x3"] == ["one task", "mean (95% CI)"]  # no reference


def test_interventions_reads_the_summary_layout():
    fig = interventions_figure(summary_layout_interventions())
    traces = {trace.name: trace for trace in fig.data}
    scores, rates = traces["ours (mean, 95% CI where there is one)"], traces["re-acquisition rate (of n generations)"]
    assert [x.split("<br>")[0] for x in scores.x] == ["full", "delete all", "hide"]  # no score: left out
    assert list(scores.y) == [0.9, 0.61, 0.5] and list(rates.y) == [10, 75]


def test_interventions_draws_every_scored_turn_zeros_included():
    from interp.continuations.run import RunSettings, interventions_document

    from .conftest import MODEL, _rows

    empty = {**_rows("full", [0.0])[0], "state_id": "s9", "parse_failure": True, "text": ""}
    rows = (_rows("full", [0.0, 0.0]) + [empty] + _rows("keep_latest_reasoning", [1.0, 0.0, 0.5])
            + [{**r, "score": None, "truncated": True, "stopped": False} for r in _rows("delete_all_reasoning", [0.0])])
    settings = RunSettings(conditions=("full", "keep_latest_reasoning", "delete_all_reasoning"), samples=0)
    fig = interventions_figure(interventions_document(rows, settings, MODEL, 3, [], n_boot=50))
    traces = {trace.name: trace for trace in fig.data}
    bars, points = traces["ours (mean, 95% CI where there is one)"], traces["each scored turn"]
    assert list(bars.y)[:2] == [0.0, 0.5] and list(bars.text)[:2] == ["0.00", "0.50"]  # a zero mean is labelled
    assert sorted(points.y) == [0.0, 0.0, 0.0, 0.0, 0.5, 1.0]  # all six scored turns, the three zeros of full too
    assert [x.split("<br>")[0] for x in points.x].count("full") == 3
    notes = " ".join(a.text for a in fig.layout.annotations)
    assert "no scored turn under delete_all_reasoning" in notes
    assert "1 of 7 turns did not parse as a turn of the trajectory's format (1 empty" in notes


def test_one_template_everywhere(made):
    root, _ = made
    for name in NAMES:
        text = (root / "figures" / f"{name}.html").read_text(encoding="utf-8")
        assert json.dumps(list(PALETTE)).replace(" ", "") in text.replace(" ", ""), name
        assert "Liberation Sans, Arial" in text, name


def test_without_chromium_html_is_written_and_one_message_says_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(export, "find_chromium", lambda: None)
    write_results(tmp_path)
    report = make_figures(tmp_path, png=True)
    assert report["png_skipped"] == export.NO_CHROMIUM and "apt-get install chromium" in export.NO_CHROMIUM
    assert len(report["written"]) == len(NAMES) and not list((tmp_path / "figures").glob("*.png"))
    assert capsys.readouterr().out == ""
    assert summary(report, tmp_path / "figures").count("PNG export skipped") == 1


@pytest.mark.skipif(export.find_chromium() is None, reason="no Chromium for kaleido (apt-get install chromium)")
def test_png_export_writes_valid_images(tmp_path):
    write_results(tmp_path)
    report = make_figures(tmp_path, png=True)
    assert report["png_skipped"] is None
    for name in NAMES:
        png = tmp_path / "figures" / f"{name}.png"
        assert report["written"][name][-1] == png
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
        width, height = struct.unpack(">II", data[16:24])
        assert width == export.PNG_WIDTH * export.PNG_SCALE and height >= 1000
        assert len(data) > 50_000  # a drawn figure, not a blank page
    assert not list((tmp_path / "figures").glob(".*")), "no temporary files left"


def test_attention_figure_keeps_at_most_six_layers_and_says_so():
    from interp.reporting.figures.attention import MAX_LAYERS, attention_figure, shown_layers

    assert shown_layers(4) == [0, 1, 2, 3]
    assert shown_layers(30) == [0, 6, 12, 17, 23, 29] and len(shown_layers(30)) == MAX_LAYERS
    kinds = ["reasoning_block", "glue"]
    mass = [[0.3, 0.7]] * 30
    fig = attention_figure({"layers": list(range(30)), "kinds": kinds, "conditions": {"full": {"n": 3, "mass": mass}}})
    legend = [t.name for t in fig.data if t.showlegend]
    assert legend == [f"layer {i}" for i in shown_layers(30)]
    assert "6 of 30 layers shown" in fig.layout.title.subtitle.text


def test_kaleido_start_up_error_is_retried_with_a_message_and_others_are_not(capsys):
    """kaleido's page evaluated before it loaded (a busy machine) is retried, said on stderr; other errors raise."""
    calls = []

    def flaky(fail_times: int, message: str):
        def render():
            calls.append(message)
            if len(calls) <= fail_times:
                raise RuntimeError(f"JavascriptError: ReferenceError: {message}")
            return "rendered"
        return render

    assert export.kaleido_call(flaky(export.KALEIDO_START_RETRIES, export.KALEIDO_NOT_LOADED)) == "rendered"
    assert len(calls) == export.KALEIDO_START_RETRIES + 1
    assert capsys.readouterr().err.count("retrying with a new browser") == export.KALEIDO_START_RETRIES
    calls.clear()
    with pytest.raises(RuntimeError, match="kaleido_scopes is not defined"):  # retried, then given up
        export.kaleido_call(flaky(export.KALEIDO_START_RETRIES + 1, export.KALEIDO_NOT_LOADED))
    assert len(calls) == export.KALEIDO_START_RETRIES + 1
    calls.clear()
    with pytest.raises(RuntimeError, match="something else"):  # any other error at once
        export.kaleido_call(flaky(1, "something else"))
    assert calls == ["something else"]


def test_png_export_survives_the_start_up_error(tmp_path, monkeypatch):
    """write_pngs retries the known error: every PNG is written once the render succeeds."""
    import plotly.graph_objects as go

    failures: list[int] = []

    def write_fig_from_object_sync(specs, kopts=None, cancel_on_error=False):
        assert cancel_on_error  # a figure's error must raise, not come back in a tuple plotly would drop
        if not failures:
            failures.append(1)
            raise RuntimeError(f"ReferenceError: {export.KALEIDO_NOT_LOADED}")
        for spec in specs:
            Path(spec["path"]).write_bytes(b"png")

    monkeypatch.setattr("kaleido.write_fig_from_object_sync", write_fig_from_object_sync)
    monkeypatch.setattr(export, "find_chromium", lambda: "/usr/bin/chromium")
    paths, why_not = export.write_pngs({"a": go.Figure(), "b": go.Figure()}, tmp_path)
    assert why_not is None and failures == [1] and [p.read_bytes() for p in paths] == [b"png", b"png"]


def test_a_figure_that_fails_to_render_is_named_and_leaves_no_png(tmp_path, monkeypatch):
    """One figure's render error (a timeout under load) is the export's error: no half set of PNGs, the HTML kept."""
    import plotly.graph_objects as go

    def write_fig_from_object_sync(specs, kopts=None, cancel_on_error=False):
        Path(specs[0]["path"]).write_bytes(b"png")
        raise TimeoutError(f"rendering {Path(specs[1]['path']).name} timed out")

    monkeypatch.setattr("kaleido.write_fig_from_object_sync", write_fig_from_object_sync)
    monkeypatch.setattr(export, "find_chromium", lambda: "/usr/bin/chromium")
    paths, why_not = export.write_pngs({"a": go.Figure(), "b": go.Figure()}, tmp_path)
    assert paths == [] and "TimeoutError" in why_not and ".b.png." in why_not
    assert not list(tmp_path.iterdir())  # neither PNG nor a temporary file
