"""Boundary attention mass per segment kind, averaged from an activation store (``attention.json``).

The store keeps, per boundary and full-attention layer, the boundary query's
attention mass per segment kind (``attn.{layer}.per_kind``, ``[n_ok, n_heads,
n_kinds]``) and each boundary's segment table (token spans per kind). This
module averages the mass over heads, then summarises it over boundaries per
history condition: mean and quartiles of the raw mass, and of the mass per
token of the kind (a long system prompt takes much mass but little per token).

Fields of ``attention.json`` (``FIELDS``; ``attention_document`` builds them):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``layers`` | ``[n_layers]`` | int | layer index (0-based) | full-attention layers of the store |
| ``kinds`` | ``[n_kinds]`` | str | - | segment kinds, in `SEGMENT_KINDS` order (the columns of `mass`) |
| ``condition`` | ``[]`` | str | - | history condition of the boundaries averaged |
| ``n`` | ``[]`` | int | boundaries | boundaries averaged |
| ``mass`` | ``[n_layers, n_kinds]`` | float | fraction of 1 | mean over boundaries and heads of the boundary query's attention mass per segment kind |
| ``conditions`` | ``{condition: {...}}`` | object | - | per history condition in the store: ``n`` (boundaries), ``mass`` and ``per_token`` ``[n_layers][n_kinds]`` means, ``mass_q`` and ``per_token_q`` ``[n_layers][n_kinds][2]`` 25th/75th percentiles over boundaries (per_token: mass / tokens of the kind, fraction per token; null where no boundary has the kind), ``tokens`` ``[n_kinds]`` mean tokens per kind |
| ``config`` | ``{...}`` | object | - | the frozen config of the analysis that made this file: dataclasses.asdict, tuples as lists (interp.record.config_from builds it back) |
| ``provenance`` | ``{...}`` | object | - | what ran (interp.record): model, revision, dtype (resolved), device, seeds, package, version, inputs (name -> sha256) |
"""

from __future__ import annotations

from typing import Any

import numpy as np

from interp.data.render import SEGMENT_KINDS
from interp.extraction.store import Store
from interp.record import RECORD_FIELDS
from interp.schema import Field, schema_dict

FIELDS = (
    Field("schema", "{...}", "object", "-", "this table: {field: {shape, dtype, units, doc}}"),
    Field("layers", "[n_layers]", "int", "layer index (0-based)", "full-attention layers of the store"),
    Field("kinds", "[n_kinds]", "str", "-", "segment kinds, in `SEGMENT_KINDS` order (the columns of `mass`)"),
    Field("condition", "[]", "str", "-", "history condition of the boundaries averaged"),
    Field("n", "[]", "int", "boundaries", "boundaries averaged"),
    Field("mass", "[n_layers, n_kinds]", "float", "fraction of 1",
          "mean over boundaries and heads of the boundary query's attention mass per segment kind"),
    Field("conditions", "{condition: {...}}", "object", "-",
          "per history condition in the store: ``n`` (boundaries), ``mass`` and ``per_token`` "
          "``[n_layers][n_kinds]`` means, ``mass_q`` and ``per_token_q`` ``[n_layers][n_kinds][2]`` 25th/75th "
          "percentiles over boundaries (per_token: mass / tokens of the kind, fraction per token; null where "
          "no boundary has the kind), ``tokens`` ``[n_kinds]`` mean tokens per kind"),
    *RECORD_FIELDS,
)


def attention_document(mass: np.ndarray, layers: list[int], condition: str, n: int,
                       conditions: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ``attention.json`` document from the mean mass ``[n_layers, n_kinds]`` (see the table above)."""
    return {"schema": schema_dict(FIELDS), "layers": list(layers), "kinds": list(SEGMENT_KINDS),
            "condition": condition, "n": int(n), "mass": np.asarray(mass, dtype=float).tolist(),
            "conditions": conditions or {}}


def condition_summary(mass: np.ndarray, tokens: np.ndarray) -> dict[str, Any]:
    """Mean and quartiles over boundaries of ``mass`` ``[n_b, n_layers, n_kinds]`` and of mass per token
    (``tokens`` ``[n_b, n_kinds]``; a kind with no token at a boundary is left out there)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        per_token = np.where(tokens[:, None, :] > 0, mass / tokens[:, None, :], np.nan)
    import warnings

    with warnings.catch_warnings():  # all-NaN columns (a kind absent everywhere) give NaN -> null
        warnings.simplefilter("ignore", RuntimeWarning)
        return {"n": int(mass.shape[0]), "mass": mass.mean(axis=0).tolist(),
                "mass_q": np.moveaxis(np.percentile(mass, [25, 75], axis=0), 0, -1).tolist(),
                "per_token": np.nanmean(per_token, axis=0).tolist(),
                "per_token_q": np.moveaxis(np.nanpercentile(per_token, [25, 75], axis=0), 0, -1).tolist(),
                "tokens": tokens.mean(axis=0).tolist()}


def attention_summary(store: Store, condition: str = "full") -> dict[str, Any]:
    """Boundary attention mass per kind at each full-attention layer of ``store``, per condition (``attention.json``);
    ``condition`` is the one of the top-level ``mass`` and ``n``."""
    import json

    from safetensors.numpy import load_file

    frame = store.manifest()
    frame = frame[frame["status"] == "ok"]
    layers = store.settings()["attention_layers"]
    summaries: dict[str, dict[str, Any]] = {}
    for cond in sorted(frame["condition"].unique(), key=lambda c: (c != condition, c)):
        masses, tokens = [], []
        for unit in frame.loc[frame["condition"] == cond, "unit"].unique():
            tensors = load_file(store.units_dir / f"{unit}.safetensors")
            doc = json.loads((store.units_dir / f"{unit}.json").read_text())
            steps = [r["after_step"] for r in doc["rows"] if r["status"] == "ok"]
            if not layers or not steps:
                continue
            masses.append(np.stack([tensors[f"attn.{layer}.per_kind"].mean(axis=1) for layer in layers], axis=1))
            for b in steps:
                count = np.zeros(len(SEGMENT_KINDS))
                for seg in doc["segments"][str(b)]:
                    count[SEGMENT_KINDS.index(seg["kind"])] += seg["end"] - seg["start"]
                tokens.append(count)
        if masses:
            summaries[cond] = condition_summary(np.concatenate(masses), np.array(tokens))
    main = summaries.get(condition)
    mass = main["mass"] if main else np.zeros((len(layers), len(SEGMENT_KINDS)))
    return attention_document(mass, layers, condition, main["n"] if main else 0, summaries)
