"""Parity of the span fast path (layer curve, permutation statistic) with the plain d-dimensional fit."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from probes import LinearProbe
from probes.span import logreg_scores, span_coordinates, span_scores

pytestmark = pytest.mark.parity


def _data(n=60, d=400):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n + 20, d)).astype(np.float32)
    y = rng.permutation(np.arange(n + 20) % 3 == 0).astype(int)  # imbalanced: class weights matter
    X[:, 0] += y
    X[:, 5] = 3.0  # a constant feature, left unscaled as by StandardScaler
    return X[:n], y[:n], X[n:]


def _exact_logreg(C):
    return LogisticRegression(C=C, class_weight="balanced", tol=1e-12, max_iter=100_000)


@pytest.mark.parametrize("standardize", [True, False])
@pytest.mark.parametrize("C", [0.01, 10.0])
def test_span_coordinates_are_exact(standardize, C):
    X, y, X_test = _data()
    train, test = X.astype(np.float64), X_test.astype(np.float64)
    if standardize:
        scaler = StandardScaler().fit(train)
        train, test = scaler.transform(train), scaler.transform(test)
    reference = _exact_logreg(C).fit(train, y).decision_function(test)
    Z_train, Z_test = span_coordinates(X, X_test, standardize)
    assert Z_train.shape[1] <= len(y) - 1
    fast = _exact_logreg(C).fit(Z_train, y).decision_function(Z_test)
    np.testing.assert_allclose(fast, reference, atol=1e-5 * reference.std())


@pytest.mark.parametrize("C", [0.01, 1.0, 10.0])
def test_logreg_scores_match_sklearn_and_linear_probe(C):
    X, y, X_test = _data()
    Z_train, Z_test = span_coordinates(X, X_test, standardize=True)
    exact = _exact_logreg(C).fit(Z_train, y).decision_function(Z_test)
    fast = logreg_scores(Z_train, y[None, :], Z_test, C)[0]
    np.testing.assert_allclose(fast, exact, atol=1e-3 * exact.std())
    probe = LinearProbe(C=C, standardize=True).fit(X, y).decision_function(X_test)  # the slow reference path
    np.testing.assert_allclose(fast, probe, atol=1e-2 * exact.std())


@pytest.mark.parametrize("standardize", [True, False])
def test_span_scores_match_linear_probe_on_a_grid(standardize):
    X, y, X_test = _data()
    configs = [(standardize, pca, C) for pca in (None, 4, 100) for C in (0.01, 1.0, 10.0)]  # 100 > n - 1: capped
    for (_, pca, C), fast in span_scores(X, y, X_test, configs).items():
        reference = LinearProbe(C=C, standardize=standardize, pca=pca).fit(X, y).decision_function(X_test)
        np.testing.assert_allclose(fast, reference, atol=2e-3 * reference.std(), err_msg=f"pca={pca}, C={C}")


def test_many_label_vectors_and_Cs_match_separate_fits():
    X, y, X_test = _data()
    Z_train, Z_test = span_coordinates(X, X_test, standardize=True)
    labels = np.stack([np.random.default_rng(seed).permutation(y) for seed in range(6)])
    Cs = np.array([0.01, 0.1, 1.0, 10.0, 1.0, 0.1])
    rows = logreg_scores(Z_train, labels, Z_test, Cs)
    for row, label, C in zip(rows, labels, Cs):
        alone = _exact_logreg(C).fit(Z_train, label).decision_function(Z_test)
        np.testing.assert_allclose(row, alone, atol=1e-3 * alone.std())


@pytest.mark.parametrize("C", [0.01, 10.0])
def test_unscaled_features_with_outlier_dimensions_reach_the_optimum(C):
    """Residual-stream features carry a few dimensions hundreds of times larger than the rest; unstandardized, the
    Newton fit still lands on the optimum (sklearn's independent Newton-Cholesky solver at tol 1e-12)."""
    X, y, X_test = _data()
    X[:, :3] *= 500.0
    X_test[:, :3] *= 500.0
    Z_train, Z_test = span_coordinates(X, X_test, standardize=False)
    exact = LogisticRegression(C=C, class_weight="balanced", solver="newton-cholesky", tol=1e-12,
                               max_iter=1000).fit(Z_train, y).decision_function(Z_test)
    fast = logreg_scores(Z_train, y[None, :], Z_test, C)[0]
    np.testing.assert_allclose(fast, exact, atol=1e-6 * exact.std())


def test_an_unconverged_fit_raises_instead_of_returning(monkeypatch):
    X, y, X_test = _data()
    Z_train, Z_test = span_coordinates(X, X_test, standardize=True)
    monkeypatch.setattr("probes.span.MAX_NEWTON", 2)
    with pytest.raises(RuntimeError, match="no convergence in 2 Newton steps"):
        logreg_scores(Z_train, y[None, :], Z_test, 10.0)
