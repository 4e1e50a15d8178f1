"""Typed results at the stage boundary: interp.reporting.results is generated from the writers' FIELDS (one home
for each schema) and every public stage returns a TypedDict, never ``dict[str, Any]``."""

from __future__ import annotations

import ast
import inspect
import types
import typing
from pathlib import Path

import pytest

from interp.pipelines import stages
from interp.reporting import results
from interp.reporting.analyses import ANALYSES, resolve
from interp.reporting.results_gen import result_name, results_source
from interp.schema import Field, as_number, as_numbers, as_object, field_type, typed_dict_source

pytestmark = pytest.mark.unit

JSON_FILES = [f for a in ANALYSES for f in a.files if f.name.endswith(".json")]


def test_committed_results_module_is_the_generated_one():
    committed = Path(results.__file__).read_text()
    assert committed == results_source(), "run `python -m interp.reporting.results_gen` and commit the result"


@pytest.mark.parametrize("file", JSON_FILES, ids=lambda f: f.name)
def test_every_json_result_file_has_its_typed_dict_with_exactly_its_fields(file):
    typed = getattr(results, result_name(file.name))
    assert typing.is_typeddict(typed)
    names = [f.name for f in resolve(file.schema)]
    assert list(typed.__annotations__) == names  # same fields, same order
    assert typed.__required_keys__ == frozenset(names)  # a written file has every declared field


def test_one_typed_dict_per_json_file_and_no_other():
    declared = {name for name, value in vars(results).items() if typing.is_typeddict(value)}
    assert declared == {result_name(f.name) for f in JSON_FILES}
    assert len(declared) == len(JSON_FILES)  # no two files share a name


def test_result_name():
    assert result_name("kl_repair.json") == "KlRepairResult"
    assert result_name("probe_results.json") == "ProbeResultsResult"
    assert result_name("tokens.json") == "TokensResult"


# (shape, dtype) -> the type written by hand from the notation of interp.schema's docstring
CASES = [
    ("[]", "float", "float"),
    ("[]", "int", "int"),
    ("[]", "str or null", "str | None"),
    ("[]", "bool", "bool"),
    ("[]", "any", "JsonValue"),
    ("[]", "any or null", "JsonValue"),
    ("{...}", "object", "dict[str, JsonValue]"),
    ("{pooling: {layers, auroc}}", "object or null", "dict[str, JsonValue] | None"),
    ("[n_sites]", "int", "list[int]"),
    ("[2]", "float or null", "list[float | None] | None"),
    ("[n_sites, 2]", "float", "list[list[float]]"),
    ("[n_candidates, 2]", "any", "list[list[JsonValue]]"),
    ("[n_rows] of {task_id, d}", "object", "list[dict[str, JsonValue]]"),
    ("[n] of {policy, mean: {a, b}}", "object", "list[dict[str, JsonValue]]"),
    ("[n] of {a}", "object or null", "list[dict[str, JsonValue] | None] | None"),
    ("[a, b, c]", "float", "JsonValue"),
    ("free text", "int", "JsonValue"),
]


@pytest.mark.parametrize(("shape", "dtype", "expected"), CASES)
def test_field_type(shape, dtype, expected):
    assert field_type(Field("x", shape, dtype, "-", "doc")) == expected


def _compile(source: str, name: str):
    namespace: dict = {}
    exec("from __future__ import annotations\nfrom typing import TypedDict, final\nJsonValue = object\n" + source,
         namespace)
    return namespace[name]


def test_typed_dict_source_class_syntax():
    fields = (Field("n", "[]", "int", "-", ""), Field("ci", "[2]", "float or null", "-", ""))
    source = typed_dict_source("Example", fields, "An example.")
    assert source == ('@final\nclass Example(TypedDict):\n    """An example."""\n\n    n: int\n'
                      "    ci: list[float | None] | None\n")
    typed = _compile(source, "Example")
    assert typed.__required_keys__ == {"n", "ci"}


def test_typed_dict_source_names_that_are_not_identifiers():
    fields = (Field("n-rows", "[]", "int", "-", ""), Field("class", "[n]", "str", "-", ""))
    source = typed_dict_source("Odd", fields)
    assert source.startswith("Odd = final(TypedDict('Odd', {")
    typed = _compile(source, "Odd")
    assert list(typed.__annotations__) == ["n-rows", "class"]
    assert typed.__annotations__["class"] == list[str]


def test_narrowing_helpers_pass_json_and_refuse_other_kinds():
    assert as_object({"a": 1}) == {"a": 1}
    assert as_number(None) is None and as_number(3) == 3 and as_number(0.5) == 0.5
    assert as_numbers([0.1, None]) == [0.1, None] and as_numbers(None) is None
    for bad, fn in (([1], as_object), ("1", as_number), (True, as_number), ({"a": 1}, as_numbers), (["x"], as_numbers)):
        with pytest.raises(TypeError, match="expected"):
            fn(bad)


def _public_functions():
    return [(name, f) for name, f in vars(stages).items()
            if inspect.isfunction(f) and f.__module__ == stages.__name__ and not name.startswith("_")]


def _is_typed(annotation) -> bool:
    """A TypedDict, or a union of them (what a stage may return instead of a plain dict)."""
    if isinstance(annotation, types.UnionType):
        return all(_is_typed(a) for a in typing.get_args(annotation))
    return typing.is_typeddict(annotation)


@pytest.mark.parametrize(("name", "function"), _public_functions(), ids=lambda x: x if isinstance(x, str) else "")
def test_no_public_stage_returns_an_untyped_dict(name, function):
    annotation = inspect.signature(function).return_annotation
    assert isinstance(annotation, str) and annotation, f"{name}: no return annotation"
    tree = ast.parse(annotation, mode="eval")
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert "Any" not in names, f"{name} -> {annotation}"
    assert not (isinstance(tree.body, ast.Name) and tree.body.id == "dict"), f"{name} -> {annotation}"
    if "dict" in names:  # a mapping, not a record: only where no Any is in it (checked above)
        return
    try:
        resolved = eval(annotation, vars(stages))  # names imported only for type checking do not resolve
    except NameError:
        return
    if isinstance(resolved, type) and not typing.is_typeddict(resolved) or resolved is None:
        return
    assert _is_typed(resolved), f"{name} -> {annotation}"


STAGES = ("merge", "label", "probe", "patch", "harm", "externalize", "risk", "intervene", "figures", "drsr",
          "harm_from_parts", "gate_train", "gate_eval", "gate", "tokens")


@pytest.mark.parametrize("name", STAGES)
def test_result_stages_return_typed_dicts(name):
    assert _is_typed(eval(inspect.signature(getattr(stages, name)).return_annotation, vars(stages)))


def test_the_result_stages_return_their_files_typed_dict():
    returns = {name: inspect.signature(getattr(stages, name)).return_annotation for name in STAGES}
    assert returns["patch"] == "KlRepairResult | AttributionResult | ShardParts"
    assert returns["harm"] == "HarmResult | ShardParts" and returns["drsr"] == "DrsrResult | ShardParts"
    assert returns["risk"] == "ExternalizationResult" and returns["gate"] == returns["gate_eval"] == "GateResult"
