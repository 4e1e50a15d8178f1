"""Rule-based future-necessity targets: each rule on a hand-made trajectory, evidence, agreement, CSV errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sklearn.metrics import cohen_kappa_score

from interp.data.trajectory import Trajectory
from interp.data.labels import agreement, read_labels_csv
from probes.targets import TargetLabelerConfig, label_target, label_targets, targets_command

pytestmark = pytest.mark.unit


def _traj(steps: list[tuple[str, dict]]) -> Trajectory:
    return Trajectory.from_json({
        "task_id": "t", "domain": "code", "system_prompt": "s", "task": "do it",
        "steps": [{"reasoning": r, "action": a, "observation": "ok"} for r, a in steps]})


CALL = {"tool": "run", "arguments": {"cmd": "pytest -q"}}
OTHER = {"tool": "read", "arguments": {"path": "a.py"}}


def test_rederivation_fires_on_a_reissued_action():
    traj = _traj([("Run the tests.", CALL), ("Read the file.", OTHER), ("Run them again.", {"tool": "run", "arguments": {"cmd": "pytest  -q"}})])
    label = label_target(traj, 1)
    assert label.y == 1 and label.evidence == [{"rule": "rederivation", "step": 3, "tool": "run"}]
    assert label_target(traj, 3).y == 0  # nothing follows the last boundary


def test_surge_and_replanning_cues_and_window():
    short = "Read the next file to check it."
    traj = _traj([(short, OTHER), (short, {"tool": "read", "arguments": {"path": "b.py"}}),
                  ("x" * 100, {"tool": "read", "arguments": {"path": "c.py"}}),
                  ("Wait, I need to reconsider the plan.", {"tool": "read", "arguments": {"path": "d.py"}})])
    rules = {e["rule"]: e["step"] for e in label_target(traj, 2).evidence}
    assert rules == {"reasoning_surge": 3, "replanning": 4}
    assert label_target(traj, 2, TargetLabelerConfig(window=1)).evidence[0]["rule"] == "reasoning_surge"
    assert len(label_target(traj, 2, TargetLabelerConfig(window=1)).evidence) == 1
    assert label_target(traj, 1, TargetLabelerConfig(window=1, surge_factor=100)).y == 0


def test_agreement_matches_sklearn_and_demo_runs(demo_trajectories):
    rows = label_targets(demo_trajectories)
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
        read_labels_csv(bad, "future_necessity")
    bad.write_text("task_id,step\nt,1\n")
    with pytest.raises(ValueError, match=r"y.csv:1: header"):
        read_labels_csv(bad, "future_necessity")



DEMO = Path(__file__).resolve().parents[2] / "data" / "demo" / "trajectories.jsonl"


def test_targets_command_writes_rule_labels_and_agreement(tmp_path, demo_trajectories):
    config = TargetLabelerConfig(window=2)
    summary = targets_command(DEMO, tmp_path, config=config)
    rows = label_targets(demo_trajectories, config)
    rule = {(r.task_id, r.after_step): r.y for r in rows}
    assert read_labels_csv(tmp_path / "future_necessity_labels.csv", "future_necessity", demo_trajectories) == rule
    doc = json.loads((tmp_path / "future_necessity_labels.json").read_text())
    assert [(r["task_id"], r["after_step"], r["y"], r["evidence"]) for r in doc["labels"]] == \
        [(r.task_id, r.after_step, r.y, r.evidence) for r in rows]
    assert set(doc) == {"schema", "agreement", "labels"} and set(doc["agreement"]) == {"n", "kappa", "confusion"}
    ref = {(t.task_id, a.after_step): a.future_necessity for t in demo_trajectories for a in t.annotations}
    keys = sorted(ref)
    assert doc["agreement"] == summary["agreement"]
    assert summary["agreement"]["kappa"] == pytest.approx(
        cohen_kappa_score([ref[k] for k in keys], [rule[k] for k in keys]), abs=1e-4)
    assert (summary["n_boundaries"], summary["n_positive"]) == (len(rows), sum(rule.values()))


def test_targets_command_reads_a_reference_csv(tmp_path, demo_trajectories):
    first = demo_trajectories[0]
    ref = tmp_path / "ref.csv"
    ref.write_text("task_id,after_step,future_necessity\n" + f"{first.task_id},1,1\n{first.task_id},2,-1\n"
                   f"{first.task_id},3,\n")
    summary = targets_command(DEMO, tmp_path / "out", labels=ref)
    assert summary["agreement"]["n"] == 1  # -1 and empty are "no label"
    ref.write_text("task_id,after_step,future_necessity\nnot-a-task,1,1\n")
    with pytest.raises(ValueError, match=r"ref.csv:2: task_id: unknown task 'not-a-task'"):
        targets_command(DEMO, tmp_path / "out", labels=ref)


@pytest.mark.parametrize("kwargs, field", [
    ({"window": 0}, "window"), ({"window": 1.5}, "window"), ({"surge_factor": 0}, "surge_factor"),
    ({"surge_factor": float("nan")}, "surge_factor"), ({"cues": ()}, "cues"), ({"cues": ("wait,", "")}, "cues"),
])
def test_target_config_validates_on_construction(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field} must"):
        TargetLabelerConfig(**kwargs)
    assert TargetLabelerConfig(window=1, surge_factor=0.1, cues=("x",)).window == 1
