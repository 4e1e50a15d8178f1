"""The descriptive layer curve carries a task-bootstrap CI per point: synthetic truth both ways."""

from __future__ import annotations

import dataclasses

import pytest

from probes import layer_curve

pytestmark = pytest.mark.unit


def test_signal_point_ci_excludes_chance_noise_points_cover_it(make_features, fast_config):
    fs = make_features(n_tasks=15, signal_key=(2, "mean"), signal=2.0, seed=1)
    curve = layer_curve(fs, fast_config)
    for pooling, entry in curve.items():
        assert len(entry["auroc_ci"]) == len(entry["layers"])
        for layer, value, (lo, hi) in zip(entry["layers"], entry["auroc"], entry["auroc_ci"]):
            assert lo <= value <= hi
            if (layer, pooling) == (2, "mean"):
                assert lo > 0.5, "planted signal: the CI excludes chance"
    noise = layer_curve(make_features(n_tasks=15, seed=5), fast_config)
    covered = [lo <= 0.5 <= hi for entry in noise.values() for lo, hi in entry["auroc_ci"]]
    assert sum(covered) >= 0.75 * len(covered), "no signal: most CIs cover chance"


def test_no_bootstrap_no_ci(make_features, fast_config):
    fs = make_features(n_tasks=8, seed=2)
    curve = layer_curve(fs, dataclasses.replace(fast_config, n_boot=0))
    assert all(ci is None for entry in curve.values() for ci in entry["auroc_ci"])


def test_vectorised_bootstrap_equals_the_per_candidate_loop(make_features, fast_config):
    import numpy as np

    from interp.stats import task_resamples
    from probes.metrics import auroc
    from probes.nested_cv import _candidate_cis

    fs = make_features(n_tasks=10, seed=3)
    scores = np.random.default_rng(0).normal(size=(5, fs.y.size))
    draws = []
    for rows in task_resamples(fs.groups, fast_config.n_boot, fast_config.rng("layer_curve_bootstrap")):
        values = [auroc(fs.y[rows], s[rows]) for s in scores]
        if all(v is not None for v in values):
            draws.append(values)
    expected = np.percentile(np.array(draws), [2.5, 97.5], axis=0).T
    np.testing.assert_allclose(np.array(_candidate_cis(fs, scores, fast_config)), expected, atol=1e-12)
