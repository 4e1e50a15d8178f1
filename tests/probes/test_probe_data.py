"""FeatureSet validation, missing labels and CV feasibility errors."""

import numpy as np
import pytest

from probes import FeatureSet

pytestmark = pytest.mark.unit


def test_nan_features_name_key_and_rows(make_features):
    fs = make_features()
    X = fs.features[1, "mean"].copy()
    X[[3, 7], 0] = np.nan
    X[9, 2] = np.inf
    with pytest.raises(ValueError, match=r"features\[\(1, 'mean'\)\]: 3 of 72 rows contain NaN or inf"):
        FeatureSet({**fs.features, (1, "mean"): X}, fs.y, fs.groups, fs.sample_ids)


def test_misaligned_shapes(make_features):
    fs = make_features()
    with pytest.raises(ValueError, match="one entry per sample"):
        FeatureSet(fs.features, fs.y[:-1], fs.groups, fs.sample_ids)
    with pytest.raises(ValueError, match=r"features\[\(0, 'last'\)\] has shape \(71, 16\)"):
        FeatureSet({**fs.features, (0, "last"): fs.features[0, "last"][:-1]}, fs.y, fs.groups, fs.sample_ids)


def test_bad_labels_and_keys(make_features):
    fs = make_features()
    with pytest.raises(ValueError, match=r"only 0, 1 and -1"):
        FeatureSet(fs.features, np.where(fs.y == 1, 2, 0), fs.groups, fs.sample_ids)
    with pytest.raises(ValueError, match="must be integers"):
        FeatureSet(fs.features, fs.y.astype(float), fs.groups, fs.sample_ids)
    with pytest.raises(ValueError, match="keys must be"):
        FeatureSet({"last": fs.features[0, "last"]}, fs.y, fs.groups, fs.sample_ids)


def test_drop_missing_counts_and_lists(make_features):
    fs = make_features()
    y = fs.y.copy()
    y[[0, 5, 40]] = -1
    labelled, excluded = FeatureSet(fs.features, y, fs.groups, fs.sample_ids).drop_missing()
    assert excluded == [fs.sample_ids[i] for i in (0, 5, 40)]
    assert len(labelled.sample_ids) == 69 and set(labelled.y) == {0, 1}
    assert labelled.features[2, "last"].shape == (69, 16)


def test_check_cv_errors(make_features):
    fs = make_features(n_tasks=4)
    with pytest.raises(ValueError, match="4 distinct tasks but the outer CV needs at least 5"):
        fs.check_cv(5)
    one_class = FeatureSet(fs.features, np.zeros_like(fs.y), fs.groups, fs.sample_ids)
    with pytest.raises(ValueError, match=r"only one class present \(y=0: 24, y=1: 0\)"):
        one_class.check_cv(2)
    y = fs.y.copy()
    y[0] = -1
    with pytest.raises(ValueError, match="call drop_missing"):
        FeatureSet(fs.features, y, fs.groups, fs.sample_ids).check_cv(2)
