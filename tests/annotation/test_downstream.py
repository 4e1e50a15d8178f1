"""The adjudicated labels file is what the risk analysis and the probe take (``--labels``), as written."""

from __future__ import annotations

import json
import traceback

import pytest
from typer.testing import CliRunner

from interp.annotation.server import open_app, plan
from interp.data.labels import read_labels_csv
from interp.pipelines.cli import app
from tests.annotation._support import record, step, write_jsonl

pytestmark = pytest.mark.e2e
N_TASKS, N_STEPS = 6, 4


def cli(*args) -> str:
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exit_code != 0:
        detail = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else ""
        pytest.fail(f"interp {' '.join(map(str, args))} -> {result.exit_code}\n{result.output}\n{detail}")
    return result.output


@pytest.fixture(scope="module")
def adjudicated(tmp_path_factory):
    """Two annotators (task both) who disagree on every third item, and an adjudication of their disagreements."""
    root = tmp_path_factory.mktemp("downstream")
    runs = write_jsonl(root / "runs.jsonl", [record(f"t{i}", [step(t) for t in range(1, N_STEPS + 1)])
                                            for i in range(N_TASKS)])
    sessions = [open_app(plan(runs, root / f"{name}.csv", name, "both")).session for name in ("alice", "bob")]
    for i, item in enumerate(sessions[0].queue):
        value = (i + item.after_step) % 2
        sessions[0].label(i, value, False)
        sessions[1].label(i, value ^ int(i % 3 == 0), False)
    adj = open_app(plan(runs, root / "adj.csv", "carol", "both", [root / "alice.csv", root / "bob.csv"])).session
    for i in range(len(adj.queue)):
        adj.label(i, i % 2, False)
    return runs, root / "adj.csv", adj


def test_the_risk_analysis_takes_the_adjudicated_file(adjudicated, tmp_path):
    runs, labels, adj = adjudicated
    g, y = (read_labels_csv(labels, f, None) for f in ("externalization_gap", "future_necessity"))
    assert len(g) == N_TASKS * N_STEPS and len(y) == N_TASKS * (N_STEPS - 1)  # agreed + adjudicated: complete
    cli("externalize", "risk", "--labels", labels, "--out", tmp_path, "--n-boot", 50)
    doc = json.loads((tmp_path / "externalization.json").read_text())
    shared = set(g) & set(y)
    n_g1 = sum(g[k] for k in shared)
    assert doc["p_y_given_g1"]["n"] == n_g1 and doc["p_y_given_g0"]["n"] == len(shared) - n_g1
    assert doc["p_y_given_g1"]["estimate"] == pytest.approx(sum(y[k] for k in shared if g[k]) / n_g1, abs=1e-4)


def test_the_probe_takes_the_adjudicated_file(adjudicated, tmp_path):
    runs, labels, _ = adjudicated
    cli("extract", "--trajectories", runs, "--store", tmp_path / "store", "--model", "tiny-qwen3.5",
        "--layers", "3", "--pooling", "last")
    cli("probe", "--store", tmp_path / "store", "--out", tmp_path / "probe", "--labels", labels,
        "--n-perm", 2, "--n-boot", 20, "--n-jobs", 1)
    doc = json.loads((tmp_path / "probe" / "probe_results.json").read_text())
    y = read_labels_csv(labels, "future_necessity")
    assert doc["n_samples"] == len(y) and doc["n_positive"] == sum(y.values())
