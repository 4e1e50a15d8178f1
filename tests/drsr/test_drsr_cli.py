"""``interp drsr`` on the tiny model: drsr.json with its schema, the four figures, the report section; refused
options name themselves before anything is written; a re-run reuses the per-boundary parts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from interp.pipelines.cli import app, main

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "data" / "demo" / "trajectories.jsonl"
TINY = "tiny-qwen3.5"


def _boundaries(n: int) -> str:
    from interp.data.trajectory import load_trajectories
    from patching.harm import default_boundaries

    trajs = sorted(load_trajectories(DEMO), key=lambda t: t.n_steps)
    return ",".join(default_boundaries(trajs)[:n])


def test_drsr_writes_its_result_figures_and_report_section(tmp_path):
    from interp.reporting.figures import FIGURES, load_result
    from interp.reporting.report import drsr_report_section

    out = tmp_path / "drsr"
    args = ["drsr", "--trajectories", str(DEMO), "--out", str(out), "--model", TINY, "--boundaries", _boundaries(3),
            "--max-k", "2", "--budget", "1", "--n-boot", "20"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = load_result(out / "drsr.json")  # checked against patching.drsr.FIELDS
    assert len(doc["boundaries"]) == 3 and doc["units"] == ["reasoning", "observation", "tool_exchange", "step"]
    from patching.drsr import drsr_records

    records, _ = drsr_records(out)  # relations read the sets of DRSR's block kinds only, never a whole step
    blocks = {r["task_id"] for r in records for s in r["sets"]
              if len(s["members"]) > 1 and all(m[0] != "step" for m in s["members"])}
    assert doc["relations"]["n_tasks"] == len(blocks) >= 2 and set(doc["relations"]["families"]) == {
        "relation", "block", "mismatched", "state", "surface"}
    assert len(doc["relations"]["families"]["relation"]) == doc["model"]["n_layers"]
    assert doc["granularity"]["step_range"]["n_states"] == 3
    assert [e["layer"] for e in doc["attention_density"]["layers"]] == [3, 7]
    for spec in FIGURES:
        if spec.source == "drsr/drsr.json":
            spec.build(doc)
    lines = drsr_report_section(doc, out)
    assert any("step-harm range" in line and "0.312" in line for line in lines)
    parts = sorted((out / "parts").rglob("*.json"))
    again = CliRunner().invoke(app, args)  # resumes: every boundary's part is reused
    assert again.exit_code == 0 and sorted((out / "parts").rglob("*.json")) == parts


@pytest.mark.parametrize("extra, named", [(["--units", "reasoning,blocks"], "blocks"), (["--layer", "99"], "--layer"),
                                          (["--proj-dim", "-1"], "--proj-dim")])
def test_drsr_refuses_bad_options(monkeypatch, capsys, tmp_path, extra, named):
    monkeypatch.setattr(sys, "argv", ["interp", "drsr", "--trajectories", str(DEMO), "--out", str(tmp_path / "d"),
                                      "--model", TINY, *extra])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip() and "Loading weights" not in x and "%|" not in x]
    assert exc.value.code == 2 and len(lines) == 1 and "Traceback" not in err and named in lines[0], err
    assert not (tmp_path / "d").exists()
