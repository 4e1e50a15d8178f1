"""``interp entropy --rho 0.5`` then ``interp figures`` and report.md on the tiny model: what they print about the
run (rho, the token limit) is read from the run's record beside its table, not from ICLR's defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from interp.extraction.entropy import IclrConfig
from interp.pipelines.cli import app
from interp.record import config_from
from interp.reporting.report import write_report

pytestmark = pytest.mark.e2e

MINI = Path(__file__).resolve().parents[2] / "tests" / "data" / "mini.jsonl"


def _run(*args: object) -> str:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def test_entropy_at_rho_half_is_reported_at_rho_half(tmp_path, cached_model):
    results = tmp_path / "results"
    table = results / "iclr" / "iclr_blocks.csv"
    _run("entropy", "--trajectories", MINI, "--out", table, "--model", "tiny-qwen3.5", "--rho", 0.5,
         "--max-tokens", 3000)
    record = json.loads(table.with_suffix(".json").read_text())
    assert config_from(IclrConfig, record["config"]) == IclrConfig(rho=0.5, max_tokens=3000)  # the record is what ran
    assert record["provenance"]["model"] == "tiny-qwen3.5" and record["provenance"]["dtype"] == "float32"
    assert set(record["provenance"]["inputs"]) == {"trajectories"} and pd.read_csv(table)["dropped"].any()
    assert IclrConfig().rho != 0.5 and IclrConfig().max_tokens != 3000  # the defaults differ from what ran

    _run("figures", results, "--no-png")
    html = (results / "figures" / "fig6_iclr.html").read_text(encoding="utf-8")
    assert "rho = 0.5" in html and f"rho = {IclrConfig().rho}" not in html
    assert "3000-token limit" in html and f"{IclrConfig().max_tokens}-token" not in html
    report = write_report(results, {}, {}, {"model": "tiny-qwen3.5", "full": False}).read_text()
    assert "| ICLR statistic (rho = 0.5) | value |" in report and f"rho = {IclrConfig().rho}" not in report
    assert "over the 3000-token limit" in report and "42K" not in report
    assert "rho = 0.5, context = online, compare_full = True, max_tokens = 3000; model `tiny-qwen3.5`" in report
