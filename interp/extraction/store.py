"""The activation store: atomic, resumable, shardable boundary features on disk.

Layout of a store directory::

    store.json                 schema + settings (model spec and revision, layers, sites,
                               poolings, attention layers, max_tokens, dtype, code version)
    units/<unit>.safetensors   tensors of one (trajectory, condition) unit, float32:
                                 "{site}.{layer}.{pooling}"   [n_ok, d_model]   pooled residual
                                 "attn.{layer}.per_kind"      [n_ok, n_heads, 7] boundary attention
                                                              mass per segment kind (SEGMENT_KINDS order)
                                 "attn.{layer}.b{b}.per_segment" [n_heads, n_segments(b)]
                                 "sae.{pooling}.ids"          [n_ok, sae_top_k] int64: the largest SAE
                                                              features of the pooled residual at the SAE's
                                                              hook (``--sae``; ``interp.sensor.sae``), by value
                                 "sae.{pooling}.values"       [n_ok, sae_top_k] their activations
                                 "sae.{pooling}.sq_err"       [n_ok] ``||x - xhat||^2`` of the reconstruction
                               metadata "interp.unit": JSON {unit, dtype, settings} (one key,
                               so a unit's file is the same bytes whichever process wrote it)
    units/<unit>.json          one row per boundary (manifest columns below) + segment tables
    manifest.parquet, .csv     all rows, rebuilt by ``finalize``/``merge``

Manifest columns: ``sample_id, task_id, after_step, condition, model, revision,
n_tokens, status (ok|skipped), reason, forward, row (index into the unit's
tensors, -1 when skipped), unit, boundary_entropy_bits, top1,
future_necessity, externalization_gap (annotations; -1 when absent),
chars_removed, tokens_removed, n_steps, rel_position, reasoning_tokens,
n_reasoning_blocks, pool_count.<pooling>``, and with an SAE ``sae_kl_nats``
(KL of the boundary's next-token distribution, clean vs SAE-spliced; null without ``sae_splice``). The position columns of the probe's
baseline are ``interp.extraction.position.POSITION_FEATURES`` (one definition).

Each unit is written to temporary files and renamed into place (tensors
first, the JSON last): a unit counts as done only when its JSON exists, so a
killed run loses at most the unit in flight and re-running skips what is
done; a unit whose JSON cannot be written (disk full) has its tensors removed
too. A store refuses a run whose settings differ from its ``store.json``, and
a second writer while one holds its ``.lock`` (``interp.io.writer_lock``).
Unit file stems are ``safe_stem(task_id)__condition`` (``interp.io.safe_stem``:
distinct task ids never share a file, none leaves ``units/``).
Units that failed on a cluster after their retries are listed in
``failed.json`` (unit -> error); re-running retries them.

Fields of ``store.json`` (``STORE_FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema_version`` | ``[]`` | int | - | version of this layout |
| ``settings`` | ``{...}`` | object | - | model spec and revision, layers, sites, poolings, attention layers, max_tokens, dtype, code version; a run with other settings is refused |
| ``run`` | ``{shard, input_sha256, units}`` | object | - | what this store holds: ``shard`` ``{index, count}`` (0-based), the sha256 of the input trajectories (their JSON lines, ``batch.trajectories_sha256``: the same whether they came from a file or from Python), ``units`` the unit stems of this shard (sorted); ``all_units`` (every shard's units) on a shard of a split run; a run with another ``run`` is refused, ``merge`` refuses shards of other settings or input and an incomplete set |
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
| ``sae_kl_nats`` | ``[n_rows]`` | float or null | nats | only in a store extracted with an SAE: KL of the boundary's next-token distribution, clean vs the forward with the SAE's reconstruction spliced in at its hook (``interp.sensor.sae.spliced_kl``); null without ``sae_splice`` or on a skipped row |
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch
from safetensors.torch import load_file, save

from interp.io import (atomic_path, atomic_write_bytes, atomic_write_json, check_complete, inside, read_json,
                       safe_stem, writer_lock)
from interp.schema import Field
from interp.data.trajectory import Trajectory

if TYPE_CHECKING:
    from interp.extraction.extract import BoundaryFeatures
    import xarray

SCHEMA_VERSION = 2  # 2: unit stems carry a hash of the task id (interp.io.safe_stem)

STORE_FIELDS = (  # store.json
    Field("schema_version", "[]", "int", "-", "version of this layout"),
    Field("settings", "{...}", "object", "-",
          "model spec and revision, layers, sites, poolings, attention layers, max_tokens, dtype, code "
          "version; a run with other settings is refused"),
    Field("run", "{shard, input_sha256, units}", "object", "-",
          "what this store holds: ``shard`` ``{index, count}`` (0-based), the sha256 of the input trajectories "
          "(their JSON lines, ``batch.trajectories_sha256``: the same whether they came from a file or from "
          "Python), ``units`` the unit stems of this shard (sorted); ``all_units`` (every shard's units) on a "
          "shard of a split run; a run with another ``run`` is refused, ``merge`` refuses shards of other "
          "settings or input and an incomplete set"),
    Field("layout", "[]", "str", "-", "this module's docstring (the layout of the store)"),
)
UNIT_FIELDS = (  # units/<unit>.json
    Field("rows", "[n_boundaries] of {sample_id, task_id, after_step, condition, status, row}", "object", "-",
          "one manifest row per boundary of the unit (columns in MANIFEST_FIELDS)"),
    Field("segments", "{after_step: [...]}", "object", "tokens", "segment table of each boundary's render"),
    Field("block_entropy", "[n_blocks] of {...}", "object", "bits/token", "reasoning-block entropies of the unit"),
)
MANIFEST_FIELDS = (
    Field("sample_id", "[n_rows]", "str", "-", "task_id@after_step:condition"),
    Field("task_id", "[n_rows]", "str", "-", "trajectory"),
    Field("domain", "[n_rows]", "str", "-", "the trajectory's domain"),
    Field("after_step", "[n_rows]", "int", "step", "boundary b (after step b)"),
    Field("condition", "[n_rows]", "str", "-", "history condition of the render"),
    Field("model", "[n_rows]", "str", "-", "model spec"),
    Field("revision", "[n_rows]", "str or null", "-", "model revision"),
    Field("n_tokens", "[n_rows]", "int", "tokens", "length of the render"),
    Field("status", "[n_rows]", "str", "-", "ok or skipped"),
    Field("reason", "[n_rows]", "str or null", "-", "why skipped"),
    Field("forward", "[n_rows]", "str or null", "-", "which forward produced the row"),
    Field("row", "[n_rows]", "int", "index", "index into the unit's tensors, -1 when skipped"),
    Field("unit", "[n_rows]", "str", "-", "unit file stem"),
    Field("boundary_entropy_bits", "[n_rows]", "float or null", "bits", "next-token entropy at the boundary token"),
    Field("top1", "[n_rows]", "int or null", "token id", "argmax next token at the boundary"),
    Field("future_necessity", "[n_rows]", "int", "0/1", "annotation y; -1 when absent"),
    Field("externalization_gap", "[n_rows]", "int", "0/1", "annotation G; -1 when absent"),
    Field("chars_removed", "[n_rows]", "int or null", "characters", "removed by the condition's edit"),
    Field("tokens_removed", "[n_rows]", "int or null", "tokens", "removed by the condition's edit"),
    Field("n_steps", "[n_rows]", "int", "steps", "steps of the trajectory (boundary b = n_steps has no later step)"),
    Field("rel_position", "[n_rows]", "float", "fraction", "after_step / n_steps"),
    Field("reasoning_tokens", "[n_rows]", "int", "tokens",
          "tokens in the render's reasoning-block spans (reasoning so far, after the condition's edit)"),
    Field("n_reasoning_blocks", "[n_rows]", "int", "blocks", "reasoning-block spans in the render"),
    Field("pool_count.<pooling>", "[n_rows]", "int", "tokens",
          "tokens pooled, one column per pooling; 0 when the rule selects no token (e.g. mean_reasoning with "
          "no reasoning in the render): the feature is then the zero vector, never NaN "
          "(``interp.extraction.pooling``)"),
    Field("sae_kl_nats", "[n_rows]", "float or null", "nats",
          "only in a store extracted with an SAE: KL of the boundary's next-token distribution, clean vs the "
          "forward with the SAE's reconstruction spliced in at its hook (``interp.sensor.sae.spliced_kl``); null "
          "without ``sae_splice`` or on a skipped row"),
)


class StoreMismatch(ValueError):
    """A run's settings differ from the store's; the message lists the differing keys."""


def unit_name(task_id: str, condition: str) -> str:
    """File stem of one (trajectory, condition) unit: ``safe_stem(task_id)__condition``."""
    return f"{safe_stem(task_id)}__{condition}"


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a unit file; ValueError naming the file when it is truncated or not safetensors."""
    try:
        return load_file(path)
    except FileNotFoundError:
        raise
    except Exception as exc:  # safetensors raises its own SafetensorError (not an OSError)
        raise ValueError(f"{path}: unreadable tensors ({exc}); delete this unit's .json and .safetensors "
                         "and re-run `interp extract` to recompute it") from None


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

    def lock(self, command: str) -> AbstractContextManager[Path]:
        """The store's writer lock (a context manager; see ``interp.io.writer_lock``)."""
        return writer_lock(self.root, command=command)

    def meta(self) -> dict[str, Any]:
        """``store.json``; ValueError naming the folder when it is absent, unreadable or of another layout."""
        path = self.root / "store.json"
        if not path.is_file():
            raise ValueError(f"{self.root}: not an activation store (no store.json; create one with `interp extract`)")
        meta = read_json(path)
        if not isinstance(meta, dict) or not isinstance(meta.get("settings"), dict):
            raise ValueError(f"{path}: not a store.json (no settings object)")
        if meta.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"{path}: store layout version {meta.get('schema_version')}, this code reads "
                             f"{SCHEMA_VERSION}; re-extract into a new --store directory")
        return meta

    def open(self, settings: dict[str, Any], run: dict[str, Any] | None = None) -> None:
        """Create the store, or check that ``settings`` (and ``run``: shard, input hash, units) match the
        existing one (else refuse); call under :meth:`lock`."""
        meta_path = self.root / "store.json"
        if meta_path.exists():
            meta = self.meta()
            for what, existing, asked in (("settings", meta["settings"], settings),
                                          ("run", meta.get("run") or {}, run or {})):
                if what == "run" and (run is None or "run" not in meta):  # a store written before runs were recorded
                    continue
                diff = sorted(k for k in set(existing) | set(asked) if existing.get(k) != asked.get(k))
                if diff:
                    details = "; ".join(f"{k}: store has {_short(existing.get(k))}, run asks {_short(asked.get(k))}"
                                        for k in diff)
                    raise StoreMismatch(f"{self.root} was written with other {what} ({details}); "
                                        "use a new --store directory")
            return
        atomic_write_json(meta_path, {"schema_version": SCHEMA_VERSION, "settings": settings,
                                      **({"run": run} if run is not None else {}), "layout": __doc__})

    def run(self) -> dict[str, Any]:
        """The ``run`` record of ``store.json`` (empty for a store written before it was recorded)."""
        return read_json(self.root / "store.json").get("run") or {}

    def settings(self) -> dict[str, Any]:
        """The settings the store was written with."""
        return self.meta()["settings"]

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
            for key in ok[0].sae:
                tensors[key] = torch.stack([r.sae[key] for r in ok]).contiguous()
            for layer in ok[0].attention:
                tensors[f"attn.{layer}.per_kind"] = torch.stack([r.attention[layer]["per_kind"] for r in ok]).contiguous()
                for r in ok:
                    tensors[f"attn.{layer}.b{r.after_step}.per_segment"] = r.attention[layer]["per_segment"].contiguous()
        tensor_path = inside(self.units_dir, self.units_dir / f"{name}.safetensors")
        # one metadata key: safetensors writes its metadata map in a per-process random order, so
        # several keys would make the same tensors differ in bytes between runs. Serialised in memory and
        # written by atomic_write_bytes: a full disk is then an OSError naming the file (safetensors' own
        # writer raises a SafetensorError that says neither the path nor what is needed).
        data = save(tensors, metadata={"interp.unit": json.dumps({"unit": name, "dtype": "float32",
                                                                  "settings": settings}, sort_keys=True)})
        atomic_write_bytes(tensor_path, data)
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
                **({"sae_kl_nats": r.sae_kl_nats} if settings.get("sae") else {}),
            })
            segments[str(r.after_step)] = r.segments
        try:
            atomic_write_json(self.units_dir / f"{name}.json",
                              {"rows": manifest_rows, "segments": segments, "block_entropy": block_entropy})
        except BaseException:  # no tensors without their JSON (a full disk, a kill between the two)
            tensor_path.unlink(missing_ok=True)
            raise

    def manifest(self) -> pd.DataFrame:
        """All rows of all finished units (sorted by task, condition, boundary)."""
        rows = []
        for path in sorted(self.units_dir.glob("*.json")):
            rows.extend(read_json(path)["rows"])
        frame = pd.DataFrame(rows)
        if frame.empty:
            return frame
        return frame.sort_values(["task_id", "condition", "after_step"]).reset_index(drop=True)

    def block_entropy(self, condition: str = "full") -> pd.DataFrame:
        """ICLR block entropies recorded during extraction (``block_entropy`` setting), one row per block."""
        rows: list[dict[str, Any]] = []
        for path in sorted(self.units_dir.glob(f"*__{condition}.json")):
            unit = read_json(path)
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
        if frame.empty:
            raise ValueError(f"{self.root}: no finished units in this store yet (run or resume `interp extract`)")
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
                        cache[unit] = load_tensors(self.units_dir / f"{unit}.safetensors")
                    parts.append(cache[unit][key][row].numpy())
                features[(layer, pooling)] = np.stack(parts).astype(np.float32) if parts else np.zeros((0, 0), np.float32)
        return frame, features


    def load_sae_features(self, condition: str | None = None
                          ) -> tuple[pd.DataFrame, dict[str, dict[str, np.ndarray]]]:
        """``(manifest rows, {pooling: {"ids", "values", "sq_err"}})`` of a store extracted with ``--sae``, row by
        row as :meth:`load_features` (ValueError naming the store when it holds no SAE features)."""
        settings = self.settings()
        if not settings.get("sae"):
            raise ValueError(f"{self.root}: extracted without an SAE (re-extract with `interp extract --sae DIR`)")
        frame, _ = self.load_features(settings["sites"][0], condition)
        out: dict[str, dict[str, np.ndarray]] = {}
        cache: dict[str, dict[str, torch.Tensor]] = {}
        for pooling in settings["poolings"]:
            out[pooling] = {}
            for part in ("ids", "values", "sq_err"):
                rows = []
                for unit, row in zip(frame["unit"], frame["row"]):
                    if unit not in cache:
                        cache[unit] = load_tensors(self.units_dir / f"{unit}.safetensors")
                    rows.append(cache[unit][f"sae.{pooling}.{part}"][row].numpy())
                out[pooling][part] = np.stack(rows)
        return frame, out

    def to_xarray(self, site: str = "resid_pre", condition: str | None = None) -> xarray.DataArray:
        """Pooled features as an ``xarray.DataArray`` [sample, layer, pooling, d_model] with the manifest as coordinates.

        Coordinates on ``sample`` (the ``sample_id``): ``task_id``, ``after_step``,
        ``condition``, ``domain`` and the labels ``future_necessity`` and
        ``externalization_gap`` (-1 when absent); ``layer`` and ``pooling`` as stored.
        """
        import xarray as xr

        frame, features = self.load_features(site, condition)
        settings = self.settings()
        layers, poolings = list(settings["layers"]), list(settings["poolings"])
        d_model = next((x.shape[1] for x in features.values() if x.ndim == 2 and x.shape[0]), 0)
        data = np.zeros((len(frame), len(layers), len(poolings), d_model), np.float32)
        for i, layer in enumerate(layers):
            for j, pooling in enumerate(poolings):
                if len(frame):
                    data[:, i, j] = features[(layer, pooling)]
        columns = ("task_id", "after_step", "condition", "domain", "future_necessity", "externalization_gap")
        coords = {"sample": frame["sample_id"].to_numpy(), "layer": layers, "pooling": poolings,
                  **{c: ("sample", frame[c].to_numpy()) for c in columns if c in frame}}
        return xr.DataArray(data, dims=("sample", "layer", "pooling", "d_model"), coords=coords,
                            name=site, attrs={"model": settings.get("model", ""), "site": site})

    def to_pandas(self, site: str = "resid_pre", condition: str | None = None) -> pd.DataFrame:
        """One row per (sample, layer, pooling): the manifest's id and label columns, then ``d0..d{n-1}`` features."""
        array = self.to_xarray(site, condition)
        n, n_layers, n_pool, d = array.shape
        ids = pd.DataFrame({c: np.repeat(array[c].to_numpy(), n_layers * n_pool)
                            for c in ("sample", *[k for k in array.coords if array[k].dims == ("sample",)
                                                  and k != "sample"])})
        ids["layer"] = np.tile(np.repeat(array["layer"].to_numpy(), n_pool), n)
        ids["pooling"] = np.tile(array["pooling"].to_numpy(), n * n_layers)
        values = pd.DataFrame(array.to_numpy().reshape(n * n_layers * n_pool, d), columns=[f"d{i}" for i in range(d)])
        return pd.concat([ids.rename(columns={"sample": "sample_id"}), values], axis=1)


def _short(value: Any) -> str:
    """``repr`` of a store.json value, cut for an error line (unit lists can be long)."""
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def merge_stores(target: Path, sources: list[Path], allow_partial: bool = False) -> pd.DataFrame:
    """Join shard stores into ``target``; returns the merged manifest.

    Every source must have the same settings and input hash and be a shard of the same split (same count
    and unit list); an incomplete set (a shard not given, or a unit not finished) is refused with the
    missing shards and units listed, unless ``allow_partial``. Checked before ``target`` is touched.
    """
    stores = [Store(Path(src)) for src in sources]
    if not stores:
        raise ValueError("merge: no shard stores given")
    for store in stores:
        if not (store.root / "store.json").is_file():
            raise ValueError(f"{store.root}: not an activation store (no store.json)")
    first, runs = stores[0], [s.run() for s in stores]
    for store, run in zip(stores[1:], runs[1:]):
        if store.settings() != first.settings():
            diff = sorted(k for k in set(store.settings()) | set(first.settings())
                          if store.settings().get(k) != first.settings().get(k))
            raise StoreMismatch(f"{store.root}: made with other settings than {first.root} ({', '.join(diff)})")
        if run.get("input_sha256") != runs[0].get("input_sha256"):
            raise StoreMismatch(f"{store.root}: made from another input than {first.root} (input_sha256 "
                                f"{run.get('input_sha256')} vs {runs[0].get('input_sha256')})")
        if (run.get("shard") or {}).get("count") != (runs[0].get("shard") or {}).get("count"):
            raise StoreMismatch(f"{store.root}: shard {run.get('shard')} is not of the same split as {first.root}'s "
                                f"{runs[0].get('shard')}")
    done = {p.stem: s for s in stores for p in sorted(s.units_dir.glob("*.json"))}
    expected = list(runs[0].get("all_units") or runs[0].get("units") or done)
    missing = [u for u in expected if u not in done]
    check_complete(missing, len(expected), (runs[0].get("shard") or {}).get("count", 1),
                   [(r.get("shard") or {}).get("index", 0) for r in runs], allow_partial)
    out = Store(Path(target))
    with out.lock("merge"):
        return _merge_into(out, first, runs[0], expected, done)


def _merge_into(out: Store, first: Store, run0: dict[str, Any], expected: list[str],
                done: dict[str, Store]) -> pd.DataFrame:
    """Copy the finished units of the checked shards into ``out`` (under its writer lock)."""
    run = {"shard": {"index": 0, "count": 1}, "input_sha256": run0.get("input_sha256"),
           "units": sorted(u for u in expected if u in done)}
    out.open(first.settings(), run if run0 else None)
    for name, store in done.items():
        tensors = store.units_dir / f"{name}.safetensors"
        atomic_write_bytes(out.units_dir / tensors.name, tensors.read_bytes())
        atomic_write_bytes(out.units_dir / f"{name}.json", (store.units_dir / f"{name}.json").read_bytes())
    return out.finalize()
