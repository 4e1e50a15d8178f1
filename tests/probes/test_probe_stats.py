"""Task bootstrap, the across-task permutation test and the control task."""

import dataclasses

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from probes import (
    control_task,
    layer_curve,
    permutation_test,
    permute_labels_across_tasks,
    run_nested_cv,
    task_bootstrap,
)
from probes.metrics import auroc

pytestmark = pytest.mark.unit


def test_bootstrap_ci_contains_estimate_and_counts_skips(make_features, fast_config):
    fs = make_features(n_tasks=15, signal_key=(2, "mean"), signal=1.0, seed=1)
    oof = run_nested_cv(fs, fast_config).oof
    y, score, groups = oof["y"].to_numpy(), oof["score"].to_numpy(), oof["task_id"].to_numpy()
    boot = task_bootstrap(y, score, groups, {"auroc": auroc}, 300, np.random.default_rng(0))
    low, high = boot.cis["auroc"]
    assert low <= roc_auc_score(y, score) <= high and boot.n_used == 300
    # Two tasks, one per class: a resample drawing the same task twice has one class.
    y2 = np.array([0, 0, 1, 1])
    boot = task_bootstrap(y2, np.arange(4.0), np.array(["a", "a", "b", "b"]), {"auroc": auroc}, 200,
                          np.random.default_rng(0))
    assert 60 < boot.n_skipped < 140 and boot.cis["auroc"] == [1.0, 1.0]


def test_permutation_moves_whole_task_patterns():
    groups = np.repeat(["a", "b", "c", "d", "e", "f"], 5)
    y = np.repeat([1, 1, 0, 0, 0, 1], 5)
    rng = np.random.default_rng(0)
    draws = [permute_labels_across_tasks(y, groups, rng) for _ in range(20)]
    for permuted in draws:
        for task in np.unique(groups):
            assert np.unique(permuted[groups == task]).size == 1  # task-constant labels stay task-constant
        assert permuted.sum() == y.sum()
    assert any((permuted != y).any() for permuted in draws)


def test_permutation_p_small_for_signal_not_for_noise(make_features, fast_config):
    signal = make_features(n_tasks=12, signal_key=(1, "last"), signal=2.0)
    result = permutation_test(signal, fast_config)
    assert result.p_value == 0.05  # n_perm = 19: the smallest possible p
    curve = layer_curve(signal, fast_config)  # the same scan on the real labels
    # Rows are fitted independently, so the real labels score as when fitted alone.
    assert result.observed == pytest.approx(max(max(c["auroc"]) for c in curve.values()), abs=1e-9)
    by_key = [curve[pooling]["auroc"][curve[pooling]["layers"].index(layer)] for layer, pooling in signal.keys]
    np.testing.assert_allclose(result.candidate_auroc, by_key, atol=1e-9)
    noise = make_features(n_tasks=12, seed=5)
    assert permutation_test(noise, fast_config).p_value > 0.2
    # Task identity in the features and task-constant labels: no signal that transfers across tasks.
    clustered = make_features(n_tasks=12, task_identity=3.0, task_constant_labels=True, seed=2)
    result = permutation_test(clustered, fast_config)
    assert result.p_value > 0.2 and result.null.shape == (19,)


def test_control_task_is_near_chance(make_features, fast_config):
    fs = make_features(n_tasks=15, signal_key=(2, "mean"), signal=2.0, seed=1)
    real = run_nested_cv(fs, fast_config).auroc
    control = control_task(fs, dataclasses.replace(fast_config, seed=1)).auroc
    assert control < 0.7 and real - control > 0.2
