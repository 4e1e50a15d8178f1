"""The probe report: one call that runs nested CV, CIs, baselines, permutation tests, control task and layer curve.

The report leads with the paired gain of the hidden-state probe over the
position baseline (`probes.baselines`), then the raw AUROCs; every p-value
names its statistic (``permutation_statistic``) and its null.

Files written by `write_probe_results` into `out_dir`:

- probe_results.json: the `run_probe` dict without "oof"; its "schema" field
  gives the meaning and unit of every field.
- oof_predictions.csv: one row per labelled sample, columns
  sample_id, task_id, y (0/1), score (held-out log-odds), fold (outer fold
  index), threshold (that fold's cut, log-odds), pred (score >= threshold).

Fields of probe_results.json (``FIELDS``; ``probe_document`` builds them):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``auroc`` | ``[]`` | float | unitless, [0, 1] | pooled out-of-fold ROC AUC of the task-level nested CV (headline) |
| ``auroc_ci`` | ``[2]`` | float or null | unitless | [low, high] 95% task-level percentile bootstrap CI of auroc; null if n_boot = 0 |
| ``ap`` | ``[]`` | float | unitless, [0, 1] | pooled out-of-fold average precision; chance = n_positive / n_samples |
| ``ap_ci`` | ``[2]`` | float or null | unitless | [low, high] 95% task-level percentile bootstrap CI of ap |
| ``balanced_accuracy`` | ``[]`` | float | fraction | pooled out-of-fold balanced accuracy, each fold at its own inner-selected threshold |
| ``bootstrap_n_used`` | ``[]`` | int | resamples | bootstrap resamples with both classes (others skipped) |
| ``permutation_statistic`` | ``[]`` | str or null | - | what both permutation p-values test (config permutation = fixed: max over candidates of the fixed probe's grouped-CV AUROC; nested: the headline nested-CV AUROC, nested CV rerun per permutation); null if n_perm = 0 |
| ``permutation_p`` | ``[]`` | float or null | probability | (1 + #null >= observed) / (1 + n_valid) of permutation_statistic under the across-task null (each task gets another task's positive rate at random boundaries: task clustering kept, position structure destroyed); null if n_perm = 0 |
| ``permutation_p_min`` | ``[]`` | float or null | probability | smallest p the across-task test could give, 1 / (1 + n_valid) (n_valid: permutations in permutation_null); null if n_perm = 0 |
| ``permutation_observed`` | ``[]`` | float or null | AUROC | the permutation statistic on the real labels |
| ``permutation_null`` | ``[n_perm]`` | float | AUROC | the statistic for each permuted label vector of the across-task null |
| ``permutation_p_position`` | ``[]`` | float or null | probability | p of the same statistic under the position-keeping null (whole label sequences, in after_step order, swapped between tasks with equal numbers of boundaries); null if n_perm = 0 |
| ``permutation_null_position`` | ``[n_perm_position]`` | float | AUROC | the statistic for each label vector of the position-keeping null |
| ``permutation_position_fixed_tasks`` | ``[]`` | int | tasks | tasks alone in their length stratum, which keep their own labels under the position-keeping null |
| ``permutation_n_failed`` | ``[]`` | int | permutations | permuted label vectors (both nulls) whose nested CV could not run, left out of the nulls (nested only) |
| ``control_auroc`` | ``[]`` | float | AUROC | nested-CV AUROC on control labels (real labels shuffled across samples); expected ~0.5 |
| ``selectivity`` | ``[]`` | float | AUROC points | auroc - control_auroc |
| ``n_samples`` | ``[]`` | int | samples | labelled samples (boundaries) used |
| ``n_tasks`` | ``[]`` | int | tasks | distinct task_ids among them |
| ``n_positive`` | ``[]`` | int | samples | samples with y = 1 |
| ``nuisance_features`` | ``[n_nuisance]`` | str | - | position/length features of the baseline (probes.baselines.NUISANCE_FEATURES present in the samples); empty: no baseline |
| ``gain`` | ``{...}`` | object or null | AUROC / AP points | probe minus baseline on the same out-of-fold samples: {auroc, auroc_ci, ap, ap_ci, n_used}; CIs from a task bootstrap drawing the same tasks for both; null when no baseline ran |
| ``baseline`` | ``{...}`` | object or null | unitless | nested CV of the nuisance-only probe (same folds and search): {auroc, auroc_ci, ap, ap_ci, balanced_accuracy, folds} |
| ``probe_plus_baseline`` | ``{...}`` | object or null | unitless | nested CV of every hidden-state candidate with the scaled nuisance block appended: {auroc, auroc_ci, ap, ap_ci, balanced_accuracy, folds} |
| ``n_excluded`` | ``[]`` | int | samples | samples left out: missing label (y = -1) or undefined target |
| ``excluded`` | ``[n_excluded]`` | str | - | their sample_ids |
| ``n_excluded_final`` | ``[]`` | int | samples | of those, final boundaries (after_step = n_steps): no later step, so the target is undefined (never labelled 0) |
| ``excluded_final`` | ``[n_excluded_final]`` | str | - | their sample_ids |
| ``candidates`` | ``[n_candidates, 2]`` | any | - | [layer, pooling] feature candidates searched, in selection order (ties go to the earlier) |
| ``folds`` | ``[n_folds] of {fold, test_tasks, n_train, n_test, layer, pooling, standardize, pca, C, threshold, inner_auroc, auroc, n_inner_skipped}`` | object | threshold: log-odds; auroc: unitless | per outer fold: chosen layer, pooling, standardize, pca (requested components or null), C (inverse L2 strength), threshold, inner_auroc (mean inner AUROC of the chosen configuration), auroc (null if one class), n_inner_skipped (inner folds without both classes) |
| ``layer_curve`` | ``{pooling: {layers, auroc, auroc_ci}}`` | object | AUROC | DESCRIPTIVE, not the headline: pooled out-of-fold AUROC of the fixed probe (config fixed_standardize, no PCA, fixed_C) per candidate under the outer grouped folds, no selection; auroc_ci: 95% task-bootstrap CI per point ([lo, hi] or null) |
| ``elapsed_s`` | ``{phase: seconds}`` | object | s | wall-clock seconds per phase (nested_cv, bootstrap, baselines, permutation_and_layer_curve, control_task) |
| ``schema_version`` | ``[]`` | int | - | version of this layout |
| ``code_version`` | ``[]`` | str | - | version of the probes package |
| ``sklearn_version`` | ``[]`` | str | - | scikit-learn version used |
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``config`` | ``{...}`` | object | - | the frozen config of the analysis that made this file: dataclasses.asdict, tuples as lists (interp.record.config_from builds it back) |
| ``provenance`` | ``{...}`` | object | - | what ran (interp.record): model, revision, dtype (resolved), device, seeds, package, version, inputs (name -> sha256) |

Columns of oof_predictions.csv (``OOF_FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``sample_id`` | ``[n_samples]`` | str | - | the labelled sample |
| ``task_id`` | ``[n_samples]`` | str | - | its task (the CV group) |
| ``y`` | ``[n_samples]`` | int | 0/1 | the label |
| ``score`` | ``[n_samples]`` | float | log-odds | held-out score of the sample's outer fold |
| ``fold`` | ``[n_samples]`` | int | - | outer fold index |
| ``threshold`` | ``[n_samples]`` | float | log-odds | that fold's inner-selected cut |
| ``pred`` | ``[n_samples]`` | int | 0/1 | score >= threshold |
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import sklearn
from sklearn.metrics import average_precision_score

from interp.io import atomic_write_bytes
from interp.record import RECORD_FIELDS, record
from interp.schema import Field, schema_dict
from probes import __version__
from probes.baselines import BaselineComparison, compare_baselines, estimate_summary
from probes.config import ProbeConfig
from probes.data import FeatureSet
from probes.metrics import auroc
from probes.nested_cv import OOF_COLUMNS, NestedCVResult, layer_curve, run_nested_cv
from probes.stats import (STATISTICS, BootstrapResult, PermutationResult, control_task, permutation_tests,
                          task_bootstrap)

SCHEMA_VERSION = 1

FIELDS = (
    Field("auroc", "[]", "float", "unitless, [0, 1]",
          "pooled out-of-fold ROC AUC of the task-level nested CV (headline)"),
    Field("auroc_ci", "[2]", "float or null", "unitless",
          "[low, high] 95% task-level percentile bootstrap CI of auroc; null if n_boot = 0"),
    Field("ap", "[]", "float", "unitless, [0, 1]",
          "pooled out-of-fold average precision; chance = n_positive / n_samples"),
    Field("ap_ci", "[2]", "float or null", "unitless", "[low, high] 95% task-level percentile bootstrap CI of ap"),
    Field("balanced_accuracy", "[]", "float", "fraction",
          "pooled out-of-fold balanced accuracy, each fold at its own inner-selected threshold"),
    Field("bootstrap_n_used", "[]", "int", "resamples", "bootstrap resamples with both classes (others skipped)"),
    Field("permutation_statistic", "[]", "str or null", "-",
          "what both permutation p-values test (config permutation = fixed: max over candidates of the fixed "
          "probe's grouped-CV AUROC; nested: the headline nested-CV AUROC, nested CV rerun per permutation); "
          "null if n_perm = 0"),
    Field("permutation_p", "[]", "float or null", "probability",
          "(1 + #null >= observed) / (1 + n_valid) of permutation_statistic under the across-task null (each "
          "task gets another task's positive rate at random boundaries: task clustering kept, position "
          "structure destroyed); null if n_perm = 0"),
    Field("permutation_p_min", "[]", "float or null", "probability",
          "smallest p the across-task test could give, 1 / (1 + n_valid) (n_valid: permutations in permutation_null); null if n_perm = 0"),
    Field("permutation_observed", "[]", "float or null", "AUROC", "the permutation statistic on the real labels"),
    Field("permutation_null", "[n_perm]", "float", "AUROC",
          "the statistic for each permuted label vector of the across-task null"),
    Field("permutation_p_position", "[]", "float or null", "probability",
          "p of the same statistic under the position-keeping null (whole label sequences, in after_step "
          "order, swapped between tasks with equal numbers of boundaries); null if n_perm = 0"),
    Field("permutation_null_position", "[n_perm_position]", "float", "AUROC",
          "the statistic for each label vector of the position-keeping null"),
    Field("permutation_position_fixed_tasks", "[]", "int", "tasks",
          "tasks alone in their length stratum, which keep their own labels under the position-keeping null"),
    Field("permutation_n_failed", "[]", "int", "permutations",
          "permuted label vectors (both nulls) whose nested CV could not run, left out of the nulls (nested "
          "only)"),
    Field("control_auroc", "[]", "float", "AUROC",
          "nested-CV AUROC on control labels (real labels shuffled across samples); expected ~0.5"),
    Field("selectivity", "[]", "float", "AUROC points", "auroc - control_auroc"),
    Field("n_samples", "[]", "int", "samples", "labelled samples (boundaries) used"),
    Field("n_tasks", "[]", "int", "tasks", "distinct task_ids among them"),
    Field("n_positive", "[]", "int", "samples", "samples with y = 1"),
    Field("nuisance_features", "[n_nuisance]", "str", "-",
          "position/length features of the baseline (probes.baselines.NUISANCE_FEATURES present in the "
          "samples); empty: no baseline"),
    Field("gain", "{...}", "object or null", "AUROC / AP points",
          "probe minus baseline on the same out-of-fold samples: {auroc, auroc_ci, ap, ap_ci, n_used}; CIs "
          "from a task bootstrap drawing the same tasks for both; null when no baseline ran"),
    Field("baseline", "{...}", "object or null", "unitless",
          "nested CV of the nuisance-only probe (same folds and search): {auroc, auroc_ci, ap, ap_ci, "
          "balanced_accuracy, folds}"),
    Field("probe_plus_baseline", "{...}", "object or null", "unitless",
          "nested CV of every hidden-state candidate with the scaled nuisance block appended: {auroc, "
          "auroc_ci, ap, ap_ci, balanced_accuracy, folds}"),
    Field("n_excluded", "[]", "int", "samples", "samples left out: missing label (y = -1) or undefined target"),
    Field("excluded", "[n_excluded]", "str", "-", "their sample_ids"),
    Field("n_excluded_final", "[]", "int", "samples",
          "of those, final boundaries (after_step = n_steps): no later step, so the target is undefined (never "
          "labelled 0)"),
    Field("excluded_final", "[n_excluded_final]", "str", "-", "their sample_ids"),
    Field("candidates", "[n_candidates, 2]", "any", "-",
          "[layer, pooling] feature candidates searched, in selection order (ties go to the earlier)"),
    Field("folds", "[n_folds] of {fold, test_tasks, n_train, n_test, layer, pooling, standardize, pca, C, threshold, inner_auroc, auroc, n_inner_skipped}", "object", "threshold: log-odds; auroc: unitless",
          "per outer fold: chosen layer, pooling, standardize, pca (requested components or null), C (inverse "
          "L2 strength), threshold, inner_auroc (mean inner AUROC of the chosen configuration), auroc (null if "
          "one class), n_inner_skipped (inner folds without both classes)"),
    Field("layer_curve", "{pooling: {layers, auroc, auroc_ci}}", "object", "AUROC",
          "DESCRIPTIVE, not the headline: pooled out-of-fold AUROC of the fixed probe (config "
          "fixed_standardize, no PCA, fixed_C) per candidate under the outer grouped folds, no selection; "
          "auroc_ci: 95% task-bootstrap CI per point ([lo, hi] or null)"),
    Field("elapsed_s", "{phase: seconds}", "object", "s",
          "wall-clock seconds per phase (nested_cv, bootstrap, baselines, permutation_and_layer_curve, "
          "control_task)"),
    Field("schema_version", "[]", "int", "-", "version of this layout"),
    Field("code_version", "[]", "str", "-", "version of the probes package"),
    Field("sklearn_version", "[]", "str", "-", "scikit-learn version used"),
    Field("schema", "{...}", "object", "-", "this table: {field: {shape, dtype, units, doc}}"),
    *RECORD_FIELDS,
)
OOF_FIELDS = (
    Field("sample_id", "[n_samples]", "str", "-", "the labelled sample"),
    Field("task_id", "[n_samples]", "str", "-", "its task (the CV group)"),
    Field("y", "[n_samples]", "int", "0/1", "the label"),
    Field("score", "[n_samples]", "float", "log-odds", "held-out score of the sample's outer fold"),
    Field("fold", "[n_samples]", "int", "-", "outer fold index"),
    Field("threshold", "[n_samples]", "float", "log-odds", "that fold's inner-selected cut"),
    Field("pred", "[n_samples]", "int", "0/1", "score >= threshold"),
)
SCHEMA = schema_dict(FIELDS)


def run_probe(fs: FeatureSet, config: ProbeConfig | None = None) -> dict:
    """Run the whole probe analysis on `fs` and return a JSON-serialisable report (`FIELDS`, plus "oof")."""
    config = config or ProbeConfig()
    labelled, excluded = fs.drop_missing()
    undefined = set(fs.undefined)
    labelled.check_cv(config.min_tasks)
    elapsed = {}
    clock = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal clock
        elapsed[phase] = round(time.perf_counter() - clock, 3)
        clock = time.perf_counter()

    cv = run_nested_cv(labelled, config)
    oof = cv.oof
    lap("nested_cv")
    boot = task_bootstrap(
        oof["y"].to_numpy(), oof["score"].to_numpy(), oof["task_id"].to_numpy(),
        # auroc is None only on one class, and task_bootstrap skips one-class resamples before scoring
        {"auroc": auroc, "ap": average_precision_score},  # type: ignore[dict-item]
        config.n_boot, config.rng("bootstrap"),
    ) if config.n_boot else None
    lap("bootstrap")
    comparison = compare_baselines(labelled, cv, config) if config.baselines and labelled.nuisance else None
    lap("baselines")
    perms = permutation_tests(labelled, config, observed=cv.auroc) if config.n_perm else {}
    across = perms.get("across_tasks")
    curve = layer_curve(labelled, config, across.candidate_auroc if across else None)
    lap("permutation_and_layer_curve")
    control_auroc = control_task(labelled, config).auroc
    lap("control_task")
    return probe_document(cv, boot, across, curve, control_auroc, labelled, excluded, config, elapsed,
                          comparison=comparison, position=perms.get("within_length"),
                          excluded_final=[s for s in excluded if s in undefined])


def probe_document(cv: NestedCVResult, boot: BootstrapResult | None, perm: PermutationResult | None,
                   curve: dict, control_auroc: float, labelled: FeatureSet, excluded: list[str],
                   config: ProbeConfig, elapsed: dict[str, float], comparison: BaselineComparison | None = None,
                   position: PermutationResult | None = None, excluded_final: list[str] | None = None) -> dict:
    """The probe report (`FIELDS` + in-memory "oof") from the computed parts; pure: nothing is fitted here.

    `perm` is the across-task permutation result, `position` the position-keeping one.
    """
    oof = cv.oof
    excluded_final = excluded_final or []
    gain = None
    if comparison is not None:
        g = comparison.gain
        gain = {"auroc": g.estimate["auroc"], "auroc_ci": g.cis["auroc"], "ap": g.estimate["ap"],
                "ap_ci": g.cis["ap"], "n_used": g.n_used}
    return {
        "schema_version": SCHEMA_VERSION,
        "code_version": __version__,
        "sklearn_version": sklearn.__version__,
        "auroc": cv.auroc,
        "auroc_ci": boot.cis["auroc"] if boot else None,
        "ap": cv.ap,
        "ap_ci": boot.cis["ap"] if boot else None,
        "balanced_accuracy": cv.balanced_accuracy,
        "bootstrap_n_used": boot.n_used if boot else 0,
        "nuisance_features": comparison.names if comparison else [],
        "gain": gain,
        "baseline": estimate_summary(comparison.baseline, comparison.baseline_boot) if comparison else None,
        "probe_plus_baseline": (estimate_summary(comparison.combined, comparison.combined_boot)
                                if comparison else None),
        "permutation_statistic": STATISTICS[config.permutation] if perm or position else None,
        "permutation_p": perm.p_value if perm else None,
        "permutation_p_min": 1.0 / (1 + perm.null.size) if perm else None,
        "permutation_observed": perm.observed if perm else None,
        "permutation_null": perm.null.tolist() if perm else [],
        "permutation_p_position": position.p_value if position else None,
        "permutation_null_position": position.null.tolist() if position else [],
        "permutation_position_fixed_tasks": position.fixed_tasks if position else 0,
        "permutation_n_failed": sum(r.n_failed for r in (perm, position) if r),
        "control_auroc": control_auroc,
        "selectivity": cv.auroc - control_auroc,
        "n_samples": len(labelled.sample_ids),
        "n_tasks": labelled.n_tasks,
        "n_positive": int(labelled.y.sum()),
        "n_excluded": len(excluded),
        "excluded": excluded,
        "n_excluded_final": len(excluded_final),
        "excluded_final": excluded_final,
        "candidates": [[int(layer), pooling] for layer, pooling in labelled.keys],
        "folds": cv.folds,
        "layer_curve": curve,
        "elapsed_s": elapsed,
        "schema": SCHEMA,
        **record(config),  # the stage adds the model and input hashes
        "oof": {column: oof[column].tolist() for column in OOF_COLUMNS},
    }


def oof_frame(result: dict) -> pd.DataFrame:
    """The out-of-fold predictions of a `run_probe` result as a DataFrame (columns OOF_COLUMNS)."""
    return pd.DataFrame(result["oof"], columns=OOF_COLUMNS)


def write_probe_results(result: dict, oof: pd.DataFrame, out_dir: str | Path) -> tuple[Path, Path]:
    """Write probe_results.json and oof_predictions.csv into out_dir, each atomically; return both paths."""
    missing = set(OOF_COLUMNS) - set(oof.columns)
    if missing:
        raise ValueError(f"oof is missing columns {sorted(missing)}; expected {OOF_COLUMNS}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = {key: value for key, value in result.items() if key != "oof"}
    json_text = json.dumps(_plain(summary), indent=2, allow_nan=False)  # fails before writing on NaN
    csv_path, json_path = out_dir / "oof_predictions.csv", out_dir / "probe_results.json"
    atomic_write_bytes(csv_path, oof[OOF_COLUMNS].to_csv(index=False).encode())
    atomic_write_bytes(json_path, (json_text + "\n").encode())
    return json_path, csv_path


def _plain(value: object) -> object:
    """Numpy scalars and arrays inside value turned into Python numbers and lists."""
    if isinstance(value, dict):
        return {key: _plain(v) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value

