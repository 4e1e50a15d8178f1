"""Layer numbering: 0-based everywhere, a ``1based:`` form in the one layer parser, both in ``interp models``."""

from __future__ import annotations

import warnings

import pytest

from interp.extraction.batch import parse_layers

pytestmark = pytest.mark.unit

QWEN9B_FULL = [3, 7, 11, 15, 19, 23, 27, 31]  # 0-based; the study's 4, 8, ..., 32


def test_one_based_form_subtracts_one():
    assert parse_layers("1based:4,8,12,16,20,24,28,32", 32, QWEN9B_FULL) == QWEN9B_FULL
    assert parse_layers("1based:1-3,8", 8, [3, 7]) == [0, 1, 2, 7]
    assert parse_layers("0,4,8", 32, QWEN9B_FULL) == [0, 4, 8]
    with pytest.raises(ValueError, match=r"\[0\] out of range 1..8 \(1-based\)"):
        parse_layers("1based:0,4", 8, [3, 7])
    with pytest.raises(ValueError, match=r"\[32\] out of range 0..31 \(0-based; use 1based"):
        parse_layers("4,8,12,16,20,24,28,32", 32, QWEN9B_FULL)  # the study's numbering typed as 0-based


def test_study_numbering_typed_as_zero_based_warns():
    with pytest.warns(UserWarning, match="numbered from 1.*1based:4,8"):
        assert parse_layers("4,8", 9, [3, 7]) == [4, 8]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parse_layers("3,7", 8, [3, 7])
        parse_layers("1based:4,8", 8, [3, 7])


def test_layers_help_says_zero_based():
    from typer.testing import CliRunner

    from interp.pipelines.cli import app

    for command in ("extract", "patch"):
        out = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"}).output
        assert "0-based" in " ".join(out.split()) and "1based:4,8,32" in " ".join(out.split()), command


def test_models_prints_full_attention_layers_in_both_numberings():
    from typer.testing import CliRunner

    from interp.pipelines.cli import app
    from interp.sensor.models import SPECS

    out = CliRunner().invoke(app, ["models"]).output
    if SPECS["tiny-qwen3.5"].resolve():
        assert "3,7 | 4,8 (of 8)" in out
    if SPECS["smollm2-135m"].resolve():
        assert "all 30: 0-29 | 1-30" in out
