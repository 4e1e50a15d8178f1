"""Task-level nested cross-validation of the linear probe, and the descriptive layer curve.

Outer loop: task-grouped folds (`ProbeConfig.outer`), run in parallel with
joblib. Inside each outer fold, on the training tasks only:

1. task-grouped inner folds (StratifiedGroupKFold, `n_inner`);
2. selection by mean inner AUROC over inner folds whose training and test
   tasks both hold two classes (others are skipped and counted). With
   ``search="two_stage"`` the (layer, pooling) candidate is picked with the
   fixed probe, then standardize x pca x C is searched on that candidate;
   ``search="full"`` searches candidates x grid jointly;
3. the decision threshold maximising balanced accuracy on the chosen
   configuration's inner out-of-fold scores;
4. a refit of `LinearProbe` on all training samples, scored on the held-out tasks.

Inner fits use the exact span fast path (`probes.span`): per candidate, inner
fold and standardize, one eigendecomposition of the n x n Gram matrix of the
inner training rows (scaling fitted on those rows only) serves every PCA size
and C, each then one small Newton fit. Cost per outer fold, with
S = len(standardize_grid): two_stage, n_inner x (n_candidates + S)
decompositions and n_inner x (n_candidates + len(grid)) small fits; full,
n_inner x n_candidates x S decompositions and n_inner x n_candidates x
len(grid) small fits. Nothing of the held-out tasks is seen before step 4.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pandas as pd
from joblib import Parallel, delayed
from scipy.stats import rankdata
from sklearn.metrics import average_precision_score, balanced_accuracy_score, roc_auc_score
from threadpoolctl import threadpool_limits

from interp.stats import percentile_ci, task_resamples
from probes.config import ProbeConfig, ProbeParams
from probes.data import CandidateKey, FeatureSet
from probes.estimator import LinearProbe
from probes.metrics import auroc, balanced_accuracy_threshold
from probes.scan import candidate_scores
from probes.span import span_scores
from probes.splits import grouped_splits

T = TypeVar("T")

OOF_COLUMNS = ["sample_id", "task_id", "y", "score", "fold", "threshold", "pred"]


@dataclass
class NestedCVResult:
    """Outcome of `run_nested_cv`.

    folds: one dict per outer fold (fold, test_tasks, n_train, n_test, layer,
      pooling, standardize, pca, C, threshold, inner_auroc, auroc,
      n_inner_skipped); auroc is None when the fold's test tasks hold one class.
    oof: one row per sample, columns OOF_COLUMNS; score is the held-out
      log-odds, pred = score >= the fold's threshold.
    auroc, ap, balanced_accuracy: on the pooled out-of-fold rows.
    """

    folds: list[dict]
    oof: pd.DataFrame
    auroc: float
    ap: float
    balanced_accuracy: float


@dataclass
class _InnerScores:
    mean_auroc: float  # over the usable inner folds (two classes in train and test)
    oof: np.ndarray  # inner out-of-fold scores, NaN where no inner model could be fitted


def run_nested_cv(fs: FeatureSet, config: ProbeConfig) -> NestedCVResult:
    """Task-level nested-CV estimate of the probe (the headline numbers), with every selection inside training folds."""
    fs.check_cv(config.min_tasks)
    outer = grouped_splits(fs.y, fs.groups, config.outer_splits, config.split_seed("outer"))
    fold_outputs = Parallel(n_jobs=config.n_jobs)(
        delayed(_outer_fold)(i, fs, train, test, config) for i, (train, test) in enumerate(outer)
    )
    parts = []
    folds = []
    for (train, test), (fold, score) in zip(outer, fold_outputs):
        if fold["n_inner_skipped"]:
            warnings.warn(
                f"outer fold {fold['fold']}: {fold['n_inner_skipped']} of {config.n_inner} inner folds skipped "
                f"for AUROC (one class in their training or test tasks)",
                stacklevel=2,
            )
        folds.append(fold)
        parts.append(pd.DataFrame({
            "sample_id": [fs.sample_ids[i] for i in test],
            "task_id": fs.groups[test],
            "y": fs.y[test],
            "score": score,
            "fold": fold["fold"],
            "threshold": fold["threshold"],
            "pred": (score >= fold["threshold"]).astype(int),
        }))
    oof = pd.concat(parts, ignore_index=True)[OOF_COLUMNS]
    return NestedCVResult(
        folds=folds,
        oof=oof,
        auroc=float(roc_auc_score(oof["y"], oof["score"])),
        ap=float(average_precision_score(oof["y"], oof["score"])),
        balanced_accuracy=float(balanced_accuracy_score(oof["y"], oof["pred"])),
    )


def _outer_fold(
    index: int, fs: FeatureSet, train: np.ndarray, test: np.ndarray, config: ProbeConfig
) -> tuple[dict, np.ndarray]:
    # One BLAS thread per worker: the matrices are small and pools oversubscribe the cores.
    with threadpool_limits(limits=1):
        y, groups = fs.y[train], fs.groups[train]
        if np.unique(y).size < 2:
            raise ValueError(
                f"outer fold {index}: its training tasks hold only y={y[0]}; "
                f"use fewer outer folds or check that more than one task has each class"
            )
        n_tasks = np.unique(groups).size
        if n_tasks < config.n_inner:
            raise ValueError(
                f"outer fold {index}: {n_tasks} training tasks cannot make {config.n_inner} inner folds; "
                f"lower ProbeConfig.n_inner"
            )
        inner = grouped_splits(y, groups, config.n_inner, config.split_seed("inner"))
        usable = [np.unique(y[tr]).size == 2 and np.unique(y[te]).size == 2 for tr, te in inner]
        if not any(usable):
            raise ValueError(
                f"outer fold {index}: none of its {config.n_inner} inner folds has both classes in training "
                f"and test tasks, so no configuration can be selected; lower n_inner or add tasks"
            )
        cache: dict[tuple[CandidateKey, ProbeParams], _InnerScores] = {}

        def evaluate(key: CandidateKey, configs: list[ProbeParams]) -> list[tuple[CandidateKey, ProbeParams]]:
            missing = [p for p in configs if (key, p) not in cache]
            if missing:
                for params, scores in _inner_scores(fs.features[key][train], y, inner, usable, missing).items():
                    cache[key, params] = scores
            return [(key, p) for p in configs]

        def inner_auroc(option: tuple[CandidateKey, ProbeParams]) -> float:
            return cache[option].mean_auroc

        if config.search == "two_stage":
            screened = [option for k in fs.keys for option in evaluate(k, [config.fixed_params])]
            key, _ = _argmax(screened, inner_auroc)
            key, params = _argmax(evaluate(key, config.grid()), inner_auroc)
        else:
            key, params = _argmax([option for k in fs.keys for option in evaluate(k, config.grid())], inner_auroc)
        chosen = cache[key, params]
        scored = ~np.isnan(chosen.oof)
        threshold = balanced_accuracy_threshold(y[scored], chosen.oof[scored])
        standardize, pca, C = params
        model = LinearProbe(C=C, standardize=standardize, pca=pca).fit(fs.features[key][train], y)
        score = model.decision_function(fs.features[key][test])
    fold = {
        "fold": index,
        "test_tasks": sorted(np.unique(fs.groups[test]).tolist()),
        "n_train": int(train.size),
        "n_test": int(test.size),
        "layer": int(key[0]),
        "pooling": key[1],
        "standardize": bool(standardize),
        "pca": pca,
        "C": float(C),
        "threshold": threshold,
        "inner_auroc": chosen.mean_auroc,
        "auroc": auroc(fs.y[test], score),
        "n_inner_skipped": len(usable) - sum(usable),
    }
    return fold, score


def _inner_scores(
    X: np.ndarray,
    y: np.ndarray,
    inner: list[tuple[np.ndarray, np.ndarray]],
    usable: list[bool],
    configs: list[ProbeParams],
) -> dict[ProbeParams, _InnerScores]:
    oof = {params: np.full(y.size, np.nan) for params in configs}
    aurocs: dict[ProbeParams, list[float]] = {params: [] for params in configs}
    for (train, test), ok in zip(inner, usable):
        if np.unique(y[train]).size < 2:
            continue
        for params, score in span_scores(X[train], y[train], X[test], configs).items():
            oof[params][test] = score
            if ok and (value := auroc(y[test], score)) is not None:  # ok: two classes in test, so never None
                aurocs[params].append(value)
    return {params: _InnerScores(float(np.mean(aurocs[params])), oof[params]) for params in configs}


def _argmax(options: list[T], value: Callable[[T], float]) -> T:
    """First option with the highest value (strict > keeps the earliest on ties)."""
    best, best_value = options[0], -np.inf
    for option in options:
        v = value(option)
        if v > best_value:
            best, best_value = option, v
    return best


def layer_curve(fs: FeatureSet, config: ProbeConfig, aurocs: np.ndarray | None = None) -> dict[str, dict[str, list]]:
    """Descriptive AUROC per (pooling, layer) of the fixed probe under outer-style grouped CV, with a task-bootstrap
    95% CI per point; NOT the headline.

    No selection happens here, so each point is an honest single-candidate
    estimate, but reading off the best layer of the curve is optimistic
    (that is what the nested CV and the permutation test account for).
    `aurocs` (per candidate in fs.keys order, e.g. PermutationResult.candidate_auroc,
    which is the same scan) are used as the points; the CIs resample tasks
    (``interp.stats.task_resamples``, ``config.n_boot`` draws; none when 0) on
    the out-of-fold scores of one scan of the real labels. Returns
    {pooling: {"layers": [...], "auroc": [...], "auroc_ci": [[lo, hi] or None, ...]}}, layers ascending.
    """
    scores = candidate_scores(fs, fs.y[None, :], config)[0]
    if aurocs is None:
        aurocs = np.array([np.nan if (v := auroc(fs.y, s)) is None else v for s in scores])
    cis = _candidate_cis(fs, scores, config)
    curve: dict[str, dict[str, list]] = {}
    for (layer, pooling), value, ci in zip(fs.keys, aurocs, cis):
        entry = curve.setdefault(pooling, {"layers": [], "auroc": [], "auroc_ci": []})
        entry["layers"].append(int(layer))
        entry["auroc"].append(float(value))
        entry["auroc_ci"].append(ci)
    return curve


def _candidate_cis(fs: FeatureSet, scores: np.ndarray, config: ProbeConfig) -> list[list[float] | None]:
    """95% percentile CI of each candidate's AUROC over task resamples (the same draws for every candidate)."""
    if not config.n_boot:
        return [None] * len(scores)
    draws = []
    for rows in task_resamples(fs.groups, config.n_boot, config.rng("layer_curve_bootstrap")):
        y = fs.y[rows] == 1
        n_pos = int(y.sum())
        if 0 < n_pos < y.size:  # Mann-Whitney AUROC of every candidate at once (probes.metrics.auroc, vectorised)
            ranks = rankdata(scores[:, rows], axis=1)
            draws.append((ranks[:, y].sum(axis=1) - n_pos * (n_pos + 1) / 2) / (n_pos * (y.size - n_pos)))
    if not draws:
        return [None] * len(scores)
    return [[float(a), float(b)] for a, b in percentile_ci(np.array(draws), 0.95)]
