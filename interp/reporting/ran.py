"""What ran, read from a result file's record (``interp.record``): the one way a figure, a table or ``report.md``
gets a study parameter it prints (rho, the token limit, max_k, budget, margin, the unsafe threshold, layers,
dtype, n_boot), never from a module constant or a config default."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from interp.schema import SchemaError


def _record(result: Mapping[str, Any] | pd.DataFrame) -> Mapping[str, Any]:
    """The document holding ``config`` and ``provenance``: the result itself, or a table's record
    (``frame.attrs["record"]``, read by ``load_result`` from the table's name as .json)."""
    doc = result.attrs.get("record") if isinstance(result, pd.DataFrame) else result
    if not isinstance(doc, Mapping) or not isinstance(doc.get("config"), Mapping):
        where = "the table has no record beside it (its name as .json)" if isinstance(result, pd.DataFrame) else (
            "the result has no 'config' record")
        raise SchemaError(f"{where}: the parameters it ran with are unknown; re-run the analysis")
    return doc


def config_of(result: Mapping[str, Any] | pd.DataFrame) -> Mapping[str, Any]:
    """The ``config`` block of a result (the frozen config that made it, as JSON)."""
    return _record(result)["config"]


def provenance_of(result: Mapping[str, Any] | pd.DataFrame) -> Mapping[str, Any]:
    """The ``provenance`` block of a result (model, revision, dtype, device, seeds, version, inputs)."""
    return _record(result).get("provenance") or {}


def setting(result: Mapping[str, Any] | pd.DataFrame, name: str) -> Any:  # Any: the config field's JSON value
    """The config field ``name`` a result ran with; SchemaError naming it when the record lacks it."""
    config = config_of(result)
    if name not in config:
        raise SchemaError(f"the result's config has no field '{name}' (it has {', '.join(config) or 'none'})")
    return config[name]


def ran_line(result: Mapping[str, Any] | pd.DataFrame) -> str:
    """One Markdown line of every setting the result records: its config fields, then the model, dtype, device,
    seeds and package version of its provenance."""
    config = ", ".join(f"{k} = {_value(v)}" for k, v in config_of(result).items())
    p = provenance_of(result)
    model = "no model" if p.get("model") is None else f"model `{p['model']}` (revision {p.get('revision')})"
    seeds = ", ".join(f"{k} {v}" for k, v in (p.get("seeds") or {}).items()) or "none"
    return (f"_Ran with_ (the result's recorded config): {config or '-'}; {model}, dtype {p.get('dtype') or '-'}, "
            f"device {p.get('device') or '-'}, seeds: {seeds}; {p.get('package')} {p.get('version')}.")


def _value(value: Any) -> str:
    """A config value as the report writes it: lists comma-joined, None as ``none``."""
    if isinstance(value, list):
        return ",".join(map(_value, value)) or "[]"
    return "none" if value is None else str(value)
