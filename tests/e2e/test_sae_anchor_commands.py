"""``interp sae-train``, ``interp extract --sae``, ``interp sae-probe`` and ``interp anchors`` end to end on the tiny
model (in a temporary directory): the SAE trained on a store's residuals loads in SAELens' layout, the store
extracted with it holds its features, the probe on them runs with its nulls, and anchors.json is written with
its record and read back by its figure."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from interp.pipelines.cli import app
from interp.reporting.figures import load_result
from interp.reporting.figures.anchors import anchors_figure, sae_figure
from interp.extraction.store import Store
from interp.sensor.sae import fvu, load_sae
from tests.conftest import DEMO, MINI

pytestmark = pytest.mark.e2e

RUNNER = CliRunner()
TINY = "tiny-qwen3.5"


def _cli(*args: object) -> str:
    result = RUNNER.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, f"interp {' '.join(map(str, args))}\n{result.output}\n{result.exc_info}"
    return result.output


@pytest.mark.slow  # two extractions with spliced forwards and a nested CV with nulls: ~25 s idle, ~70 s on a busy CPU
def test_sae_train_extract_and_probe(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    traj = tmp_path / "subset.jsonl"
    traj.write_text("".join(line + "\n" for line in DEMO.read_text(encoding="utf-8").splitlines()[:6]))
    _cli("extract", "--trajectories", traj, "--store", "store", "--model", TINY, "--layers", "3",
         "--pooling", "last", "--attention", "none", "--boundaries", "1,2")
    out = _cli("sae-train", "--store", "store", "--out", "sae", "--layer", 3, "--d-sae", 32, "--k", 4, "--steps", 50)
    assert "held-out" in out
    assert load_sae(tmp_path / "sae").site == ("resid_pre", 3)
    _cli("extract", "--trajectories", traj, "--store", "store_sae", "--model", TINY, "--layers", "3",
         "--pooling", "last", "--attention", "none", "--sae", "sae", "--sae-top-k", 8, "--boundaries", "1,2")
    _cli("sae-probe", "--store", "store_sae", "--out", "probe", "--trajectories", traj, "--n-outer", 3,
         "--n-inner", 2, "--n-perm", 3, "--n-boot", 20, "--n-jobs", 1, "--pca-grid", "none", "--no-baselines")
    doc = load_result(tmp_path / "probe" / "sae_probe.json")
    assert doc["probe"]["permutation_null"]
    _, features = Store(tmp_path / "store_sae").load_features("resid_pre", "full")
    x = torch.from_numpy(features[(3, "last")])
    assert doc["fvu"]["last"] == pytest.approx(fvu(x, load_sae(tmp_path / "sae").reconstruct(x)), rel=1e-4)
    assert doc["spliced_kl"]["n"] > 0 and doc["config"]["n_perm"] == 3
    assert sae_figure(doc).data


def test_sae_probe_refuses_a_store_without_an_sae(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _cli("extract", "--trajectories", MINI, "--store", "store", "--model", TINY, "--layers", "3", "--attention",
         "none")
    result = RUNNER.invoke(app, ["sae-probe", "--store", "store", "--out", "probe"])
    assert result.exit_code != 0 and "extracted without an SAE" in str(result.exception)
    assert not (tmp_path / "probe" / "sae_probe.json").exists()


def test_anchors_command_writes_its_document(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _cli("anchors", "--trajectories", MINI, "--out", "anchors", "--model", TINY, "--boundaries", "mini-code-1@2",
         "--receiver-heads", 2)
    doc = load_result(tmp_path / "anchors" / "anchors.json")
    assert doc["config"]["boundaries"] == ["mini-code-1@2"] and doc["blocks"]
    assert {r["after_step"] for r in doc["blocks"]} == {2}
    assert all(len(h["heads"]) == 2 for h in doc["receiver_heads"])
    assert anchors_figure(doc).data
    json.dumps(doc, allow_nan=False)
