"""Exact n-dimensional fast path for `LinearProbe` on d >> n features (inner selection, layer curve, permutations).

For L2-penalised logistic regression with an unpenalised intercept, the
optimal weight vector lies in the row span of the centred (and scaled)
training matrix Xc: any component orthogonal to it leaves every training
logit unchanged and only adds penalty. Writing Xc = U S V^T (rank r <= n-1,
singular values decreasing), the model fitted on Z_train = Xc V = U S, scored
on Z_test = Xt V, gives the same decision scores as the model fitted on the
d-dimensional features; and Z[:, :k] are exactly the k-component PCA scores
(up to signs, which an L2 penalty ignores). So one label-free decomposition
per (candidate, fold, standardize) serves every PCA size, every C and every
label vector of a permutation test, and `logreg_scores` fits the same
objective as `balanced_logreg` without scikit-learn's per-fit overhead.
The slow reference is `LinearProbe`; tests/probes/test_probe_span.py checks parity.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from probes.config import ProbeParams

RANK_TOL = 1e-12
"""Eigenvalues of Xc Xc^T below RANK_TOL * the largest count as zero (the centring null direction and round-off)."""

DECREMENT_TOL = 1e-14
"""Newton stops when its decrement g.H^-1.g (twice the objective's remaining excess, to second order) is below
DECREMENT_TOL x max(1, objective): the optimum to float64 round-off, whatever the features' scale."""

STALL_TOL = 1e-9
"""Where no step lowers the objective in float64, a decrement below STALL_TOL x max(1, objective) is converged."""

MAX_NEWTON = 200
"""Damped Newton converges in tens of steps on these problems; more means something is wrong (raises)."""


def span_coordinates(
    X_train: np.ndarray, X_test: np.ndarray, standardize: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates (Z_train [n_train, r], Z_test [n_test, r]) of both sets in the training row span, float64.

    Columns are ordered by decreasing training variance (principal components).
    Centring (and, if `standardize`, unit-variance scaling as in
    StandardScaler) uses training statistics only.
    """
    mean = X_train.mean(axis=0, dtype=np.float64)
    train = np.subtract(X_train, mean, dtype=np.float64)
    test = np.subtract(X_test, mean, dtype=np.float64)
    if standardize:
        scale = np.sqrt(np.einsum("ij,ij->j", train, train) / len(train))  # population SD, as StandardScaler
        scale[scale < 10 * np.finfo(np.float64).eps] = 1.0  # constant features stay unscaled, as in StandardScaler
        train /= scale
        test /= scale
    eigenvalues, U = np.linalg.eigh(train @ train.T)  # Gram matrix: n x n, cheaper than an SVD of n x d
    keep = np.flatnonzero(eigenvalues > RANK_TOL * eigenvalues.max())[::-1]  # eigh sorts ascending
    U, singular = U[:, keep], np.sqrt(eigenvalues[keep])
    return U * singular, (test @ train.T) @ (U / singular)


def logreg_scores(Z_train: np.ndarray, labels: np.ndarray, Z_test: np.ndarray, C: float | np.ndarray) -> np.ndarray:
    """Test log-odds [n_rows, n_test] of class-balanced L2 logistic regression, one independent Newton fit per row.

    `labels` is [n_rows, n_train] of 0/1, each row with both classes; `C` is
    one value or one per row. Objective of a row (scikit-learn's with
    class_weight="balanced"): sum_i s_i log(1 + exp(-t_i (z_i.w + b))) + |w|^2 / (2C),
    t = 2y - 1, s_i = n / (2 n_{class of i}).
    """
    Cs = np.broadcast_to(np.asarray(C, dtype=float), (len(labels),))
    theta = np.stack([_fit_logreg(Z_train, y, C_row) for y, C_row in zip(labels, Cs)])
    return theta[:, :-1] @ Z_test.T + theta[:, -1:]


def _fit_logreg(Z: np.ndarray, y: np.ndarray, C: float) -> np.ndarray:
    """(w, b) concatenated, minimising the objective of `logreg_scores` for one label vector, by damped Newton.

    The objective is strictly convex (the intercept's curvature is a sum of positive weights) and at most
    n-dimensional here, so a few Cholesky-sized solves reach the optimum where L-BFGS spent ~75 Python-level
    gradient calls per fit (the probe stage's cost: benchmarks/RESULTS.md "Probe solver"). Stops at a Newton
    decrement below `DECREMENT_TOL` (relative), or below `STALL_TOL` where no step lowers the objective in float64;
    anything else raises (never a silently unconverged probe)."""
    sign = 2.0 * y - 1.0
    weight = (y.size / (2.0 * np.bincount(y, minlength=2)))[y]
    X = np.hstack([Z, np.ones((len(Z), 1))])
    penalty = np.full(X.shape[1], 1.0 / C)
    penalty[-1] = 0.0  # unpenalised intercept

    def value(theta: np.ndarray) -> float:
        return float(weight @ np.logaddexp(0.0, -sign * (X @ theta)) + theta @ (penalty * theta) / 2)

    theta = np.zeros(X.shape[1])
    current = value(theta)
    for _ in range(MAX_NEWTON):
        wrong = expit(-sign * (X @ theta))  # probability of the other class
        gradient = X.T @ (-weight * sign * wrong) + penalty * theta
        hessian = (X.T * (weight * wrong * (1.0 - wrong))) @ X
        hessian[np.diag_indices_from(hessian)] += penalty
        step = np.linalg.solve(hessian, gradient)
        decrement = float(gradient @ step)
        if decrement <= DECREMENT_TOL * max(1.0, current):
            return theta
        t = 1.0
        while (trial := value(theta - t * step)) > current - 1e-4 * t * decrement and t > 1e-12:
            t /= 2
        if trial >= current:  # no float64 progress left: converged to round-off, or a bug
            if decrement <= STALL_TOL * max(1.0, current):
                return theta
            raise RuntimeError(f"logistic regression (C={C}): Newton stalled {decrement:.3g} above the optimum")
        theta, current = theta - t * step, trial
    raise RuntimeError(f"logistic regression (C={C}): no convergence in {MAX_NEWTON} Newton steps")


def span_scores(
    X_train: np.ndarray, y: np.ndarray, X_test: np.ndarray, configs: list[ProbeParams]
) -> dict[ProbeParams, np.ndarray]:
    """Test log-odds of `LinearProbe(standardize, pca, C)` for every config, one decomposition per standardize."""
    scores = {}
    for standardize in {config[0] for config in configs}:
        Z_train, Z_test = span_coordinates(X_train, X_test, standardize)
        for config in (c for c in configs if c[0] == standardize):
            _, pca, C = config
            keep = Z_train.shape[1] if pca is None else pca  # PCA = leading columns; pca > r keeps all r
            scores[config] = logreg_scores(Z_train[:, :keep], y[None, :], Z_test[:, :keep], C)[0]
    return scores
