"""The fast AUROC and the balanced-accuracy threshold against brute force and scikit-learn."""

import numpy as np
import pytest
from sklearn.metrics import balanced_accuracy_score, roc_auc_score

from probes.metrics import auroc, balanced_accuracy_threshold

pytestmark = pytest.mark.parity


def test_auroc_matches_sklearn_with_ties():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    score = np.round(rng.standard_normal(200) + y, 1)  # rounding makes ties
    assert auroc(y, score) == pytest.approx(roc_auc_score(y, score), abs=1e-12)
    assert auroc(np.ones(5), np.arange(5)) is None


def test_threshold_maximises_balanced_accuracy():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 60)
    score = rng.standard_normal(60) + y
    cut = balanced_accuracy_threshold(y, score)
    best = max(balanced_accuracy_score(y, score >= t) for t in np.concatenate([score, [score.max() + 1]]))
    assert balanced_accuracy_score(y, score >= cut) == best
    assert -0.5 < balanced_accuracy_threshold([0, 0, 1, 1], [-1.0, -0.5, 0.5, 1.0]) < 0.5
    assert balanced_accuracy_threshold([1, 1], [0.3, 0.4]) == 0.0
