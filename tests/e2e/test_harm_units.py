"""``interp harm --units``: deletion units of any kind through the CLI, refused unit kinds."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from interp.data.trajectory import load_trajectories
from interp.pipelines.cli import app, main

from .test_cli_commands import MINI, TINY, one_error_line

pytestmark = pytest.mark.e2e


def test_harm_with_tool_exchange_units(tmp_path):
    out = tmp_path / "harm"
    result = CliRunner().invoke(app, ["harm", "--trajectories", str(MINI), "--out", str(out), "--model", TINY,
                                      "--units", "reasoning,tool_exchange", "--max-k", "2", "--budget", "2"])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "harm.json").read_text())
    (record,) = doc["boundaries"]
    traj = load_trajectories(MINI)[0]
    b = record["after_step"]
    assert doc["units"] == record["units"] == ["reasoning", "tool_exchange"] and doc["cardinalities"] == [1, 2]
    singles = {tuple(s["members"][0]) for s in record["sets"] if len(s["members"]) == 1}
    assert {u for u in singles if u[0] == "tool_exchange"} == {
        ("tool_exchange", t, k) for t in range(1, b + 1) for k in range(len(traj.steps[t - 1].action.calls))}
    assert record["target_tokens"] > 0 and record["target"]
    assert {(r["aggregator"], r["cardinality"]) for r in doc["aggregates"]} == {
        (a, k) for a in ("sum", "mean", "max", "min") for k in ("2", "all")}
    assert "units reasoning, tool_exchange" in result.output


def test_harm_refuses_an_unknown_unit_kind(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(sys, "argv", ["interp", "harm", "--trajectories", str(MINI), "--out", str(tmp_path / "h"),
                                      "--model", TINY, "--units", "reasoning,blocks"])
    with pytest.raises(SystemExit) as exc:
        main()
    line = one_error_line(exc.value.code, capsys.readouterr().err)
    assert "blocks" in line and "tool_exchange" in line
    assert not (tmp_path / "h").exists()
