"""Rule-based future-necessity targets: each rule on a hand-made trajectory, evidence, agreement, CSV errors."""

from __future__ import annotations

import pytest
from sklearn.metrics import cohen_kappa_score

from interp.data.trajectory import Trajectory
from probes.targets import LabelerConfig, agreement, label_boundary, label_trajectories, read_targets_csv


def _traj(steps: list[tuple[str, dict]]) -> Trajectory:
    return Trajectory.from_json({
        "task_id": "t", "domain": "code", "system_prompt": "s", "task": "do it",
        "steps": [{"reasoning": r, "action": a, "observation": "ok"} for r, a in steps]})


CALL = {"tool": "run", "arguments": {"cmd": "pytest -q"}}
OTHER = {"tool": "read", "arguments": {"path": "a.py"}}


def test_rederivation_fires_on_a_reissued_action():
    traj = _traj([("Run the tests.", CALL), ("Read the file.", OTHER), ("Run them again.", {"tool": "run", "arguments": {"cmd": "pytest  -q"}})])
    label = label_boundary(traj, 1)
    assert label.y == 1 and label.evidence == [{"rule": "rederivation", "step": 3, "tool": "run"}]
    assert label_boundary(traj, 3).y == 0  # nothing follows the last boundary


def test_surge_and_replanning_cues_and_window():
    short = "Read the next file to check it."
    traj = _traj([(short, OTHER), (short, {"tool": "read", "arguments": {"path": "b.py"}}),
                  ("x" * 100, {"tool": "read", "arguments": {"path": "c.py"}}),
                  ("Wait, I need to reconsider the plan.", {"tool": "read", "arguments": {"path": "d.py"}})])
    rules = {e["rule"]: e["step"] for e in label_boundary(traj, 2).evidence}
    assert rules == {"reasoning_surge": 3, "replanning": 4}
    assert label_boundary(traj, 2, LabelerConfig(window=1)).evidence[0]["rule"] == "reasoning_surge"
    assert len(label_boundary(traj, 2, LabelerConfig(window=1)).evidence) == 1
    assert label_boundary(traj, 1, LabelerConfig(window=1, surge_factor=100)).y == 0


def test_agreement_matches_sklearn_and_demo_runs(demo_trajectories):
    rows = label_trajectories(demo_trajectories)
    rule = {(r.task_id, r.after_step): r.y for r in rows}
    ref = {(t.task_id, a.after_step): a.future_necessity for t in demo_trajectories for a in t.annotations}
    got = agreement(rule, ref)
    keys = sorted(ref)
    assert got["n"] == len(keys) == 193
    assert got["kappa"] == pytest.approx(cohen_kappa_score([ref[k] for k in keys], [rule[k] for k in keys]), abs=1e-4)
    assert sum(map(sum, got["confusion"])) == 193


def test_targets_csv_errors_name_file_line_and_field(tmp_path):
    bad = tmp_path / "y.csv"
    bad.write_text("task_id,after_step,future_necessity\nt,1,1\nt,2,7\n")
    with pytest.raises(ValueError, match=r"y.csv:3: future_necessity"):
        read_targets_csv(bad)
    bad.write_text("task_id,step\nt,1\n")
    with pytest.raises(ValueError, match=r"y.csv:1: header"):
        read_targets_csv(bad)
