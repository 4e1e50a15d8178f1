"""LinearProbe is a real scikit-learn estimator."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.utils.estimator_checks import parametrize_with_checks

from probes import LinearProbe

pytestmark = pytest.mark.unit


@parametrize_with_checks([LinearProbe(pca=3)])  # exercises all three pipeline steps
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_clone_fit_returns_self_and_pca_cap():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20, 50)).astype(np.float32)
    y = np.arange(20) % 2
    probe = LinearProbe(C=0.5, pca=64)
    copy = clone(probe)
    assert copy.get_params() == probe.get_params() and not hasattr(copy, "pipeline_")
    assert copy.fit(X, y) is copy
    assert copy.pipeline_["pca"].n_components_ == 19  # capped at n_samples - 1
    proba = copy.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-6)
    logit = np.log(proba[:, 1] / proba[:, 0])
    np.testing.assert_allclose(copy.decision_function(X), logit, rtol=1e-4, atol=1e-5)
