"""Seeded synthetic FeatureSets and a small, fast ProbeConfig for the probe tests."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from probes import FeatureSet, ProbeConfig


def synthetic_features(
    n_tasks: int = 12,
    per_task: int = 6,
    layers: tuple[int, ...] = (0, 1, 2, 3),
    poolings: tuple[str, ...] = ("last", "mean"),
    d: int = 16,
    signal_key: tuple[int, str] | None = None,
    signal: float = 0.0,
    task_identity: float = 0.0,
    task_constant_labels: bool = False,
    seed: int = 0,
) -> FeatureSet:
    """Gaussian features; `signal` shifts 4 dims of `signal_key` by +-signal/2 with y.

    `task_identity` scales a random per-task vector added to every sample of the task.
    """
    rng = np.random.default_rng(seed)
    groups = np.repeat([f"task{t:02d}" for t in range(n_tasks)], per_task)
    if task_constant_labels:
        y = np.repeat(rng.permutation(np.arange(n_tasks) % 2), per_task)
    else:
        y = rng.permutation(np.arange(n_tasks * per_task) % 2)
    features = {}
    for layer in layers:
        for pooling in poolings:
            task_vectors = rng.standard_normal((n_tasks, d))
            X = rng.standard_normal((y.size, d)) + task_identity * np.repeat(task_vectors, per_task, axis=0)
            if (layer, pooling) == signal_key:
                X[:, :4] += signal * (y[:, None] - 0.5)
            features[layer, pooling] = X.astype(np.float32)
    sample_ids = [f"{g}/b{i % per_task}" for i, g in enumerate(groups)]
    return FeatureSet(features=features, y=y, groups=groups, sample_ids=sample_ids)


@pytest.fixture
def make_features() -> Callable[..., FeatureSet]:
    """The synthetic FeatureSet factory."""
    return synthetic_features


@pytest.fixture
def fast_config() -> ProbeConfig:
    """Small grids, few resamples, in-process, the fast permutation screen: keeps each nested CV under a second."""
    return ProbeConfig(
        standardize_grid=(True,), pca_grid=(None, 4), C_grid=(0.1, 1.0), n_boot=200, n_perm=19, n_jobs=1,
        permutation="fixed",
    )
