"""Sweep cells that differ only in poolings (or layers) share one extraction, and each cell's probe on its
subset of the shared store equals the probe on a store extracted with exactly that cell's settings.

Reference: ``stages.extract`` + ``stages.probe`` run per cell on its own store (no sharing).
"""

from __future__ import annotations

import json

import pytest

from interp.extraction.extract import ExtractConfig
from interp.pipelines import stages
from interp.pipelines.sweep import cells, load_sweep, run_sweep
from probes.config import ProbeConfig

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NUMBERS = ("auroc", "auroc_ci", "ap", "balanced_accuracy", "permutation_p", "n_samples", "gain")


def test_cells_share_one_extraction_and_match_their_own_store(tmp_path, demo_trajectories, sweep_config,
                                                               tiny_sensor):
    traj = tmp_path / "t.jsonl"
    traj.write_text("".join(json.dumps(t.to_json()) + "\n" for t in demo_trajectories[:8]))
    path = sweep_config(tmp_path / "s.toml", traj, tmp_path / "out", '[["last"], ["mean_latest_step"]]')
    summary = run_sweep(path)
    stores = list((tmp_path / "out" / "stores").iterdir())
    assert len(stores) == 1  # one model x one condition: one extraction for both cells
    assert json.loads((stores[0] / "store.json").read_text())["settings"]["poolings"] == ["last", "mean_latest_step"]
    assert summary["host"].notna().all() and (summary["seconds"] > 0).all()
    assert summary["worker"].str.startswith("pid").all()
    config = load_sweep(path)
    probe_config = ProbeConfig(**config["probe"])
    trajs = stages.trajectories(traj, strict=False)
    for cell in cells(config):
        own = tmp_path / "own" / cell["name"]
        stages.extract(tiny_sensor, trajs, ["full"], ExtractConfig(layers=[3, 7], poolings=cell["poolings"]),
                       own / "store")
        stages.probe(own / "store", own / "probe", probe_config)
        got = json.loads((tmp_path / "out" / "cells" / cell["folder"] / "probe" / "probe_results.json").read_text())
        expected = json.loads((own / "probe" / "probe_results.json").read_text())
        assert {k: got[k] for k in NUMBERS} == {k: expected[k] for k in NUMBERS}, cell["name"]
