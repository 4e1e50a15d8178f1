"""Controlled continuations end to end on real SmolLM2 (the fallback template): the slow end-to-end tier."""

from __future__ import annotations

import pytest

from interp.continuations import generation
from interp.continuations.run import RunSettings, continue_states
from interp.data.render import render

from .test_ext_interventions import mini_states

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

__all__ = ["mini_states"]


def test_end_to_end_on_smollm2(tmp_path, smol_sensor, mini_trajectory, mini_states):
    """The fallback (no tool support) template end to end; kept small: SmolLM2 prefill is seconds per prompt on CPU."""
    settings = RunSettings(conditions=("full", "hide_observation"), samples=0, max_new_tokens=24, seed=0)
    doc = continue_states(smol_sensor, mini_states, [mini_trajectory], tmp_path, settings, progress=False)
    assert set(doc["summary"]) == set(settings.conditions)
    assert all(row["n_generations"] == 2 for row in doc["summary"].values())
    assert doc["summary"]["hide_observation"]["reacquisition_rate"] is not None
    for cond, row in doc["summary"].items():
        assert row["parse_failures"] == sum(r["parse_failure"] for r in doc["rows"] if r["condition"] == cond)
    ids = render(mini_trajectory, 1, smol_sensor.tokenizer).input_ids
    sampled = [generation.generate_turn(smol_sensor, ids, 12, seed=7)["text"] for _ in range(2)]
    assert sampled[0] == sampled[1]
