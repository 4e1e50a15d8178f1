"""Model-dependent conditions get what they need from the sensor, so every condition extracts through the CLI path."""

from __future__ import annotations

import pytest

from interp.data.conditions import apply_condition
from interp.extraction.batch import condition_params, extract_to_store
from interp.extraction.extract import ExtractConfig
from interp.extraction.store import Store

pytestmark = pytest.mark.e2e


def test_condition_params_bind_scorers_and_tokenizer(tiny_sensor):
    params = condition_params(tiny_sensor, ["full", "iclr", "iclr_step_only", "random", "iclr"], 100)
    assert sorted(params) == ["iclr", "iclr_step_only", "random"]
    assert params["iclr"]["scorer"].context == "online" and params["iclr"]["scorer"].max_tokens == 100
    assert params["iclr_step_only"]["scorer"].context == "step_only"
    assert params["random"]["tokenizer"] is tiny_sensor.tokenizer
    assert condition_params(tiny_sensor, ["full", "delete_all_reasoning"]) == {}


def test_every_model_dependent_condition_extracts(tiny_sensor, mini_trajectory, tmp_path):
    conditions = ["iclr", "iclr_step_only", "random"]
    params = condition_params(tiny_sensor, conditions)
    config = ExtractConfig(layers=[0, 3], poolings=["last"])
    counts = extract_to_store(tiny_sensor, [mini_trajectory], conditions, config, tmp_path / "store",
                              condition_params=params)
    frame = Store(tmp_path / "store").manifest()
    assert set(frame["condition"]) == set(conditions), counts
    b = mini_trajectory.n_steps
    # the random condition removed tokens of the sensor's tokenizer: the same edit as applying it by hand
    _, log = apply_condition("random", mini_trajectory, b, tokenizer=tiny_sensor.tokenizer)
    row = frame[(frame["condition"] == "random") & (frame["after_step"] == b)].iloc[0]
    assert row["chars_removed"] == log.chars_removed > 0


def test_worker_params_keep_the_given_ones_and_build_the_model_ones_once(tiny_sensor, monkeypatch):
    """On a worker: the caller's plain parameters survive, the model-dependent ones come from the worker's sensor."""
    import interp.extraction.batch as batch

    calls = []
    real = batch.condition_params
    monkeypatch.setattr(batch, "condition_params", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    params = batch.condition_params_factory(4096, {"random": {"r": 0.4, "seed": 3}})
    got = params(tiny_sensor, "random")
    assert got["r"] == 0.4 and got["seed"] == 3 and got["tokenizer"] is tiny_sensor.tokenizer
    assert params(tiny_sensor, "random") == got and calls == [["random"]]
    assert params(tiny_sensor, "full") is None
