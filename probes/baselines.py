"""Position baselines of the probe: nuisance features, the same task-level nested CV on them, the paired gain.

A boundary's hidden state encodes where it is (step index, length of the
history so far) and future necessity depends on position too (late
boundaries have little future left), so a probe can score well by reading
position alone. Three estimates go through the identical nested CV
(`probes.nested_cv.run_nested_cv`, same `ProbeConfig`; the outer folds are
made from the same labels, groups and seed, so every sample is held out in
the same fold of all three):

- **baseline**: a probe on the nuisance features only (`NUISANCE_FEATURES`, one
  candidate, `BASELINE_KEY`);
- **probe**: the hidden-state probe (the headline);
- **probe + baseline**: every hidden-state candidate with the nuisance block
  appended (`with_nuisance`).

The claim "the hidden state carries future-necessity information beyond
position" is the **paired gain** AUROC(probe) - AUROC(baseline) on the same
out-of-fold samples, with a task-bootstrap CI in which both are recomputed on
the same resampled tasks (`probes.stats.paired_gain`).

Why append rather than residualise the hidden state on the nuisance features:
appending keeps the span fast path and the `LinearProbe` pipeline unchanged
(the block is just more columns), lets the probe use position and hidden
state jointly (the quantity of interest is what both reach together), and a
linear residualisation would only remove *linear* position information from
4096 dimensions fitted on ~250 rows, which is itself noisy. The appended
block is z-scored over all rows (label-free: the nuisance features are fixed
functions of the trajectory layout, no label crosses folds) and scaled to
the root-mean-square column SD of the hidden matrix, so the probes without
`standardize` weigh it like an average hidden column; with `standardize` the
fold's own scaler rescales it anyway.

The baseline is linear in the listed features. To widen it (another length
measure, a squared term), record the column at extraction: its one definition
is ``interp.extraction.position`` (``POSITION_FEATURES``, which
`NUISANCE_FEATURES` is, and ``position_features``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.metrics import average_precision_score

from interp.extraction.position import POSITION_FEATURES
from probes.config import ProbeConfig
from probes.data import CandidateKey, FeatureSet
from probes.metrics import auroc
from probes.nested_cv import NestedCVResult, run_nested_cv
from probes.stats import BootstrapResult, PairedGain, paired_gain, task_bootstrap

NUISANCE_FEATURES = POSITION_FEATURES
"""Manifest columns of the position baseline, in column order (defined once in ``interp.extraction.position``)."""

BASELINE_KEY: CandidateKey = (-1, "nuisance")
"""Candidate key of the nuisance-only feature matrix (layer -1: not a layer of the model)."""

METRICS = {"auroc": auroc, "ap": average_precision_score}


@dataclass
class BaselineComparison:
    """The three nested-CV estimates, their bootstrap CIs and the paired gain of the probe over the baseline."""

    names: list[str]
    baseline: NestedCVResult
    baseline_boot: BootstrapResult | None
    combined: NestedCVResult
    combined_boot: BootstrapResult | None
    gain: PairedGain


def nuisance_matrix(fs: FeatureSet) -> tuple[np.ndarray, list[str]]:
    """The nuisance features of `fs` as [n_samples, k] float64, in `NUISANCE_FEATURES` order, and their names."""
    names = [name for name in NUISANCE_FEATURES if name in fs.nuisance]
    if not names:
        raise ValueError("FeatureSet.nuisance holds none of NUISANCE_FEATURES; no position baseline can be fitted")
    return np.column_stack([fs.nuisance[name] for name in names]), names


def baseline_set(fs: FeatureSet) -> FeatureSet:
    """`fs` with the nuisance matrix as its only candidate (`BASELINE_KEY`), labels and groups unchanged."""
    N, _ = nuisance_matrix(fs)
    return FeatureSet(features={BASELINE_KEY: N}, y=fs.y, groups=fs.groups, sample_ids=fs.sample_ids,
                      nuisance=fs.nuisance, undefined=fs.undefined)


def with_nuisance(fs: FeatureSet) -> FeatureSet:
    """`fs` with the z-scored nuisance block, scaled to each candidate's RMS column SD, appended to every candidate."""
    N, _ = nuisance_matrix(fs)
    sd = N.std(axis=0)
    Z = (N - N.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    features = {}
    for key, X in fs.features.items():
        scale = float(np.sqrt(np.mean(X.var(axis=0, dtype=np.float64)))) or 1.0
        features[key] = np.hstack([X, (scale * Z).astype(X.dtype)])
    return FeatureSet(features=features, y=fs.y, groups=fs.groups, sample_ids=fs.sample_ids,
                      nuisance=fs.nuisance, undefined=fs.undefined)


def compare_baselines(fs: FeatureSet, probe: NestedCVResult, config: ProbeConfig) -> BaselineComparison:
    """Nested CV of the baseline and of probe + baseline on `fs`, and the paired gain of `probe` over the baseline."""
    _, names = nuisance_matrix(fs)
    baseline = run_nested_cv(baseline_set(fs), config)
    combined = run_nested_cv(with_nuisance(fs), config)
    aligned = probe.oof.merge(baseline.oof[["sample_id", "score"]], on="sample_id", suffixes=("", "_baseline"),
                              validate="one_to_one")
    gain = paired_gain(aligned["y"].to_numpy(), aligned["score_baseline"].to_numpy(), aligned["score"].to_numpy(),
                       aligned["task_id"].to_numpy(), METRICS, config.n_boot, config.rng("gain"))
    return BaselineComparison(names=names, baseline=baseline, baseline_boot=_boot(baseline.oof, config, "baseline"),
                              combined=combined, combined_boot=_boot(combined.oof, config, "probe_plus_baseline"),
                              gain=gain)


def _boot(oof: pd.DataFrame, config: ProbeConfig, purpose: str) -> BootstrapResult | None:
    """Task-bootstrap CIs of AUROC and AP of one estimate's out-of-fold scores (None when n_boot = 0)."""
    if not config.n_boot:
        return None
    return task_bootstrap(oof["y"].to_numpy(), oof["score"].to_numpy(), oof["task_id"].to_numpy(), METRICS,
                          config.n_boot, config.rng(f"bootstrap:{purpose}"))


def estimate_summary(cv: NestedCVResult, boot: BootstrapResult | None) -> dict:
    """One estimate as stored in probe_results.json: AUROC, AP (with CIs), balanced accuracy, chosen configurations."""
    return {
        "auroc": cv.auroc, "auroc_ci": boot.cis["auroc"] if boot else None,
        "ap": cv.ap, "ap_ci": boot.cis["ap"] if boot else None,
        "balanced_accuracy": cv.balanced_accuracy,
        "folds": [{k: f[k] for k in ("fold", "layer", "pooling", "standardize", "pca", "C", "auroc")}
                  for f in cv.folds],
    }
