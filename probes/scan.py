"""Fixed-probe scan: grouped-CV AUROC of every (layer, pooling) candidate for one or many label vectors."""

from __future__ import annotations

import numpy as np
from joblib import Parallel, delayed
from threadpoolctl import threadpool_limits

from probes.config import ProbeConfig
from probes.data import FeatureSet
from probes.metrics import auroc
from probes.span import logreg_scores, span_coordinates
from probes.splits import grouped_splits


def candidate_aurocs(fs: FeatureSet, labels: np.ndarray, config: ProbeConfig) -> np.ndarray:
    """Pooled out-of-fold AUROC [n_label_vectors, n_candidates] of the fixed probe, candidates in `fs.keys` order.

    Folds are the outer-style task-grouped splits made from the real labels
    `fs.y` (seed from `config`), shared by every row of `labels`, so the real
    labels and their permutations are scored on identical folds. The fixed
    probe (`config.fixed_params`) is fitted through the exact span fast path
    (`probes.span`). A training fold with one class under some label vector
    gets score 0 on its test samples (no information). NaN where a label
    vector has one class.
    """
    labels = np.atleast_2d(labels)
    scores = candidate_scores(fs, labels, config)
    values = [[auroc(y, s) for s in column] for y, column in zip(labels, scores)]
    return np.array([[np.nan if v is None else v for v in row] for row in values])


def candidate_scores(fs: FeatureSet, labels: np.ndarray, config: ProbeConfig) -> np.ndarray:
    """Out-of-fold scores [n_label_vectors, n_candidates, n_samples] of the fixed probe (see ``candidate_aurocs``)."""
    labels = np.atleast_2d(labels)
    splits = grouped_splits(fs.y, fs.groups, config.outer_splits, config.split_seed("outer"))
    columns = Parallel(n_jobs=config.n_jobs)(
        delayed(_scan_candidate)(fs.features[key], labels, splits, config.fixed_standardize, config.fixed_C)
        for key in fs.keys
    )
    return np.stack(columns, axis=1)


def _scan_candidate(
    X: np.ndarray, labels: np.ndarray, splits: list[tuple[np.ndarray, np.ndarray]], standardize: bool, C: float
) -> np.ndarray:
    # Single-threaded BLAS: these matrices are small, and a BLAS thread pool
    # per joblib worker oversubscribes the cores (measured 10x slower on 2 cores).
    with threadpool_limits(limits=1):
        scores = np.zeros(labels.shape)
        for train, test in splits:
            Z_train, Z_test = span_coordinates(X[train], X[test], standardize)
            fittable = np.flatnonzero(labels[:, train].min(axis=1) < labels[:, train].max(axis=1))
            if fittable.size:
                scores[np.ix_(fittable, test)] = logreg_scores(Z_train, labels[np.ix_(fittable, train)], Z_test, C)
    return scores
