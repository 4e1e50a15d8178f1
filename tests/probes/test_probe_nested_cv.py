"""Nested CV: no task leakage, selection finds planted signal, fold bookkeeping, failure modes."""

import dataclasses
import importlib
import warnings

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import KFold, cross_val_predict

from probes import LinearProbe, layer_curve, run_nested_cv
from probes.splits import grouped_splits

pytestmark = pytest.mark.unit

nested_cv_module = importlib.import_module("probes.nested_cv")
scan_module = importlib.import_module("probes.scan")


def test_task_identity_does_not_leak(make_features, fast_config):
    # Features encode the task, labels are constant within a task: nothing generalises to new tasks.
    fs = make_features(n_tasks=30, per_task=4, d=64, task_identity=3.0, task_constant_labels=True, seed=3)
    result = run_nested_cv(fs, fast_config)
    assert result.auroc < 0.7
    X = fs.features[0, "last"]
    naive = cross_val_predict(
        LinearProbe(), X, fs.y, cv=KFold(5, shuffle=True, random_state=0), method="decision_function"
    )
    assert roc_auc_score(fs.y, naive) > 0.9


@pytest.mark.parametrize("outer", ["kfold", "loto"])
def test_no_task_on_both_sides_of_any_split(make_features, fast_config, monkeypatch, outer):
    calls = []

    def recording_splits(y, groups, n_splits, seed):
        splits = grouped_splits(y, groups, n_splits, seed)
        calls.append((np.asarray(groups), splits))
        return splits

    monkeypatch.setattr(nested_cv_module, "grouped_splits", recording_splits)
    monkeypatch.setattr(scan_module, "grouped_splits", recording_splits)
    fs = make_features(n_tasks=8, signal_key=(1, "last"), signal=2.0)
    config = dataclasses.replace(fast_config, outer=outer)
    result = run_nested_cv(fs, config)
    layer_curve(fs, config)
    n_outer = 8 if outer == "loto" else 5
    assert len(calls) == 1 + n_outer + 1  # outer, one inner per outer fold (in order, n_jobs=1), scan
    for groups, splits in calls:
        for train, test in splits:
            assert not set(groups[train]) & set(groups[test])
            assert len(train) + len(test) == len(groups)
    outer_groups, outer_splits = calls[0]
    for (train, test), (inner_groups, _), fold in zip(outer_splits, calls[1:], result.folds):
        assert set(inner_groups) == set(outer_groups[train])  # inner CV sees only the training tasks
        assert set(fold["test_tasks"]) == set(outer_groups[test])


def test_planted_signal_is_found(make_features, fast_config):
    fs = make_features(n_tasks=15, signal_key=(2, "mean"), signal=2.0, seed=1)
    result = run_nested_cv(fs, fast_config)
    assert result.auroc > 0.85
    chosen = [(f["layer"], f["pooling"]) for f in result.folds]
    assert chosen.count((2, "mean")) >= 4
    curve = layer_curve(fs, fast_config)
    assert curve["mean"]["layers"] == [0, 1, 2, 3]
    assert np.argmax(curve["mean"]["auroc"]) == 2
    assert set(result.oof["sample_id"]) == set(fs.sample_ids)


def test_full_search_and_fold_records(make_features, fast_config):
    fs = make_features(n_tasks=10, signal_key=(3, "last"), signal=2.0, layers=(0, 3))
    result = run_nested_cv(fs, dataclasses.replace(fast_config, search="full"))
    fold = result.folds[0]
    assert set(fold) == {
        "fold", "test_tasks", "n_train", "n_test", "layer", "pooling", "standardize", "pca", "C",
        "threshold", "inner_auroc", "auroc", "n_inner_skipped",
    }
    assert fold["pca"] in (None, 4) and fold["C"] in (0.1, 1.0)
    oof = result.oof
    assert (oof["pred"] == (oof["score"] >= oof["threshold"]).astype(int)).all()


def test_loto_fold_auroc_is_none_for_one_class_task(make_features, fast_config):
    fs = make_features(n_tasks=6, task_constant_labels=True, signal_key=(0, "last"), signal=3.0)
    config = dataclasses.replace(fast_config, outer="loto", n_inner=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = run_nested_cv(fs, config)
    assert len(result.folds) == 6 and all(f["auroc"] is None for f in result.folds)
    assert result.auroc > 0.5


def test_one_class_inner_folds_are_skipped_with_a_counted_warning(make_features, fast_config):
    # 10 tasks, labels constant within a task: some inner test folds hold a single task, hence one class.
    fs = make_features(n_tasks=10, task_constant_labels=True, signal_key=(0, "last"), signal=3.0)
    config = dataclasses.replace(fast_config, n_outer=2, n_inner=3)
    with pytest.warns(UserWarning, match=r"outer fold \d: \d of 3 inner folds skipped"):
        result = run_nested_cv(fs, config)
    assert sum(f["n_inner_skipped"] for f in result.folds) > 0


def test_no_usable_inner_fold_names_the_outer_fold(make_features, fast_config):
    # 4 tasks, task-constant labels, n_inner=3 on 3 training tasks: every inner test fold is one task.
    fs = make_features(n_tasks=4, task_constant_labels=True)
    config = dataclasses.replace(fast_config, outer="loto", n_inner=3)
    with pytest.raises(ValueError, match=r"outer fold 0: none of its 3 inner folds has both classes"):
        run_nested_cv(fs, config)


def test_cv_feasibility_errors(make_features, fast_config):
    with pytest.raises(ValueError, match="4 distinct tasks but the outer CV needs at least 5"):
        run_nested_cv(make_features(n_tasks=4), fast_config)
    fs = make_features()
    one_class = dataclasses.replace(fs, y=np.ones_like(fs.y))
    with pytest.raises(ValueError, match="only one class present"):
        run_nested_cv(one_class, fast_config)
