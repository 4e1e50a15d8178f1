"""Patching settings check themselves on construction: each bad value is refused naming its field (the CLI's
``build()`` turns the field into its option), and a stage called from Python gives the same error."""

from __future__ import annotations

import pytest

from interp.pipelines.cli.common import build
from patching.config import HarmConfig, PatchConfig

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("cls, field, value, words", [
    (PatchConfig, "condition", "nope", ("condition", "'nope'")),
    (PatchConfig, "site", "nope", ("site", "'nope'", "resid_pre")),
    (PatchConfig, "method", "slow", ("method", "'slow'", "fast, reference")),
    (PatchConfig, "positions", 0, ("positions", ">= 1", "0")),
    (PatchConfig, "max_tokens", True, ("max_tokens", "True")),
    (HarmConfig, "max_k", 0, ("max_k", ">= 1")),
    (HarmConfig, "budget", -1, ("budget", ">= 0", "-1")),
    (HarmConfig, "units", "nope", ("units", "nope", "reasoning")),
    (HarmConfig, "margin", float("nan"), ("margin", "nan")),
    (HarmConfig, "margin", -0.1, ("margin", "-0.1")),
])
def test_a_bad_value_names_its_field_and_the_cli_its_option(cls, field, value, words):
    with pytest.raises(ValueError) as caught:
        cls(**{field: value})
    assert all(w in str(caught.value) for w in words), str(caught.value)
    with pytest.raises(ValueError, match=f"^--{field.replace('_', '-')}: "):
        build(cls, **{field: value})


def test_good_values_are_kept_and_units_normalised():
    assert HarmConfig(units="reasoning, step,reasoning").units == ("reasoning", "step")
    assert HarmConfig(units=["observation"], margin=0).margin == 0
    assert PatchConfig(site="mlp_out", method="reference", positions=3).positions == 3


def test_the_stage_gives_the_cli_error_before_any_work(tmp_path):
    from interp.pipelines import stages

    with pytest.raises(ValueError, match="method: must be one of fast, reference, attribution, got 'slow'"):
        stages.patch(None, [], tmp_path / "out", PatchConfig(method="slow"))
    with pytest.raises(ValueError, match="units: .*unknown unit kind"):
        stages.harm(None, [], tmp_path / "out", HarmConfig(units="nope"))
    assert not (tmp_path / "out").exists()
