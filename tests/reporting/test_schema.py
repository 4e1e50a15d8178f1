"""interp.schema: the field table, the embedded schema, the checker; every writer's docstring holds its table."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from interp.schema import Field, SchemaError, check, check_columns, schema_dict, schema_table

pytestmark = pytest.mark.unit

FIELDS = (
    Field("sites", "[n_sites]", "str", "-", "site names"),
    Field("repair_mean", "[n_sites]", "float", "unitless", "mean Repair"),
    Field("repair_ci", "[n_sites, 2]", "float or null", "unitless", "CI"),
    Field("n_samples", "[]", "int", "samples", "kept"),
    Field("model", "{...}", "object", "-", "describe()"),
    Field("per_sample", "[n_rows] of {task_id, d}", "object", "nats", "records"),
    Field("p", "[]", "float or null", "probability", "maybe missing"),
)
GOOD = {"sites": ["a.0", "a.1"], "repair_mean": [0.1, 0.2], "repair_ci": [[0.0, 0.2], [None, None]], "n_samples": 3,
        "model": {"spec": "x"}, "per_sample": [{"task_id": "t", "d": 0.5, "extra": 1}], "p": None, "other": "ok"}

ROOT = Path(__file__).resolve().parents[2]


DECLARED = r"^([A-Z_]*FIELDS)(?:: [^=]+)? = \([^\n]*\n\s+Field\("


def _declarations() -> list[tuple[str, str]]:
    """(module, name) of every ``*FIELDS = (Field(...), ...)`` declaration in the library's source."""
    found = []
    for package in ("interp", "probes", "patching"):
        for path in sorted((ROOT / package).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            source = path.read_text()
            found += [(module, name) for name in re.findall(DECLARED, source, flags=re.M)]
    return found


DECLARATIONS = _declarations()


def test_every_known_writer_is_found():
    modules = {m for m, _ in DECLARATIONS}
    assert {"patching.kl_repair", "patching.harm", "probes.report", "probes.targets", "interp.io",
            "interp.continuations.run", "interp.externalization.risk", "interp.extraction.store",
            "interp.extraction.attention_summary", "interp.extraction.entropy"} <= modules, modules
    assert ("interp.extraction.store", "MANIFEST_FIELDS") in DECLARATIONS


def test_table_and_schema_dict():
    table = schema_table(FIELDS[:2])
    assert table.splitlines() == ["| name | shape | dtype | units | meaning |", "|---|---|---|---|---|",
                                  "| ``sites`` | ``[n_sites]`` | str | - | site names |",
                                  "| ``repair_mean`` | ``[n_sites]`` | float | unitless | mean Repair |"]
    assert schema_dict(FIELDS[:1]) == {"sites": {"shape": "[n_sites]", "dtype": "str", "units": "-",
                                                 "doc": "site names"}}
    with pytest.raises(ValueError, match="'\\|'"):
        schema_table([Field("x", "[]", "float", "-", "KL(P||Q)")])


def test_check_accepts_a_matching_document():
    assert check(GOOD, FIELDS, "f.json") is GOOD
    assert check({**GOOD, "repair_mean": []}, FIELDS, "f.json")  # an empty list: no data, any length


@pytest.mark.parametrize("change, message", [
    ({"sites": None}, "f.json: field 'sites' (shape [n_sites], dtype str): is null"),
    ({"repair_mean": [0.1]}, "dimension 'n_sites' has length 1 but 2 in field 'sites'"),
    ({"repair_ci": [[0.0], [0.1]]}, "dimension '2' has length 1"),
    ({"n_samples": 3.5}, "field 'n_samples' (shape [], dtype int): expected int, got float"),
    ({"n_samples": True}, "expected int, got bool"),
    ({"repair_mean": [0.1, float("nan")]}, "holds nan (files are strict JSON"),
    ({"model": [1]}, "field 'model' (shape {...}, dtype object): expected an object, got list"),
    ({"per_sample": [{"task_id": "t"}]}, "record lacks key(s) 'd'"),
    ({"sites": "a.0"}, "expected a list (dimension 'n_sites'), got str"),
])
def test_check_names_file_and_field(change, message):
    with pytest.raises(SchemaError) as info:
        check({**GOOD, **change}, FIELDS, "f.json")
    assert message in str(info.value) and str(info.value).startswith("f.json: ")


def test_check_names_a_missing_field_and_a_missing_column():
    doc = dict(GOOD)
    del doc["n_samples"]
    with pytest.raises(SchemaError, match="^f.json: missing field 'n_samples'$"):
        check(doc, FIELDS, "f.json")
    with pytest.raises(SchemaError, match="^f.json: expected a JSON object"):
        check([], FIELDS, "f.json")
    with pytest.raises(SchemaError, match="^t.csv: missing column 'y'$"):
        check_columns(["x"], [Field("x", "[n]", "int", "-", ""), Field("y", "[n]", "int", "-", "")], "t.csv")


@pytest.mark.parametrize("module, name", DECLARATIONS)
def test_docstring_table_equals_the_declared_fields(module, name):
    mod = importlib.import_module(module)
    fields = getattr(mod, name)
    assert fields and all(isinstance(f, Field) for f in fields), f"{module}.{name}"
    assert len({f.name for f in fields}) == len(fields), f"{module}.{name}: duplicate field"
    assert schema_table(fields) in mod.__doc__, f"{module}.{name}: paste schema_table({name}) into the docstring"


def test_written_documents_match_their_fields(tmp_path):
    """Every file the real writers make from synthetic inputs passes its check after a strict-JSON round trip."""
    from interp.reporting.figures import load_result, result_fields
    from tests.figures.conftest import write_results

    root = write_results(tmp_path)
    for rel in ("probe/probe_results.json", "probe/oof_predictions.csv", "patching/kl_repair.json",
                "harm/harm.json", "externalization/externalization.json", "interventions/interventions.json"):
        path = root / rel
        fields = result_fields(path)
        assert fields, rel
        doc = load_result(path)
        if path.suffix == ".json":
            assert set(doc) - {"reference"} == {f.name for f in fields}, rel  # every top-level field declared
            assert json.loads(path.read_text())["schema"] == schema_dict(fields), rel
