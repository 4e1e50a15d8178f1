"""Score metrics used inside the CV loops: a fast exact AUROC and the balanced-accuracy threshold."""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata


def auroc(y: np.ndarray, score: np.ndarray) -> float | None:
    """AUROC as the Mann-Whitney statistic (equals roc_auc_score, without its overhead); None if y has one class."""
    positive = np.asarray(y) == 1
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = rankdata(score)  # tied scores share their mean rank, i.e. count 1/2
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def balanced_accuracy_threshold(y: np.ndarray, score: np.ndarray) -> float:
    """The cut t (predict 1 when score >= t) maximising balanced accuracy on (y, score).

    Candidates are midpoints between consecutive distinct scores; ties go to
    the cut nearest 0, the class-balanced logistic default. With one class
    there is nothing to balance and 0 is returned.
    """
    y = np.asarray(y)
    score = np.asarray(score, dtype=float)
    if np.unique(y).size < 2:
        return 0.0
    distinct = np.unique(score)
    cuts = np.concatenate([[distinct[0] - 1.0], (distinct[:-1] + distinct[1:]) / 2, [distinct[-1] + 1.0]])
    predicted = score[None, :] >= cuts[:, None]
    tpr = predicted[:, y == 1].mean(axis=1)
    tnr = (~predicted[:, y == 0]).mean(axis=1)
    balanced = (tpr + tnr) / 2
    best = np.flatnonzero(np.isclose(balanced, balanced.max()))
    return float(cuts[best[np.argmin(np.abs(cuts[best]))]])
