"""Exact n-dimensional coordinates for an L2 linear model on d >> n features (fast path of the fixed probe).

For L2-penalised logistic regression with an unpenalised intercept, the
optimal weight vector lies in the row span of the centred (and scaled)
training matrix Xc: any component orthogonal to it leaves every training
logit unchanged and only adds penalty. Writing Xc = U S V^T (rank r <= n-1),
the model fitted on Z_train = Xc V = U S, scored on Z_test = Xt V, gives the
same decision scores as the model fitted on the d-dimensional features, up to
solver tolerance. Z is label-free, so one decomposition per (candidate, fold)
serves every label vector of a permutation test. The slow reference is
`LinearProbe(standardize, pca=None, C)`; tests/probes/test_span.py checks parity.
"""

from __future__ import annotations

import numpy as np

RANK_TOL = 1e-12
"""Eigenvalues of Xc Xc^T below RANK_TOL * the largest count as zero (the centring null direction and round-off)."""


def span_coordinates(
    X_train: np.ndarray, X_test: np.ndarray, standardize: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates (Z_train [n_train, r], Z_test [n_test, r]) of both sets in the training row span, float64.

    Centring (and, if `standardize`, unit-variance scaling as in
    StandardScaler) uses training statistics only.
    """
    mean = X_train.mean(axis=0, dtype=np.float64)
    train = X_train.astype(np.float64) - mean
    test = X_test.astype(np.float64) - mean
    if standardize:
        scale = train.std(axis=0)
        scale[scale < 10 * np.finfo(np.float64).eps] = 1.0  # constant features stay unscaled, as in StandardScaler
        train /= scale
        test /= scale
    eigenvalues, U = np.linalg.eigh(train @ train.T)  # Gram matrix: n x n, cheaper than an SVD of n x d
    keep = eigenvalues > RANK_TOL * eigenvalues.max()
    U, singular = U[:, keep], np.sqrt(eigenvalues[keep])
    return U * singular, (test @ train.T) @ (U / singular)
