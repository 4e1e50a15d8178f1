"""Future behavioural risk by externalization gap: is y more likely where derived state lives only in reasoning?

Inputs, one row per boundary ``(task_id, after_step)``; each trajectory's final
boundary is left out (nothing follows it, so y is undefined there: the probe's
rule, ``interp.data.labels.final_boundaries``), which needs the trajectories
(``--trajectories``); without them every labelled row is used as given, and
``n_undefined`` is null:

- ``G`` (externalization gap, 0/1): annotations or a labels CSV
  (``task_id,after_step,externalization_gap``; ``interp externalize label``
  writes one with the rule labels);
- ``y`` (future necessity, 0/1): annotations or a CSV ``task_id,after_step,future_necessity``;
- optionally the out-of-fold probe score of each boundary, from
  ``oof_predictions.csv`` (``probes.report``; ``sample_id`` is
  ``"{task_id}@{after_step}:{condition}"``, ``score`` is held-out log-odds).

Statistics (all CIs: 95 % percentile bootstrap over tasks, ``interp.stats.task_bootstrap_ci``):

- ``P(y=1 | G=1)`` and ``P(y=1 | G=0)``: pooled over boundaries;
- within-task gap: over tasks that have both G values, the mean of the paired
  difference ``P(y=1 | G=1, task) - P(y=1 | G=0, task)``;
- hidden-score gap: over tasks that have both G values (and scores), the mean
  of ``mean score(G=1) - mean score(G=0)`` within the task, on the log-odds
  scale and on the probability scale (sigmoid of the score).

Fields of ``externalization.json`` (``FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``p_y_given_g1`` | ``{estimate, ci, n, n_positive, n_tasks}`` | object | fraction, [0, 1] | fraction of G=1 boundaries with y=1, pooled over boundaries (estimate null without such boundaries); ci = 95% task-bootstrap [lo, hi] or null |
| ``p_y_given_g0`` | ``{estimate, ci, n, n_positive, n_tasks}`` | object | fraction, [0, 1] | the same for G=0 boundaries |
| ``risk_difference`` | ``[]`` | float or null | fraction (x100 = percentage points) | p_y_given_g1 - p_y_given_g0 (pooled); no CI |
| ``within_task_gap`` | ``{estimate, ci, n_tasks, per_task}`` | object | fraction (x100 = percentage points) | mean over tasks with both G values of P(y=1 given G=1, task) - P(y=1 given G=0, task); per_task = {task_id: difference}; estimate and ci null without such tasks |
| ``hidden_score_gap`` | ``{logodds: {estimate, ci, n_tasks, per_task}, probability: {estimate, ci, n_tasks, per_task}}`` | object or null | logodds: log-odds; probability: unitless | mean over tasks with both G values of mean OOF probe score (G=1) - mean OOF score (G=0); logodds: raw held-out scores; probability: sigmoid(score); null without probe scores |
| ``n_boundaries`` | ``[]`` | int | boundaries | boundaries with both G and y |
| ``n_tasks`` | ``[]`` | int | tasks | their distinct tasks |
| ``n_without_score`` | ``[]`` | int | boundaries | boundaries without a probe score |
| ``n_without_y`` | ``[]`` | int | boundaries | boundaries with G but no y (left out) |
| ``n_undefined`` | ``[]`` | int or null | boundaries | final boundaries with G or y left out (y undefined: nothing follows them); null without trajectories |
| ``sources`` | ``{G, y, scores}`` | object | - | where G, y and the scores came from (scores null if none) |
| ``condition`` | ``[]`` | str or null | - | probe-score condition used (null without scores) |
| ``n_boot`` | ``[]`` | int | resamples | bootstrap resamples |
| ``seed`` | ``[]`` | int | - | bootstrap seed |
| ``config`` | ``{...}`` | object | - | the frozen config of the analysis that made this file: dataclasses.asdict, tuples as lists (interp.record.config_from builds it back) |
| ``provenance`` | ``{...}`` | object | - | what ran (interp.record): model, revision, dtype (resolved), device, seeds, package, version, inputs (name -> sha256) |
"""

from __future__ import annotations

import csv
import io
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from interp.data.labels import annotation_labels, final_boundaries, read_labels_csv
from interp.data.trajectory import Trajectory, load_trajectories
from interp.io import atomic_write_json, read_text
from interp.params import N_BOOT, Integer, Text, param, validate
from interp.record import RECORD_FIELDS, record
from interp.schema import Field, schema_dict
from interp.stats import task_bootstrap_ci

FIELDS = (
    Field("schema", "{...}", "object", "-", "this table: {field: {shape, dtype, units, doc}}"),
    Field("p_y_given_g1", "{estimate, ci, n, n_positive, n_tasks}", "object", "fraction, [0, 1]",
          "fraction of G=1 boundaries with y=1, pooled over boundaries (estimate null without such "
          "boundaries); ci = 95% task-bootstrap [lo, hi] or null"),
    Field("p_y_given_g0", "{estimate, ci, n, n_positive, n_tasks}", "object", "fraction, [0, 1]",
          "the same for G=0 boundaries"),
    Field("risk_difference", "[]", "float or null", "fraction (x100 = percentage points)",
          "p_y_given_g1 - p_y_given_g0 (pooled); no CI"),
    Field("within_task_gap", "{estimate, ci, n_tasks, per_task}", "object", "fraction (x100 = percentage points)",
          "mean over tasks with both G values of P(y=1 given G=1, task) - P(y=1 given G=0, task); per_task = "
          "{task_id: difference}; estimate and ci null without such tasks"),
    Field("hidden_score_gap", "{logodds: {estimate, ci, n_tasks, per_task}, probability: {estimate, ci, n_tasks, per_task}}", "object or null", "logodds: log-odds; probability: unitless",
          "mean over tasks with both G values of mean OOF probe score (G=1) - mean OOF score (G=0); logodds: "
          "raw held-out scores; probability: sigmoid(score); null without probe scores"),
    Field("n_boundaries", "[]", "int", "boundaries", "boundaries with both G and y"),
    Field("n_tasks", "[]", "int", "tasks", "their distinct tasks"),
    Field("n_without_score", "[]", "int", "boundaries", "boundaries without a probe score"),
    Field("n_without_y", "[]", "int", "boundaries", "boundaries with G but no y (left out)"),
    Field("n_undefined", "[]", "int or null", "boundaries",
          "final boundaries with G or y left out (y undefined: nothing follows them); null without trajectories"),
    Field("sources", "{G, y, scores}", "object", "-", "where G, y and the scores came from (scores null if none)"),
    Field("condition", "[]", "str or null", "-", "probe-score condition used (null without scores)"),
    Field("n_boot", "[]", "int", "resamples", "bootstrap resamples"),
    Field("seed", "[]", "int", "-", "bootstrap seed"),
    *RECORD_FIELDS,
)
SCHEMA = schema_dict(FIELDS)
_SAMPLE_ID = re.compile(r"^(?P<task_id>.+)@(?P<after_step>\d+):(?P<condition>.+)$")


def read_oof_scores(path: str | Path, condition: str = "full") -> dict[tuple[str, int], float]:
    """``{(task_id, after_step): score}`` of one condition from ``oof_predictions.csv`` (or a directory holding it)."""
    path = Path(path)
    if path.is_dir():
        path = path / "oof_predictions.csv"
    if not path.exists():
        raise FileNotFoundError(f"{path}: file not found (expected oof_predictions.csv from `interp probe`)")
    out: dict[tuple[str, int], float] = {}
    problems: list[str] = []
    seen_conditions: set[str] = set()
    with io.StringIO(read_text(path), newline="") as fh:
        reader = csv.DictReader(fh)
        absent = [c for c in ("sample_id", "task_id", "score") if c not in (reader.fieldnames or [])]
        if absent:
            raise ValueError(f"{path}:1: header: missing column(s) {', '.join(absent)}; "
                             "expected sample_id,task_id,y,score,...")
        for line, row in enumerate(reader, start=2):
            m = _SAMPLE_ID.match(row["sample_id"] or "")
            if not m:
                problems.append(f"{path}:{line}: sample_id: {row['sample_id']!r} is not task_id@after_step:condition")
                continue
            if m["task_id"] != row["task_id"]:
                problems.append(f"{path}:{line}: task_id: {row['task_id']!r} differs from the sample_id's "
                                f"{m['task_id']!r}")
                continue
            seen_conditions.add(m["condition"])
            if m["condition"] != condition:
                continue
            try:
                score = float(row["score"])
            except (TypeError, ValueError):
                problems.append(f"{path}:{line}: score: {row['score']!r} is not a number")
                continue
            if not math.isfinite(score):  # a NaN score would read as a gap of 0.000, a number that looks like a finding
                problems.append(f"{path}:{line}: score: {row['score']!r} is not finite; re-run `interp probe` "
                                "(a score must be a finite log-odds or probability)")
                continue
            key = (m["task_id"], int(m["after_step"]))
            if key in out:
                problems.append(f"{path}:{line}: sample_id: duplicate sample {row['sample_id']!r}")
                continue
            out[key] = score
    if problems:
        raise ValueError(problems[0] if len(problems) == 1 else
                         f"{len(problems)} problem(s) in {path}:\n" + "\n".join(problems[:50]))
    if not out:
        raise ValueError(f"{path}: no samples of condition {condition!r} (conditions present: "
                         f"{', '.join(sorted(seen_conditions)) or 'none'})")
    return out


def risk_rows(gap: dict[tuple[str, int], int], necessity: dict[tuple[str, int], int],
              scores: dict[tuple[str, int], float] | None = None) -> pd.DataFrame:
    """Boundaries with both G and y: columns task_id, after_step, G, y, score (NaN without a score)."""
    keys = sorted(set(gap) & set(necessity))
    return pd.DataFrame({
        "task_id": [k[0] for k in keys], "after_step": [k[1] for k in keys],
        "G": [gap[k] for k in keys], "y": [necessity[k] for k in keys],
        "score": [(scores or {}).get(k, np.nan) for k in keys],
    })


def _ci(values: np.ndarray, groups: np.ndarray, n_boot: int, seed: int) -> list[float] | None:
    """Task-bootstrap CI of the nan-mean of one column (None without data)."""
    if not np.isfinite(values).any():
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # resamples without any finite value
        lo, hi = task_bootstrap_ci(values[:, None], groups, n_boot=n_boot, seed=seed)[0]
    return [float(lo), float(hi)]


def conditional_risk(rows: pd.DataFrame, g: int, n_boot: int, seed: int = 0) -> dict[str, Any]:
    """P(y=1 | G=g) pooled over boundaries, with its task-bootstrap CI."""
    mask = rows["G"].to_numpy() == g
    y = rows["y"].to_numpy(dtype=float)
    values = np.where(mask, y, np.nan)
    return {"estimate": float(y[mask].mean()) if mask.any() else None,
            "ci": _ci(values, rows["task_id"].to_numpy(), n_boot, seed),
            "n": int(mask.sum()), "n_positive": int(y[mask].sum()),
            "n_tasks": int(rows.loc[mask, "task_id"].nunique())}


def paired_task_gap(rows: pd.DataFrame, column: str, n_boot: int, seed: int = 0) -> dict[str, Any]:
    """Mean over tasks with both G values of mean(column | G=1) - mean(column | G=0) within the task, with CI."""
    data = rows.dropna(subset=[column])
    means = data.groupby(["task_id", "G"])[column].mean().unstack("G")
    both = means.dropna() if {0, 1} <= set(means.columns) else means.iloc[0:0]
    if both.empty:
        return {"estimate": None, "ci": None, "n_tasks": 0, "per_task": {}}
    diff = (both[1] - both[0]).to_numpy(dtype=float)
    return {"estimate": float(diff.mean()), "ci": _ci(diff, both.index.to_numpy(), n_boot, seed),
            "n_tasks": int(len(diff)), "per_task": {t: round(float(d), 6) for t, d in zip(both.index, diff)}}


def risk_analysis(rows: pd.DataFrame, n_boot: int, seed: int = 0) -> dict[str, Any]:
    """Every statistic of the module docstring on the rows of :func:`risk_rows`."""
    p1, p0 = conditional_risk(rows, 1, n_boot, seed), conditional_risk(rows, 0, n_boot, seed)
    has_scores = rows["score"].notna().any()
    if has_scores:
        rows = rows.assign(probability=1.0 / (1.0 + np.exp(-rows["score"].to_numpy(dtype=float))))
    return {
        "p_y_given_g1": p1, "p_y_given_g0": p0,
        "risk_difference": None if p1["estimate"] is None or p0["estimate"] is None
        else p1["estimate"] - p0["estimate"],
        "within_task_gap": paired_task_gap(rows, "y", n_boot, seed),
        "hidden_score_gap": {"logodds": paired_task_gap(rows, "score", n_boot, seed),
                             "probability": paired_task_gap(rows, "probability", n_boot, seed)} if has_scores else None,
        "n_boundaries": int(len(rows)), "n_tasks": int(rows["task_id"].nunique()),
        "n_without_score": int(rows["score"].isna().sum()),
    }


def _load_sources(labels: Path | None, targets: Path | None, trajs: list[Trajectory] | None,
                  g_column: str) -> tuple[dict, dict, dict[str, str | None]]:
    if labels is not None:
        gap, g_src = read_labels_csv(labels, g_column, trajs), f"{labels} ({g_column})"
    elif trajs is not None:
        gap, g_src = annotation_labels(trajs, "externalization_gap"), "annotations"
    else:
        raise ValueError("no externalization labels: pass --labels CSV or --trajectories with annotations")
    necessity: dict = {}
    y_src = None
    if targets is not None:
        necessity, y_src = read_labels_csv(targets, "future_necessity", trajs), str(targets)
    elif labels is not None and (necessity := read_labels_csv(labels, "future_necessity", trajs, required=False)):
        y_src = f"{labels} (future_necessity)"
    elif trajs is not None:
        necessity, y_src = annotation_labels(trajs, "future_necessity"), "annotations"
    if not necessity:
        raise ValueError("no future-necessity targets: pass --targets CSV (task_id,after_step,future_necessity), "
                         "a --labels CSV with a future_necessity column, or --trajectories with annotations")
    if not gap:
        raise ValueError(f"no externalization labels found in {g_src}")
    return gap, necessity, {"G": g_src, "y": y_src}


@dataclass(frozen=True)
class RiskConfig:
    """Future risk by G (``interp externalize risk``): the condition of the probe samples whose scores give the
    hidden-score gap, the column of the labels CSV holding G, and the task-bootstrap resamples and seed of the CIs
    (``n_boot`` 0: no CIs)."""

    analysis: ClassVar[str] = "externalization"
    precision: ClassVar[str | None] = None  # reads labels and probe scores; runs no model

    condition: str = param("full", Text("a condition name"), "Condition of the probe samples whose scores give "
                           "the hidden-score gap.")
    g_column: str = param("externalization_gap", Text("a column name"), "Column of the labels CSV holding G.")
    n_boot: int = param(N_BOOT, Integer(0), "Task-bootstrap resamples of the CIs (0: none).")
    seed: int = param(0, Integer(0), "Seed of the bootstrap.")

    def __post_init__(self) -> None:
        validate(self)


def risk_command(out: Path, labels: Path | None = None, probe_results: Path | None = None,
                 trajectories: Path | None = None, targets: Path | None = None,
                 config: RiskConfig = RiskConfig()) -> dict[str, Any]:
    """``interp externalize risk``: write ``externalization.json`` (see ``SCHEMA``) and return it."""
    trajs = (load_trajectories(trajectories, allow_control_tokens=True)  # annotations only, never rendered
             if trajectories is not None else None)
    condition, n_boot, seed = config.condition, config.n_boot, config.seed
    gap, necessity, sources = _load_sources(labels, targets, trajs, config.g_column)
    scores = read_oof_scores(probe_results, condition) if probe_results is not None else None
    sources["scores"] = str(probe_results) if probe_results is not None else None
    n_undefined = None
    if trajs is not None:
        final = final_boundaries(trajs)
        n_undefined = len(final & (set(gap) | set(necessity)))
        gap = {k: v for k, v in gap.items() if k not in final}
        necessity = {k: v for k, v in necessity.items() if k not in final}
    rows = risk_rows(gap, necessity, scores)
    if rows.empty:
        raise ValueError(f"no boundary has both G ({sources['G']}) and y ({sources['y']}); check the task ids")
    doc = {"schema": SCHEMA, **risk_analysis(rows, n_boot, seed),
           "n_without_y": len(set(gap) - set(necessity)), "n_undefined": n_undefined, "sources": sources,
           "condition": condition if scores is not None else None, "n_boot": n_boot, "seed": seed,
           **record(config, inputs={"labels": labels, "probe_results": probe_results, "trajectories": trajectories,
                                    "targets": targets})}
    atomic_write_json(Path(out) / "externalization.json", doc)
    return doc
