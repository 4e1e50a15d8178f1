"""The future-necessity probe on SAE features, and the features that name its direction (``sae_probe.json``).

A store extracted with ``interp extract --sae DIR`` holds, per boundary row and pooling, the SAE's largest
features (ids and values) and the reconstruction's squared error (``interp.extraction.store``). Here:

- :func:`sae_feature_set`: a :class:`~probes.data.FeatureSet` whose matrix per (SAE layer, pooling) is the
  sparse code written out dense [n_samples, d_sae] (features not among a row's stored top ones are 0);
- the probe on it is :func:`probes.report.run_probe`, unchanged: the same task-level nested CV, bootstrap,
  permutation nulls, position baseline and control task as on the residual;
- :func:`probe_features`: the probe direction's top features: the fixed probe (``ProbeConfig.fixed_*``) fitted on
  every labelled row, its coefficients in feature units (``coef``, divided by the scaler's scale) and per standard
  deviation of the feature (``coef_per_sd``, the weight the probe gives it), ranked by ``coef_per_sd`` (largest
  first: the features that push towards "the later trajectory needs the reasoning"; a rare feature's large
  per-unit coefficient does not outrank a frequent one), each with its strongest contexts (the boundaries where it fires most);
- :func:`repair_features`: the features of KL Repair's patch: KL Repair writes the full run's boundary residual
  into the deleted run, so the features it moves are those whose activation differs most between the
  ``full`` and ``delete_all_reasoning`` rows of the same boundary (mean difference over paired boundaries);
- reconstruction quality, so transfer is measured: ``fvu`` per pooling (sum of stored squared errors over the
  residual rows' total variance) and the spliced KL per boundary (the manifest's ``sae_kl_nats``).

Fields of ``sae_probe.json`` (``FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``sae`` | ``{...}`` | object | - | the SAE of the store (interp.sensor.sae.sae_identity: path, hook_name, architecture, d_in, d_sae, k, model_name, sha256 of cfg.json and the weights) |
| ``top_k`` | ``[]`` | int | features | SAE features stored per row and pooling (the rest read as 0) |
| ``condition`` | ``[]`` | str | - | the store's condition the probe read |
| ``fvu`` | ``{...}`` | object | fraction | pooling -> fraction of variance unexplained of the reconstruction over the condition's rows (rows whose pooling selected no token left out; null without two such rows) |
| ``spliced_kl`` | ``{mean, median, max, n}`` | object | nats | KL of the boundary's next-token distribution, clean vs SAE-spliced at every position (null when not measured) |
| ``probe`` | ``{...}`` | object | - | probes.report.run_probe's document on the SAE features (its own schema inside; out-of-fold rows left out) |
| ``top_features`` | ``[n_top] of {rank, feature, coef, coef_per_sd, pooling, contexts}`` | object | coef: log-odds per unit activation; coef_per_sd: per standard deviation | the probe direction's top features, ranked by coef_per_sd; contexts: [{sample_id, task_id, after_step, activation, text}] |
| ``repair_features`` | ``[n_repair] of {rank, feature, mean_diff, pooling, n_pairs}`` | object | activation | features moved most by KL Repair's patch (full minus delete_all_reasoning, paired by boundary); empty when the store lacks one of the two |
| ``config`` | ``{...}`` | object | - | the frozen config of the analysis that made this file: dataclasses.asdict, tuples as lists (interp.record.config_from builds it back) |
| ``provenance`` | ``{...}`` | object | - | what ran (interp.record): model, revision, dtype (resolved), device, seeds, package, version, inputs (name -> sha256) |
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from interp.extraction.position import POSITION_FEATURES
from interp.io import atomic_write_bytes, to_strict_json
from interp.record import RECORD_FIELDS, json_sha256, record
from interp.schema import Field, schema_dict
from probes.config import ProbeConfig
from probes.data import MISSING, FeatureSet
from probes.estimator import LinearProbe
from probes.report import run_probe

if TYPE_CHECKING:
    from interp.data.trajectory import Trajectory
    from interp.extraction.store import Store

FIELDS = (
    Field("schema", "{...}", "object", "-", "this table: {field: {shape, dtype, units, doc}}"),
    Field("sae", "{...}", "object", "-", "the SAE of the store (interp.sensor.sae.sae_identity: path, hook_name, "
          "architecture, d_in, d_sae, k, model_name, sha256 of cfg.json and the weights)"),
    Field("top_k", "[]", "int", "features", "SAE features stored per row and pooling (the rest read as 0)"),
    Field("condition", "[]", "str", "-", "the store's condition the probe read"),
    Field("fvu", "{...}", "object", "fraction",
          "pooling -> fraction of variance unexplained of the reconstruction over the condition's rows (rows whose "
          "pooling selected no token left out; null without two such rows)"),
    Field("spliced_kl", "{mean, median, max, n}", "object", "nats",
          "KL of the boundary's next-token distribution, clean vs SAE-spliced at every position (null when not "
          "measured)"),
    Field("probe", "{...}", "object", "-", "probes.report.run_probe's document on the SAE features (its own schema "
          "inside; out-of-fold rows left out)"),
    Field("top_features", "[n_top] of {rank, feature, coef, coef_per_sd, pooling, contexts}", "object",
          "coef: log-odds per unit activation; coef_per_sd: per standard deviation",
          "the probe direction's top features, ranked by coef_per_sd; contexts: [{sample_id, task_id, after_step, "
          "activation, text}]"),
    Field("repair_features", "[n_repair] of {rank, feature, mean_diff, pooling, n_pairs}", "object", "activation",
          "features moved most by KL Repair's patch (full minus delete_all_reasoning, paired by boundary); empty "
          "when the store lacks one of the two"),
    *RECORD_FIELDS,
)
SCHEMA = schema_dict(FIELDS)
CONTEXT_CHARS = 160  # characters of the latest reasoning shown per context


def dense_codes(ids: np.ndarray, values: np.ndarray, d_sae: int) -> np.ndarray:
    """The stored top features [n, k] written out as a dense code [n, d_sae] float32 (absent features 0)."""
    out = np.zeros((ids.shape[0], d_sae), np.float32)
    np.put_along_axis(out, ids.astype(np.int64), values.astype(np.float32), axis=1)
    return out


def sae_feature_set(frame: pd.DataFrame, codes: Mapping[str, Mapping[str, np.ndarray]], d_sae: int, layer: int,
                    labels: Mapping[tuple[str, int], int] | None = None) -> FeatureSet:
    """The probe's inputs on SAE features: one dense [n, d_sae] matrix per pooling, keyed (SAE layer, pooling);
    labels, final boundaries and position columns as :meth:`probes.data.FeatureSet.from_store` reads them."""
    if labels is None:
        y = frame["future_necessity"].to_numpy()
    else:
        y = np.array([labels.get((t, int(b)), MISSING) for t, b in zip(frame["task_id"], frame["after_step"])], int)
    final = (frame["after_step"] == frame["n_steps"]).to_numpy()
    return FeatureSet(features={(layer, p): dense_codes(c["ids"], c["values"], d_sae) for p, c in codes.items()},
                      y=np.where(final, MISSING, y), groups=frame["task_id"].to_numpy(),
                      sample_ids=frame["sample_id"].tolist(),
                      nuisance={c: frame[c].to_numpy(np.float64) for c in POSITION_FEATURES if c in frame},
                      undefined=frame.loc[final, "sample_id"].tolist())


def probe_direction(X: np.ndarray, y: np.ndarray, config: ProbeConfig) -> tuple[np.ndarray, np.ndarray]:
    """The fixed probe fitted on (X, y): its coefficients [d] in input units (log-odds per unit activation) and
    per standard deviation of each feature (the weight the probe gives it: the ranking)."""
    standardize, _, C = config.fixed_params
    probe = LinearProbe(C=C, standardize=standardize).fit(X, y)
    coef = np.asarray(probe.pipeline_[-1].coef_[0], np.float64)
    sd = X.std(0).astype(np.float64)
    if standardize:
        scale = probe.pipeline_["scale"].scale_
        return coef / scale, coef * sd / scale
    return coef, coef * sd


def _context(traj: Trajectory | None, after_step: int) -> str:
    """The latest non-empty reasoning before boundary ``after_step`` (its last CONTEXT_CHARS characters)."""
    if traj is None:
        return ""
    for step in reversed(traj.steps[:after_step]):
        if step.reasoning.strip():
            return step.reasoning.strip()[-CONTEXT_CHARS:]
    return ""


def probe_features(fs: FeatureSet, config: ProbeConfig, n_top: int = 10, n_contexts: int = 3,
                   trajectories: Mapping[str, Trajectory] | None = None) -> list[dict[str, Any]]:
    """The probe direction's ``n_top`` features per pooling with their strongest contexts (module docstring)."""
    labelled, _ = fs.drop_missing()
    trajs = trajectories or {}
    out: list[dict[str, Any]] = []
    for (layer, pooling), X in labelled.features.items():
        coef, weight = probe_direction(X, labelled.y, config)
        full = fs.features[(layer, pooling)]
        for rank, j in enumerate(np.argsort(-weight, kind="stable")[:n_top]):
            best = [i for i in np.argsort(-full[:, j], kind="stable")[:n_contexts] if full[i, j] > 0]
            contexts = []
            for i in best:
                task, after = fs.groups[i], int(fs.sample_ids[i].rsplit("@", 1)[1].split(":")[0])
                contexts.append({"sample_id": fs.sample_ids[i], "task_id": task, "after_step": after,
                                 "activation": float(full[i, j]), "text": _context(trajs.get(task), after)})
            out.append({"rank": rank + 1, "feature": int(j), "coef": float(coef[j]),
                        "coef_per_sd": float(weight[j]), "pooling": pooling, "contexts": contexts})
    return out


def repair_features(store: Store, d_sae: int, n_top: int = 10) -> list[dict[str, Any]]:
    """The features KL Repair's patch moves most: mean over paired boundaries of the full minus the
    delete_all_reasoning code, per pooling, ranked by absolute difference ([] without both conditions)."""
    manifest = store.manifest()
    have = set(manifest.get("condition", []))
    if not {"full", "delete_all_reasoning"} <= have:
        return []
    parts = {c: store.load_sae_features(c) for c in ("full", "delete_all_reasoning")}
    out: list[dict[str, Any]] = []
    key = ["task_id", "after_step"]
    pairs = parts["full"][0][key].reset_index().merge(parts["delete_all_reasoning"][0][key].reset_index(), on=key)
    for pooling in parts["full"][1]:
        full, deleted = (dense_codes(parts[c][1][pooling]["ids"], parts[c][1][pooling]["values"], d_sae)
                         for c in ("full", "delete_all_reasoning"))
        diff = (full[pairs["index_x"].to_numpy()] - deleted[pairs["index_y"].to_numpy()]).mean(0)
        for rank, j in enumerate(np.argsort(-np.abs(diff), kind="stable")[:n_top]):
            out.append({"rank": rank + 1, "feature": int(j), "mean_diff": float(diff[j]), "pooling": pooling,
                        "n_pairs": len(pairs)})
    return out


def run_sae_probe(store: Store, config: ProbeConfig, condition: str = "full", n_top: int = 10,
                  trajectories: Mapping[str, Trajectory] | None = None,
                  labels: Mapping[tuple[str, int], int] | None = None) -> dict[str, Any]:
    """``sae_probe.json``'s document (``FIELDS``) for a store extracted with ``--sae``."""
    settings = store.settings()
    frame, codes = store.load_sae_features(condition)
    sae = settings["sae"]
    site, layer = sae["hook_name"].split(".hook_")[1], int(sae["hook_name"].split(".")[1])
    _, residual = store.load_features(site, condition)
    fvu: dict[str, float | None] = {}
    for pooling, c in codes.items():
        x = residual[(layer, pooling)].astype(np.float64)
        pooled = np.linalg.norm(x, axis=1) > 0  # a rule that selected no token stores the zero vector: not a row
        total = float(((x[pooled] - x[pooled].mean(0)) ** 2).sum()) if pooled.sum() > 1 else 0.0
        fvu[pooling] = float(c["sq_err"][pooled].sum()) / total if total > 0 else None
    kl = frame["sae_kl_nats"].dropna().to_numpy(np.float64) if "sae_kl_nats" in frame else np.zeros(0)
    fs = sae_feature_set(frame, codes, int(sae["d_sae"]), layer, labels)
    probe = {k: v for k, v in run_probe(fs, config).items() if k != "oof"}
    return {"schema": SCHEMA, "sae": sae, "top_k": int(settings["sae_top_k"]), "condition": condition, "fvu": fvu,
            "spliced_kl": ({"mean": float(kl.mean()), "median": float(np.median(kl)), "max": float(kl.max()),
                            "n": int(kl.size)} if kl.size else None),
            "probe": probe,
            "top_features": probe_features(fs, config, n_top, trajectories=trajectories),
            "repair_features": repair_features(store, int(sae["d_sae"]), n_top),
            **record(config, model={"model": settings.get("model"), "revision": settings.get("revision")},
                     inputs={"store_settings": json_sha256(settings)})}


def write_sae_probe(doc: Mapping[str, Any], out_dir: Path | str) -> Path:
    """Write ``sae_probe.json`` into ``out_dir`` atomically (strict JSON: fails before writing on NaN)."""
    path = Path(out_dir) / "sae_probe.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(to_strict_json(dict(doc)), indent=2, allow_nan=False) + "\n").encode())
    return path
