"""The registry of analyses: every reference resolves to a callable or a Field tuple at or below the reporting
layer, names are unique, and figures, tables and the report read their layout from it."""

from __future__ import annotations

import pytest

from interp.reporting.analyses import ANALYSES, analysis, resolve, schemas
from interp.schema import Field
from tests.test_layers import layer

pytestmark = pytest.mark.unit

REPORTING_RANK = 5


def _references():
    for a in ANALYSES:
        yield from (f.schema for f in a.files)
        yield from (f.build for f in a.figures)
        yield from (t.build for t in a.tables)
        if a.section:
            yield a.section


@pytest.mark.parametrize("target", list(_references()))
def test_every_reference_resolves_at_or_below_reporting(target):
    module = target.partition(":")[0]
    assert layer(module)[1] <= REPORTING_RANK, f"{target}: the registry lives in reporting and may not name it"
    obj = resolve(target)
    assert callable(obj) or (isinstance(obj, tuple) and obj and all(isinstance(f, Field) for f in obj)), target


def test_names_files_and_outputs_are_unique():
    for values in ([a.name for a in ANALYSES], [a.folder for a in ANALYSES],
                   [f.name for a in ANALYSES for f in a.figures], [t.name for a in ANALYSES for t in a.tables],
                   [f.name for a in ANALYSES for f in a.files]):
        assert len(values) == len(set(values)), values


def test_every_figure_and_table_reads_a_declared_file_of_its_analysis():
    for a in ANALYSES:
        declared = {f.name for f in a.files}
        assert a.result in declared, a.name
        assert all(f.file in declared for f in a.figures) and all(t.file in declared for t in a.tables), a.name


def test_lookup_and_readers_follow_the_registry():
    from interp.reporting.figures import FIGURES, result_fields

    assert analysis("kl_repair").path() == "patching/kl_repair.json"
    with pytest.raises(KeyError, match="registered: probe, kl_repair"):
        analysis("nope")
    assert [s.name for s in FIGURES] == [f.name for a in ANALYSES for f in a.figures]
    assert {s.source for s in FIGURES} == {a.path(f.file) for a in ANALYSES for f in a.figures}
    assert result_fields("x/oof_predictions.csv") == resolve(schemas()["oof_predictions.csv"])
    assert result_fields("x/unknown.json") is None
    with pytest.raises(ValueError, match="expected 'module:name'"):
        resolve("interp.reporting.tables")


def test_a_registered_analysis_reaches_figures_tables_and_report(tmp_path, monkeypatch):
    """A record added to the registry is tabled and reported with no other reporting file edited."""
    import json

    from interp.record import record
    from interp.reporting import analyses, report, tables
    from interp.reporting.analyses import Analysis, Figure, ResultFile, Table

    extra = Analysis("toy", "Toy analysis", "toy", "toy.json", files=(ResultFile("toy.json", f"{__name__}:TOY"),),
                     figures=(Figure("fig9_toy", "toy.json", f"{__name__}:toy_figure"),),
                     tables=(Table("toy", "toy.json", f"{__name__}:toy_table", "Toy numbers."),),
                     section=f"{__name__}:toy_section")
    monkeypatch.setattr(analyses, "ANALYSES", (*ANALYSES, extra))
    monkeypatch.setattr(tables, "ANALYSES", analyses.ANALYSES)
    monkeypatch.setattr(report, "ANALYSES", analyses.ANALYSES)
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "toy.json").write_text(json.dumps({"value": 0.25, **record({"scale": 0.5})}))
    written = tables.write_tables(tmp_path)
    assert [p.name for p in written] == ["toy.md", "toy.tex"] and "| value | 0.25 |" in written[0].read_text()
    text = report.write_report(tmp_path, {}, {}, {"model": "toy", "full": False}).read_text()
    assert "## Toy analysis\n\nvalue = 0.25" in text
    assert "_Ran with_ (the result's recorded config): scale = 0.5; no model" in text  # its record, unlisted
    assert text.count("_not run_") == len(ANALYSES)  # the registered analyses without results say so


TOY = (Field("value", "[]", "float", "-", "a number"),)


def toy_figure(doc):
    import plotly.graph_objects as go

    return go.Figure(go.Bar(y=[doc["value"]]))


def toy_table(doc):
    import pandas as pd

    return pd.DataFrame([("value", str(doc["value"]))], columns=["quantity", "ours"])


def toy_section(doc, folder):
    return [f"value = {doc['value']}"]
