"""run_probe end to end, the written files, and agreement of reported metrics with scikit-learn on the CSV."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import average_precision_score, balanced_accuracy_score, roc_auc_score

from probes import FeatureSet, ProbeConfig, oof_frame, run_probe, write_probe_results
from probes.stats import STATISTICS

pytestmark = pytest.mark.parity


def test_run_probe_writes_consistent_files(make_features, fast_config, tmp_path):
    fs = make_features(n_tasks=12, signal_key=(2, "mean"), signal=1.5)
    y = fs.y.copy()
    y[[1, 30]] = -1
    # the default statistic: the headline nested-CV AUROC itself, at 9 permutations (smallest p 0.1)
    config = dataclasses.replace(fast_config, permutation=ProbeConfig().permutation, n_perm=9)
    result = run_probe(FeatureSet(fs.features, y, fs.groups, fs.sample_ids), config)
    json_path, csv_path = write_probe_results(result, oof_frame(result), tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["oof_predictions.csv", "probe_results.json"]

    saved = json.loads(json_path.read_text())
    oof = pd.read_csv(csv_path)
    assert list(oof.columns) == ["sample_id", "task_id", "y", "score", "fold", "threshold", "pred"]
    assert saved["n_excluded"] == 2 and saved["excluded"] == [fs.sample_ids[1], fs.sample_ids[30]]
    assert saved["n_samples"] == len(oof) == 70 and saved["n_tasks"] == 12
    assert saved["n_positive"] == int(oof["y"].sum())
    assert saved["auroc"] == pytest.approx(roc_auc_score(oof["y"], oof["score"]), abs=1e-9)
    assert saved["ap"] == pytest.approx(average_precision_score(oof["y"], oof["score"]), abs=1e-9)
    assert saved["balanced_accuracy"] == pytest.approx(balanced_accuracy_score(oof["y"], oof["pred"]), abs=1e-9)
    for fold in saved["folds"]:
        rows = oof[oof["fold"] == fold["fold"]]
        assert set(rows["task_id"]) == set(fold["test_tasks"])
        np.testing.assert_allclose(rows["threshold"], fold["threshold"])
    low, high = saved["auroc_ci"]
    assert low <= saved["auroc"] <= high
    assert saved["selectivity"] == pytest.approx(saved["auroc"] - saved["control_auroc"])
    assert saved["permutation_statistic"] == STATISTICS["nested"] and saved["config"]["permutation"] == "nested"
    assert saved["permutation_observed"] == saved["auroc"]  # the p-value is the headline's
    null = np.array(saved["permutation_null"])
    assert len(null) == 9 and saved["permutation_p_min"] == pytest.approx(0.1)
    assert saved["permutation_p"] == pytest.approx((1 + np.sum(null >= saved["auroc"])) / 10)
    assert set(saved["layer_curve"]) == {"last", "mean"}
    assert saved["config"]["n_perm"] == 9 and saved["schema_version"] == 1
    assert set(saved) - {"schema"} <= set(saved["schema"]) and "oof" not in saved


def test_failed_write_leaves_nothing_behind(make_features, fast_config, tmp_path):
    result = {"auroc": float("nan")}
    oof = pd.DataFrame(columns=["sample_id", "task_id", "y", "score", "fold", "threshold", "pred"])
    with pytest.raises(ValueError):
        write_probe_results(result, oof, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_run_probe_failure_modes(make_features, fast_config):
    fs = make_features()
    y = np.where(fs.y == 1, -1, 0)  # every positive label missing: one class left after exclusion
    with pytest.raises(ValueError, match=r"only one class present \(y=0: 36, y=1: 0\)"):
        run_probe(FeatureSet(fs.features, y, fs.groups, fs.sample_ids), fast_config)
    few = make_features(n_tasks=3)
    with pytest.raises(ValueError, match="3 distinct tasks but the outer CV needs at least 5"):
        run_probe(few, fast_config)
