"""``interp tokens`` end to end on the tiny model's tokenizer: tokens.json with a paired run, and bad input refused
with one line naming the option before anything is written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from interp.accounting.tokens import FIELDS
from interp.pipelines.cli import main
from interp.schema import check

pytestmark = pytest.mark.e2e

MINI = Path(__file__).resolve().parents[1] / "data" / "mini.jsonl"


def run(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["interp", "tokens", *map(str, args)])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main()
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_tokens_writes_the_document_with_a_paired_run(monkeypatch, capsys, tmp_path):
    from interp.data.trajectory import load_trajectories

    traj = load_trajectories(MINI)[0]
    table = pd.DataFrame([{"task_id": traj.task_id, "context": "online", "step": t, "block": b,
                           "mean_entropy_bits": float(b)} for t, s in enumerate(traj.steps, 1)
                          for b in range(len(s.blocks))])
    table.to_csv(tmp_path / "blocks.csv", index=False)
    code, out, err = run(monkeypatch, capsys, "--trajectories", MINI, "--out", tmp_path / "o", "--tokenizer",
                         "tiny-qwen3.5", "--policies", "full,iclr,iclr_step_only,sliding_window:k=1",
                         "--entropy", tmp_path / "blocks.csv", "--paired", MINI, "--paired-policy", "iclr")
    assert code in (0, None), err
    doc = check(json.loads((tmp_path / "o" / "tokens.json").read_text()), FIELDS, "tokens.json")
    assert doc["policies"] == ["full", "iclr", "sliding_window:k=1"]
    assert [s["policy"] for s in doc["skipped"]] == ["iclr_step_only"]  # no step_only rows in the table
    assert doc["pair"]["n_tasks"] == 1 and doc["pair"]["amplification"] == 1.0  # the same run: only the removal
    iclr = next(r for r in doc["totals"] if r["policy"] == "iclr")
    assert iclr["direct_removal_tokens"] > 0 and "iclr: " in out and "amplification 1.00" in out


@pytest.mark.parametrize("args, option", [
    (["--policies", "random:r=0.3"], "--policies"),
    (["--policies", "sliding_window:k=0"], "--policies"),
    (["--paired-policy", "nope"], "--paired-policy"),
    (["--cache-block", "0"], "--cache-block"),
    (["--entropy", "MISSING_COLUMNS"], "--entropy"),
])
def test_bad_input_is_one_line_and_writes_nothing(monkeypatch, capsys, tmp_path, args, option):
    (tmp_path / "bad.csv").write_text("task_id,step\nx,1\n")
    args = [str(tmp_path / "bad.csv") if a == "MISSING_COLUMNS" else a for a in args]
    code, _, err = run(monkeypatch, capsys, "--trajectories", MINI, "--out", tmp_path / "o", "--tokenizer",
                       "tiny-qwen3.5", *args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and option in lines[0] and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()
