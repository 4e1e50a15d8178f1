"""The activation store: atomic, resumable, shardable boundary features on disk.

Layout of a store directory::

    store.json                 schema + settings (model spec and revision, layers, sites,
                               poolings, attention layers, max_tokens, dtype, code version)
    units/<unit>.safetensors   tensors of one (trajectory, condition) unit, float32:
                                 "{site}.{layer}.{pooling}"   [n_ok, d_model]   pooled residual
                                 "attn.{layer}.per_kind"      [n_ok, n_heads, 7] boundary attention
                                                              mass per segment kind (SEGMENT_KINDS order)
                                 "attn.{layer}.b{b}.per_segment" [n_heads, n_segments(b)]
    units/<unit>.json          one row per boundary (manifest columns below) + segment tables
    manifest.parquet, .csv     all rows, rebuilt by ``finalize``/``merge``

Manifest columns: ``sample_id, task_id, after_step, condition, model, revision,
n_tokens, status (ok|skipped), reason, forward, row (index into the unit's
tensors, -1 when skipped), unit, boundary_entropy_bits, top1,
future_necessity, externalization_gap (annotations; -1 when absent),
chars_removed, tokens_removed, n_steps, rel_position, reasoning_tokens,
n_reasoning_blocks, pool_count.<pooling>``.

Each unit is written to temporary files and renamed into place (tensors
first, the JSON last): a unit counts as done only when its JSON exists, so a
killed run loses at most the unit in flight and re-running skips what is
done. A store refuses a run whose settings differ from its ``store.json``.

Fields of ``store.json`` (``STORE_FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema_version`` | ``[]`` | int | - | version of this layout |
| ``settings`` | ``{...}`` | object | - | model spec and revision, layers, sites, poolings, attention layers, max_tokens, dtype, code version; a run with other settings is refused |
| ``layout`` | ``[]`` | str | - | this module's docstring (the layout of the store) |

Fields of ``units/<unit>.json`` (``UNIT_FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``rows`` | ``[n_boundaries] of {sample_id, task_id, after_step, condition, status, row}`` | object | - | one manifest row per boundary of the unit (columns in MANIFEST_FIELDS) |
| ``segments`` | ``{after_step: [...]}`` | object | tokens | segment table of each boundary's render |
| ``block_entropy`` | ``[n_blocks] of {...}`` | object | bits/token | reasoning-block entropies of the unit |

Manifest columns (``MANIFEST_FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``sample_id`` | ``[n_rows]`` | str | - | task_id@after_step:condition |
| ``task_id`` | ``[n_rows]`` | str | - | trajectory |
| ``domain`` | ``[n_rows]`` | str | - | the trajectory's domain |
| ``after_step`` | ``[n_rows]`` | int | step | boundary b (after step b) |
| ``condition`` | ``[n_rows]`` | str | - | history condition of the render |
| ``model`` | ``[n_rows]`` | str | - | model spec |
| ``revision`` | ``[n_rows]`` | str or null | - | model revision |
| ``n_tokens`` | ``[n_rows]`` | int | tokens | length of the render |
| ``status`` | ``[n_rows]`` | str | - | ok or skipped |
| ``reason`` | ``[n_rows]`` | str or null | - | why skipped |
| ``forward`` | ``[n_rows]`` | str or null | - | which forward produced the row |
| ``row`` | ``[n_rows]`` | int | index | index into the unit's tensors, -1 when skipped |
| ``unit`` | ``[n_rows]`` | str | - | unit file stem |
| ``boundary_entropy_bits`` | ``[n_rows]`` | float or null | bits | next-token entropy at the boundary token |
| ``top1`` | ``[n_rows]`` | int or null | token id | argmax next token at the boundary |
| ``future_necessity`` | ``[n_rows]`` | int | 0/1 | annotation y; -1 when absent |
| ``externalization_gap`` | ``[n_rows]`` | int | 0/1 | annotation G; -1 when absent |
| ``chars_removed`` | ``[n_rows]`` | int or null | characters | removed by the condition's edit |
| ``tokens_removed`` | ``[n_rows]`` | int or null | tokens | removed by the condition's edit |
| ``n_steps`` | ``[n_rows]`` | int | steps | steps of the trajectory (boundary b = n_steps has no later step) |
| ``rel_position`` | ``[n_rows]`` | float | fraction | after_step / n_steps |
| ``reasoning_tokens`` | ``[n_rows]`` | int | tokens | tokens in the render's reasoning-block spans (reasoning so far, after the condition's edit) |
| ``n_reasoning_blocks`` | ``[n_rows]`` | int | blocks | reasoning-block spans in the render |
| ``pool_count.<pooling>`` | ``[n_rows]`` | int | tokens | tokens pooled, one column per pooling; 0 when the rule selects no token (e.g. mean_reasoning with no reasoning in the render): the feature is then the zero vector, never NaN (``interp.extraction.pooling``) |
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from safetensors.torch import load_file, save_file

from interp.extraction.extract import BoundaryFeatures
from interp.io import atomic_path, atomic_write_bytes, atomic_write_json
from interp.schema import fields_from_doc
from interp.data.trajectory import Trajectory

SCHEMA_VERSION = 1

STORE_FIELDS = fields_from_doc(__doc__, "STORE_FIELDS")  # store.json
UNIT_FIELDS = fields_from_doc(__doc__, "UNIT_FIELDS")  # units/<unit>.json
MANIFEST_FIELDS = fields_from_doc(__doc__, "MANIFEST_FIELDS")


class StoreMismatch(ValueError):
    """A run's settings differ from the store's; the message lists the differing keys."""


def unit_name(task_id: str, condition: str) -> str:
    """File stem of one (trajectory, condition) unit (safe characters only)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in task_id)
    return f"{safe}__{condition}"


@dataclass
class Store:
    """An activation store directory (see the module docstring)."""

    root: Path

    def __post_init__(self) -> None:
        self.root = Path(self.root)

    @property
    def units_dir(self) -> Path:
        """Directory of per-unit files."""
        return self.root / "units"

    def open(self, settings: dict[str, Any]) -> None:
        """Create the store, or check that ``settings`` match the existing one (else refuse)."""
        meta_path = self.root / "store.json"
        if meta_path.exists():
            existing = json.loads(meta_path.read_text())["settings"]
            diff = sorted(k for k in set(existing) | set(settings) if existing.get(k) != settings.get(k))
            if diff:
                details = "; ".join(f"{k}: store has {existing.get(k)!r}, run asks {settings.get(k)!r}" for k in diff)
                raise StoreMismatch(f"{self.root} was written with other settings ({details}); "
                                    "use a new --store directory")
            return
        atomic_write_json(meta_path, {"schema_version": SCHEMA_VERSION, "settings": settings,
                                      "layout": __doc__})

    def settings(self) -> dict[str, Any]:
        """The settings the store was written with."""
        return json.loads((self.root / "store.json").read_text())["settings"]

    def is_done(self, task_id: str, condition: str) -> bool:
        """True when the unit's JSON (written last) exists."""
        return (self.units_dir / f"{unit_name(task_id, condition)}.json").exists()

    def write_unit(self, traj: Trajectory, condition: str, rows: list[BoundaryFeatures], settings: dict[str, Any]) -> None:
        """Atomically write one unit's tensors, then its rows."""
        name = unit_name(traj.task_id, condition)
        ok = [r for r in rows if r.status == "ok"]
        tensors: dict[str, torch.Tensor] = {}
        if ok:
            for key in ok[0].features:
                tensors[key] = torch.stack([r.features[key] for r in ok]).contiguous()
            for layer in ok[0].attention:
                tensors[f"attn.{layer}.per_kind"] = torch.stack([r.attention[layer]["per_kind"] for r in ok]).contiguous()
                for r in ok:
                    tensors[f"attn.{layer}.b{r.after_step}.per_segment"] = r.attention[layer]["per_segment"].contiguous()
        with atomic_path(self.units_dir / f"{name}.safetensors") as tmp:
            save_file(tensors, tmp, metadata={"unit": name, "dtype": "float32", "settings": json.dumps(settings)})
        manifest_rows, segments = [], {}
        block_entropy = [e for r in rows for e in r.block_entropy]
        ok_index = {r.after_step: i for i, r in enumerate(ok)}
        for r in rows:
            ann = traj.annotation(r.after_step)
            manifest_rows.append({
                "sample_id": f"{traj.task_id}@{r.after_step}:{condition}",
                "task_id": traj.task_id, "domain": traj.domain, "after_step": r.after_step, "condition": condition,
                "model": settings.get("model"), "revision": settings.get("revision"),
                "n_tokens": r.n_tokens, "status": r.status, "reason": r.reason, "forward": r.forward,
                "row": ok_index.get(r.after_step, -1), "unit": name,
                "boundary_entropy_bits": r.boundary_entropy_bits, "top1": r.top1,
                "future_necessity": ann.future_necessity if ann and ann.future_necessity is not None else -1,
                "externalization_gap": ann.externalization_gap if ann and ann.externalization_gap is not None else -1,
                "chars_removed": r.edit.get("chars_removed"), "tokens_removed": r.edit.get("tokens_removed"),
                **r.position,
                **{f"pool_count.{k}": v for k, v in r.pool_counts.items()},
            })
            segments[str(r.after_step)] = r.segments
        atomic_write_json(self.units_dir / f"{name}.json",
                          {"rows": manifest_rows, "segments": segments, "block_entropy": block_entropy})

    def manifest(self) -> pd.DataFrame:
        """All rows of all finished units (sorted by task, condition, boundary)."""
        rows = []
        for path in sorted(self.units_dir.glob("*.json")):
            rows.extend(json.loads(path.read_text())["rows"])
        frame = pd.DataFrame(rows)
        if frame.empty:
            return frame
        return frame.sort_values(["task_id", "condition", "after_step"]).reset_index(drop=True)

    def block_entropy(self, condition: str = "full") -> pd.DataFrame:
        """ICLR block entropies recorded during extraction (``block_entropy`` setting), one row per block."""
        rows = []
        for path in sorted(self.units_dir.glob(f"*__{condition}.json")):
            unit = json.loads(path.read_text())
            task = unit["rows"][0]["task_id"] if unit["rows"] else None
            domain = unit["rows"][0]["domain"] if unit["rows"] else None
            rows.extend({"task_id": task, "domain": domain, **e} for e in unit.get("block_entropy", []))
        return pd.DataFrame(rows)

    def finalize(self) -> pd.DataFrame:
        """Rebuild ``manifest.parquet`` and ``manifest.csv`` from the unit files (atomically)."""
        frame = self.manifest()
        for suffix, writer in ((".parquet", lambda f, p: f.to_parquet(p, index=False)),
                               (".csv", lambda f, p: f.to_csv(p, index=False))):
            with atomic_path(self.root / f"manifest{suffix}") as tmp:
                writer(frame, tmp)
        return frame

    def load_features(self, site: str = "resid_pre", condition: str | None = None,
                      status: str = "ok") -> tuple[pd.DataFrame, dict[tuple[int, str], np.ndarray]]:
        """``(manifest rows, X[(layer, pooling)] -> [n_samples, d_model] float32)``, aligned row by row."""
        if status != "ok":
            raise ValueError(f"only status='ok' rows have features (rows with status {status!r} were not extracted)")
        frame = self.manifest()
        frame = frame[frame["status"] == status]
        if condition is not None:
            frame = frame[frame["condition"] == condition]
        frame = frame.reset_index(drop=True)
        settings = self.settings()
        cache: dict[str, dict[str, torch.Tensor]] = {}
        features: dict[tuple[int, str], np.ndarray] = {}
        for layer in settings["layers"]:
            for pooling in settings["poolings"]:
                key = f"{site}.{layer}.{pooling}"
                parts = []
                for unit, row in zip(frame["unit"], frame["row"]):
                    if unit not in cache:
                        cache[unit] = load_file(self.units_dir / f"{unit}.safetensors")
                    parts.append(cache[unit][key][row].numpy())
                features[(layer, pooling)] = np.stack(parts).astype(np.float32) if parts else np.zeros((0, 0), np.float32)
        return frame, features


def merge_stores(target: Path, sources: list[Path]) -> pd.DataFrame:
    """Join shard stores into ``target`` (settings must match); returns the merged manifest."""
    out = Store(Path(target))
    for src in sources:
        store = Store(Path(src))
        out.open(store.settings())
        for path in sorted(store.units_dir.glob("*.json")):
            tensors = store.units_dir / f"{path.stem}.safetensors"
            atomic_write_bytes(out.units_dir / tensors.name, tensors.read_bytes())
            atomic_write_bytes(out.units_dir / path.name, path.read_bytes())
    return out.finalize()
