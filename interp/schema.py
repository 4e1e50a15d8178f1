"""Result-file schemas: one declared layout per file, owned by the module that writes it.

Each writer module declares a ``FIELDS`` tuple of :class:`Field` in code
(every top-level field of the file it writes; never parsed from a docstring,
so ``python -OO`` imports it), embeds ``schema_dict(FIELDS)`` as the file's
``"schema"`` entry and pastes ``schema_table(FIELDS)`` into its module
docstring for ``help()`` (``tests/reporting/test_schema.py`` finds every
declaration and keeps the two equal). Readers call
``check(doc, FIELDS, file)`` on load, so a file that does not match fails
with the file and the field named.

Shape notation:

- ``[]``: a scalar;
- ``[n_sites]``, ``[n_sites, 2]``: nested lists; a name is a symbolic
  dimension that must have the same length in every field of the document
  where it is used (an empty list stands for "no data" and matches any
  length), a number is a fixed length;
- ``[n_samples] of {task_id, after_step, ...}``: a list of records, each an
  object with at least those keys;
- ``{...}``: an object (mapping); its inside is described in the meaning
  column and not checked.

``dtype`` is the kind of the scalar or of the list's leaves: ``float``,
``int``, ``str``, ``bool``, ``object`` (a JSON object) or ``any``;
``... or null`` allows ``null`` for the whole value and for any leaf. Files
are strict JSON: a missing value is ``null``, never NaN.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar, cast

import numpy as np

# Parsed JSON, recursively (what ``json.loads`` returns); the one definition the packages share.
JsonValue: TypeAlias = "None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]"

KINDS = ("float", "int", "str", "bool", "object", "any")
D = TypeVar("D")  # a document handed back as it came


class SchemaError(ValueError):
    """A result document does not match its declared fields; the message names the file and the field."""


@dataclass(frozen=True)
class Field:
    """One top-level field of a result file: its name, shape, dtype, units and meaning."""

    name: str
    shape: str
    dtype: str
    units: str
    doc: str

    @property
    def nullable(self) -> bool:
        """Whether ``null`` is allowed (dtype ends in ``or null``)."""
        return self.dtype.endswith(" or null")

    @property
    def kind(self) -> str:
        """The dtype without ``or null``."""
        return self.dtype.removesuffix(" or null")


def schema_table(fields: Iterable[Field]) -> str:
    """A Markdown table of the fields: name | shape | dtype | units | meaning (one line per field)."""
    lines = ["| name | shape | dtype | units | meaning |", "|---|---|---|---|---|"]
    for f in fields:
        cells = (f"``{f.name}``", f"``{f.shape}``", f.dtype, f.units or "-", f.doc)
        for cell in cells:
            if "|" in cell or "\n" in cell:
                raise ValueError(f"field {f.name!r}: a table cell may not hold '|' or a newline: {cell!r}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def schema_dict(fields: Iterable[Field]) -> dict[str, dict[str, str]]:
    """The file's ``"schema"`` entry: ``{name: {shape, dtype, units, doc}}`` in declaration order."""
    return {f.name: {"shape": f.shape, "dtype": f.dtype, "units": f.units, "doc": f.doc} for f in fields}


def check(doc: D, fields: Sequence[Field], file: object) -> D:
    """Raise :class:`SchemaError` naming ``file`` and the field when ``doc`` lacks a field or has the wrong kind/shape.

    Fields the declaration does not list are allowed. Returns ``doc``.
    """
    if not isinstance(doc, Mapping):
        raise SchemaError(f"{file}: expected a JSON object at the top level, got {type(doc).__name__}")
    mapping = cast(Mapping[str, Any], doc)  # a Mapping, just checked
    dims: dict[str, tuple[int, str]] = {}
    for f in fields:
        if f.name not in mapping:
            raise SchemaError(f"{file}: missing field '{f.name}'")
        problem = _check_value(mapping[f.name], f, dims)
        if problem:
            raise SchemaError(f"{file}: field '{f.name}' (shape {f.shape}, dtype {f.dtype}): {problem}")
    return doc


def check_columns(columns: Iterable[str], fields: Sequence[Field], file: object) -> None:
    """Raise :class:`SchemaError` when a table (CSV) lacks one of the declared columns."""
    have = set(columns)
    for f in fields:
        if f.name not in have:
            raise SchemaError(f"{file}: missing column '{f.name}'")


_LIST = re.compile(r"^\[(?P<dims>[^\]]*)\](?:\s+of\s+\{(?P<keys>[^{}]*)\})?$")


def _check_value(value: Any, f: Field, dims: dict[str, tuple[int, str]]) -> str | None:
    if value is None:
        return None if f.nullable else "is null"
    shape = f.shape.strip()
    if shape.startswith("{"):
        return None if isinstance(value, Mapping) else f"expected an object, got {_kind_name(value)}"
    m = _LIST.match(shape)
    if m is None:
        return None  # free-form shape: not checked
    names = [d.strip() for d in m["dims"].split(",") if d.strip()]
    keys = [k.strip() for k in (m["keys"] or "").split(",") if k.strip() and k.strip() != "..."]
    return _check_array(value, names, keys, f, dims, 0)


def _check_array(value: Any, names: list[str], keys: list[str], f: Field, dims: dict[str, tuple[int, str]],
                 depth: int) -> str | None:
    if not names:
        if keys:
            if not isinstance(value, Mapping):
                return f"expected a record (object), got {_kind_name(value)}"
            missing = [k for k in keys if k not in value]
            return f"record lacks key(s) {', '.join(map(repr, missing))}" if missing else None
        return _check_leaf(value, f)
    if value is None:
        return None if f.nullable else "holds a null where a list is expected"
    if not isinstance(value, list | tuple):
        return f"expected a list (dimension {names[0]!r}), got {_kind_name(value)}"
    dim = names[0]
    if value:  # an empty list means "no data": it matches any length
        if dim.isdigit():
            if len(value) != int(dim):
                return f"dimension {dim!r} has length {len(value)}"
        else:
            seen = dims.setdefault(dim, (len(value), f.name))
            if seen[0] != len(value):
                return f"dimension {dim!r} has length {len(value)} but {seen[0]} in field '{seen[1]}'"
    for item in value:
        problem = _check_array(item, names[1:], keys, f, dims, depth + 1)
        if problem:
            return problem
    return None


def _check_leaf(value: Any, f: Field) -> str | None:
    if value is None:
        return None if f.nullable else "holds a null"
    kind = f.kind
    ok = {
        "float": isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool | np.bool_),
        "int": isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_),
        "str": isinstance(value, str),
        "bool": isinstance(value, bool | np.bool_),
        "object": isinstance(value, Mapping),
    }.get(kind, True)
    if kind == "float" and ok and not np.isfinite(float(value)):
        return f"holds {value} (files are strict JSON: a missing value is null)"
    return None if ok else f"expected {kind}, got {_kind_name(value)} {value!r:.60}"


def _kind_name(value: Any) -> str:
    return {dict: "object", list: "list", str: "str", bool: "bool", int: "int", float: "float"}.get(
        type(value), type(value).__name__)


_RECORDS = re.compile(r"^\[[^\],]+\]\s+of\s+\{.*\}$")  # [n] of {...}, records that may nest objects
_KIND_TYPES = {"float": "float", "int": "int", "str": "str", "bool": "bool", "object": "dict[str, JsonValue]",
               "any": "JsonValue"}


def field_type(f: Field) -> str:
    """The Python type (source text) of a field's value: the dtype's type nested in the shape's lists, ``| None``
    on the leaf and the whole when nullable; a shape the notation does not type is ``JsonValue``."""
    shape = f.shape.strip()
    m = _LIST.match(shape)
    dims = [d for d in m["dims"].split(",") if d.strip()] if m is not None else []
    if shape.startswith("{"):
        leaf, depth = "dict[str, JsonValue]", 0
    elif _RECORDS.match(shape):
        leaf, depth = "dict[str, JsonValue]", 1
    elif m is not None and m["keys"] is None and len(dims) <= 2:
        leaf, depth = _KIND_TYPES.get(f.kind, "JsonValue"), len(dims)
    else:
        return "JsonValue"
    nullable = f.nullable and leaf != "JsonValue"  # JsonValue holds null already
    typ = "list[" * depth + (f"{leaf} | None" if nullable else leaf) + "]" * depth
    return f"{typ} | None" if nullable and depth else typ


def typed_dict_source(name: str, fields: Sequence[Field], doc: str = "") -> str:
    """Source text of a ``TypedDict`` named ``name`` with one key per field (:func:`field_type`), so a document
    of ``fields`` is typed where it crosses a function boundary (``final``: ``"key" in doc`` tells it from another
    result); names that are not identifiers use the functional syntax (``doc``: the class docstring, one line)."""
    import keyword

    if all(f.name.isidentifier() and not keyword.iskeyword(f.name) for f in fields):
        body = "".join(f"    {f.name}: {field_type(f)}\n" for f in fields)
        return f"@final\nclass {name}(TypedDict):\n" + (f'    """{doc}"""\n\n' if doc else "") + (body or "    pass\n")
    items = "".join(f"    {f.name!r}: {field_type(f)},\n" for f in fields)
    return f"{name} = final(TypedDict({name!r}, {{\n{items}}}))\n"


def as_object(value: JsonValue) -> dict[str, JsonValue]:
    """``value`` narrowed to a JSON object (a record nested in a typed result); a TypeError when it is not one."""
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object, got {_kind_name(value)}")
    return value


def as_list(value: JsonValue) -> list[JsonValue]:
    """``value`` narrowed to a JSON list; a TypeError when it is not one."""
    if not isinstance(value, list):
        raise TypeError(f"expected a JSON list, got {_kind_name(value)}")
    return value


def as_number(value: JsonValue) -> float | None:
    """``value`` narrowed to a number or null (a statistic that may be undefined); a TypeError otherwise."""
    if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
        raise TypeError(f"expected a number or null, got {_kind_name(value)}")
    return value


def as_numbers(value: JsonValue) -> list[float | None] | None:
    """``value`` narrowed to null or a list of numbers and nulls (a confidence interval); a TypeError otherwise."""
    return None if value is None else [as_number(v) for v in as_list(value)]
