"""``--shard I/N`` for harm and patch on the command line, ``interp merge`` of their part folders (refusing an
incomplete set unless ``--allow-partial``), and the unsharded re-run on the merged folder: the same result
file as one unsharded run, nothing recomputed.

Reference: one unsharded ``interp harm`` / ``interp patch`` run of the same request.
"""

from __future__ import annotations

import json
import traceback
from pathlib import Path

import pytest
from typer.testing import CliRunner

from interp.pipelines.cli import app

pytestmark = pytest.mark.e2e

MINI = Path(__file__).resolve().parents[2] / "tests" / "data" / "mini.jsonl"
RUNNER = CliRunner()


def cli(*args, code: int = 0):
    result = RUNNER.invoke(app, [str(a) for a in args])
    if result.exit_code != code:
        detail = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else ""
        pytest.fail(f"interp {' '.join(map(str, args))} -> exit {result.exit_code}\n{result.output}\n{detail}")
    return result


@pytest.mark.parametrize("command, extra, result", [
    ("harm", ["--boundaries", "mini-code-1@1,mini-code-1@3", "--max-k", "2", "--budget", "2"],
     "harm.json"),
    ("patch", ["--layers", "0,5", "--task-ids", "mini-code-1"], "kl_repair.json"),
])
def test_shards_merge_to_the_unsharded_result(tmp_path, command, extra, result):
    common = [command, "--trajectories", MINI, "--model", "tiny-qwen3.5", *extra]
    cli(*common, "--out", tmp_path / "ref")
    for i in range(2):
        cli(*common, "--out", tmp_path / f"s{i}", "--shard", f"{i}/2")
    assert not (tmp_path / "s0" / result).exists()  # a shard writes parts, no summary
    refused = RUNNER.invoke(app, ["merge", str(tmp_path / "m"), str(tmp_path / "s0")])
    units = json.loads(next((tmp_path / "s0").rglob("run.json")).read_text())["all_units"]
    if len(units) > 1:
        assert refused.exit_code != 0 and "incomplete set of shards" in str(refused.exception)
    merged = cli("merge", tmp_path / "m", tmp_path / "s0", tmp_path / "s1")
    assert "part folder(s) from 2 shard(s)" in merged.output
    parts = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "m").rglob("*.json")}
    cli(*common, "--out", tmp_path / "m")
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "m").rglob("*.json") if p.name in parts} == parts
    assert (tmp_path / "m" / result).read_bytes() == (tmp_path / "ref" / result).read_bytes()
