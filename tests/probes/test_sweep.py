"""interp sweep: config checking, the grid of cells, and a resumable end-to-end run on the tiny model."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from interp.pipelines.sweep import cells, load_sweep, run_sweep

pytestmark = pytest.mark.e2e

def test_unknown_keys_and_missing_grid_are_named(tmp_path):
    bad = tmp_path / "s.toml"
    bad.write_text('trajectories = "x"\nout = "y"\n[grid]\nmodels = ["m"]\n')
    with pytest.raises(ValueError, match=r"s.toml: \[grid\]: missing key"):
        load_sweep(bad)
    bad.write_text('trajectories = "x"\nout = "y"\nlayer = 3\n[grid]\n')
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['layer'\]"):
        load_sweep(bad)


def test_cells_are_the_product_of_the_grid():
    config = {"grid": {"models": ["a", "b"], "conditions": ["full", "delete_all_reasoning"], "layers": ["all"],
                       "poolings": [["last"], ["last", "mean_last:8"]]}}
    names = [c["name"] for c in cells(config)]
    assert len(names) == len(set(names)) == 8


@pytest.mark.slow
def test_sweep_runs_and_resumes(tmp_path, demo_trajectories, sweep_config):
    traj = tmp_path / "t.jsonl"
    traj.write_text("".join(json.dumps(t.to_json()) + "\n" for t in demo_trajectories[:8]))
    path = sweep_config(tmp_path / "s.toml", traj, tmp_path / "out", '[["last"], ["last", "mean_latest_step"]]')
    summary = run_sweep(path)
    # every boundary but each trajectory's final one (no later step: its target is undefined, not 0)
    assert len(summary) == 2 and set(summary["n_samples"]) == {sum(t.n_steps - 1 for t in demo_trajectories[:8])}
    assert pd.read_csv(tmp_path / "out" / "summary.csv").shape[0] == 2
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "out" / "cells").rglob("probe_results.json")}
    again = run_sweep(path)  # everything done: nothing recomputed
    assert again["auroc"].tolist() == summary["auroc"].tolist()
    assert stamps == {p: p.stat().st_mtime_ns for p in stamps}
