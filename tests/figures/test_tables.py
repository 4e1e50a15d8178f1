"""write_tables on synthetic result files: Markdown and LaTeX with our numbers beside the reference study's."""

from __future__ import annotations

import json

import pytest

from interp.reporting.analyses import ANALYSES
from interp.reporting.tables import externalization_table, interventions_table, kl_repair_table, write_tables

from .conftest import risk_layout_externalization, summary_layout_interventions, write_results

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    root = write_results(tmp_path_factory.mktemp("tables"))
    return root, write_tables(root)


def test_one_markdown_and_one_latex_table_per_analysis(tables):
    root, paths = tables
    assert sorted(p.name for p in paths) == sorted(f"{t.name}.{s}" for a in ANALYSES for t in a.tables
                                                   for s in ("md", "tex"))  # the registry's tables, every one
    assert all(p.parent == root / "tables" for p in paths)


@pytest.mark.parametrize("name, ours, ref", [
    ("probe", ["0.812", "[0.751, 0.868]", "0.774", "0.731", "120 (50)", "AUROC gain over position baseline",
               "+0.112", "[0.051, 0.170]", "AUROC, position baseline", "[0.640, 0.760]", "0.825",
               "permutation p, position-keeping null (fixed)", "0.036"], ["0.844", "0.811", "0.760", "265 (112)"]),
    ("kl_repair", ["resid_pre.4", "resid_pre.20", "resid_pre.28", "resid_pre.31", "resid_post.31"],
     ["0.047 (layer 4)", "0.459 (layer 20)", "0.724 (layer 28)", "0.978 (layer 31)"]),
    ("externalization", ["64.0%", "38.0%", "21.0 pp", "0.270"], ["67.3%", "36.2%", "19.8 pp", "0.283"]),
    ("interventions", ["0.860", "0.660", "83.0%"], ["0.872", "0.760", "0.675", "0.759"]),
])
def test_tables_hold_our_numbers_and_the_reference(tables, name, ours, ref):
    root, _ = tables
    md = (root / "tables" / f"{name}.md").read_text()
    tex = (root / "tables" / f"{name}.tex").read_text()
    assert md.count("\n| ") >= 3 and "reference study (Qwen3.5-9B)" in md
    for value in ours + ref:
        assert value in md
        assert value.replace("%", r"\%").replace("_", r"\_") in tex
    assert r"\begin{tabular}" in tex and r"\label{tab:" + name + "}" in tex


def test_latex_escapes_percent_in_captions_and_cells(tables):
    tex = (tables[0] / "tables" / "probe.tex").read_text()
    assert "95\\% CI" in tex and "(95\\% CIs" in tex and "95% " not in tex.replace("\\%", "")


def test_missing_inputs_write_no_table(tmp_path):
    write_results(tmp_path)
    (tmp_path / "externalization" / "externalization.json").unlink()
    (tmp_path / "interventions" / "interventions.json").unlink()
    (tmp_path / "harm" / "harm.json").unlink()
    assert sorted(p.stem for p in write_tables(tmp_path)) == ["kl_repair", "kl_repair", "probe", "probe"]
    assert write_tables(tmp_path / "nothing-here") == []


def test_a_malformed_file_is_named(tmp_path):
    write_results(tmp_path)
    path = tmp_path / "probe" / "probe_results.json"
    path.write_text(json.dumps({"ap": 0.5}))
    with pytest.raises(ValueError, match=f"{path}: missing field 'auroc'"):
        write_tables(tmp_path)
    assert (tmp_path / "tables" / "kl_repair.md").exists(), "the other tables are still written"


def test_kl_repair_table_lists_mean_median_and_ratio_of_sums(tables):
    root, _ = tables
    result = json.loads((root / "patching" / "kl_repair.json").read_text())
    table = kl_repair_table(result)
    assert list(table.columns[2:6]) == ["Repair (mean)", "95% CI", "median", "ratio of sums"]
    last = result["sites"].index("resid_pre.20")
    row = table[table["site"] == "resid_pre.20"].iloc[0]
    assert (row["Repair (mean)"], row["median"], row["ratio of sums"]) == tuple(
        f"{result[k][last]:.3f}" for k in ("repair_mean", "repair_median", "repair_ratio"))
    assert "ratio of sums" in (root / "tables" / "kl_repair.md").read_text()


def test_kl_layers_are_matched_by_relative_depth_on_other_models():
    layers = list(range(30))
    result = {"sites": [f"resid_pre.{l}" for l in layers], "layers": layers, "repair_mean": [l / 29 for l in layers],
              "model": {"n_layers": 30}}
    table = kl_repair_table(result)
    assert table["site"].tolist() == ["resid_pre.4", "resid_pre.19", "resid_pre.26", "resid_pre.29"]


def test_tables_read_the_layouts_of_interp_risk_and_interp_interventions(tmp_path):
    risk = externalization_table(risk_layout_externalization(tmp_path))
    assert risk["quantity"].tolist() == ["risk, G = 1", "risk, G = 0", "within-task gap", "hidden-score gap (log-odds)",
                                         "hidden-score gap (probability)"]
    assert risk["ours"].tolist() == ["60.0%", "30.0%", "25.0 pp", "0.900", "0.150"]
    assert risk.iloc[:, -1].fillna("—").tolist() == ["67.3%", "36.2%", "19.8 pp", "—", "0.283"]  # no ref on log-odds
    continuations = interventions_table(summary_layout_interventions())
    assert continuations["condition"].tolist() == ["full", "delete_all_reasoning", "hide_observation"]
    assert continuations["re-acquisition"].fillna("—").tolist() == ["10.0%", "—", "75.0%"]
    assert continuations.iloc[:, -1].fillna("—").tolist() == ["0.872", "0.675", "—"]


def test_report_repair_section_lists_mean_median_ratio_and_threshold(tables):
    from interp.reporting.report import repair_section

    root, _ = tables
    result = json.loads((root / "patching" / "kl_repair.json").read_text())
    text = "\n".join(repair_section(result, root / "patching"))
    assert "| site | Repair (mean) | 95% CI | median | ratio of sums | top-1 recovery |" in text
    assert f"{result['n_excluded']} excluded, kept when {result['exclusion_rule']}" in text
    assert result["d_threshold_rule"] in text
    if result.get("noise_median") is not None:
        assert f"Measured noise, median over boundaries: {result['noise_median']:.3g} nats" in text


def test_harm_table_lists_every_aggregate(tables):
    root, _ = tables
    md = (root / "tables" / "harm.md").read_text()
    doc = json.loads((root / "harm" / "harm.json").read_text())
    for aggregator in ("sum", "mean", "max", "min"):
        assert f"| {aggregator} | 2 |" in md and f"| {aggregator} | all |" in md
    assert "| sum | 2 | 20 | 40 | 0.800 |" in md and "pairs (margin 0.0)" in md
    pairwise = sum(1 for entry in doc["per_cardinality"].values() if entry["n_pairwise"])
    assert md.count("\n| ") == 2 + len(doc["aggregates"]) + pairwise  # header, rule, one row per aggregate, triples
