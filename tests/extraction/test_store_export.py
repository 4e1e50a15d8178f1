"""``Store.to_xarray`` / ``to_pandas`` against ``load_features`` and the manifest they are built from."""

from __future__ import annotations

import numpy as np
import pytest

from interp.extraction.batch import extract_to_store
from interp.extraction.extract import ExtractConfig
from interp.extraction.store import Store

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def store(tiny_sensor, mini_trajectory, tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    config = ExtractConfig(layers=[0, 3, 7], sites=["resid_pre"], poolings=["last", "mean_reasoning"])
    extract_to_store(tiny_sensor, [mini_trajectory], ["full", "delete_latest_reasoning"], config, root,
                     boundaries=[1, 2], progress=False)
    return Store(root)


def test_to_xarray_matches_load_features(store):
    array = store.to_xarray()
    frame, features = store.load_features()
    assert array.dims == ("sample", "layer", "pooling", "d_model")
    assert array.shape == (len(frame), 3, 2, 64) and len(frame) == 4
    assert list(array["sample"].values) == list(frame["sample_id"])
    for c in ("task_id", "after_step", "condition", "future_necessity", "externalization_gap"):
        assert list(array[c].values) == list(frame[c]), c
    for (layer, pooling), x in features.items():
        np.testing.assert_array_equal(array.sel(layer=layer, pooling=pooling).values, x)
    assert not np.allclose(array.sel(layer=0).values, array.sel(layer=7).values)
    one = store.to_xarray(condition="full")
    assert set(one["condition"].values) == {"full"} and one.shape[0] == 2


def test_to_pandas_is_the_same_numbers_row_per_sample_layer_pooling(store):
    array = store.to_xarray()
    frame = store.to_pandas()
    assert len(frame) == 4 * 3 * 2
    row = frame[(frame["sample_id"] == array["sample"].values[1]) & (frame["layer"] == 3)
                & (frame["pooling"] == "mean_reasoning")]
    assert len(row) == 1 and row["condition"].item() == array["condition"].values[1]
    np.testing.assert_array_equal(row[[f"d{i}" for i in range(64)]].to_numpy()[0],
                                  array.sel(layer=3, pooling="mean_reasoning").values[1])
