"""Small contracts of ``extract_trajectory``'s arguments (order, duplicates, empty requests)."""

from __future__ import annotations

import pytest

from interp.extraction.extract import ExtractConfig, extract_trajectory
from interp.data.render import render


def _config() -> ExtractConfig:
    return ExtractConfig(layers=[0], poolings=["last"])


def test_boundaries_keep_their_order_and_duplicates(tiny_sensor, mini_trajectory):
    rows = extract_trajectory(tiny_sensor, mini_trajectory, "full", _config(), boundaries=[3, 1, 3])
    assert [r.after_step for r in rows] == [3, 1, 3]
    for r in rows:
        assert r.n_tokens == render(mini_trajectory, r.after_step, tiny_sensor.tokenizer).n_tokens


def test_boundary_out_of_range_is_refused(tiny_sensor, mini_trajectory):
    with pytest.raises(ValueError, match="out of range"):
        extract_trajectory(tiny_sensor, mini_trajectory, "full", _config(), boundaries=[mini_trajectory.n_steps + 1])


def test_empty_boundary_list_extracts_nothing(tiny_sensor, mini_trajectory):
    assert extract_trajectory(tiny_sensor, mini_trajectory, "full", _config(), boundaries=[]) == []
