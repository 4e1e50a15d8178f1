"""Boundary attention mass per segment kind, averaged from an activation store (``attention.json``).

The store keeps, per boundary and full-attention layer, the boundary query's
attention mass per segment kind (``attn.{layer}.per_kind``, ``[n_ok, n_heads,
n_kinds]``). This module averages it over boundaries and heads.

Fields of ``attention.json`` (``FIELDS``; ``attention_document`` builds them):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``layers`` | ``[n_layers]`` | int | layer index (0-based) | full-attention layers of the store |
| ``kinds`` | ``[n_kinds]`` | str | - | segment kinds, in `SEGMENT_KINDS` order (the columns of `mass`) |
| ``condition`` | ``[]`` | str | - | history condition of the boundaries averaged |
| ``n`` | ``[]`` | int | boundaries | boundaries averaged |
| ``mass`` | ``[n_layers, n_kinds]`` | float | fraction of 1 | mean over boundaries and heads of the boundary query's attention mass per segment kind |
"""

from __future__ import annotations

from typing import Any

import numpy as np

from interp.data.render import SEGMENT_KINDS
from interp.extraction.store import Store
from interp.schema import fields_from_doc, schema_dict

FIELDS = fields_from_doc(__doc__, "FIELDS")


def attention_document(mass: np.ndarray, layers: list[int], condition: str, n: int) -> dict[str, Any]:
    """The ``attention.json`` document from the mean mass ``[n_layers, n_kinds]`` (see the table above)."""
    return {"schema": schema_dict(FIELDS), "layers": list(layers), "kinds": list(SEGMENT_KINDS),
            "condition": condition, "n": int(n), "mass": np.asarray(mass, dtype=float).tolist()}


def attention_summary(store: Store, condition: str = "full") -> dict[str, Any]:
    """Mean boundary attention mass per kind at each full-attention layer of ``store`` (``attention.json``)."""
    from safetensors.numpy import load_file

    frame = store.manifest()
    frame = frame[(frame["status"] == "ok") & (frame["condition"] == condition)]
    layers = store.settings()["attention_layers"]
    sums = np.zeros((len(layers), len(SEGMENT_KINDS)))
    n = 0
    for unit in frame["unit"].unique():
        tensors = load_file(store.units_dir / f"{unit}.safetensors")
        for i, layer in enumerate(layers):
            sums[i] += tensors[f"attn.{layer}.per_kind"].mean(axis=1).sum(axis=0)  # [n_ok, heads, kinds]
        n += tensors[f"attn.{layers[0]}.per_kind"].shape[0] if layers else 0
    return attention_document(sums / max(n, 1), layers, condition, n)
