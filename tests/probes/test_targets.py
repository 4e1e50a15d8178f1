"""Rule-based future-necessity targets: each rule on a hand-made trajectory, evidence, window, undefined final
boundary, agreement, CSV errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sklearn.metrics import cohen_kappa_score

from interp.data.trajectory import Trajectory
from interp.data.labels import agreement, read_labels_csv
import probes.targets
from probes.targets import (FIELDS, REPLAN_CUE_EXAMPLES, REPLAN_CUES, TargetLabelerConfig, label_target, label_targets,
                            targets_command)
from interp.schema import check, schema_dict, schema_table

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
    assert label.y == 1 and label.evidence == [{"rule": "rederivation", "step": 3, "cue": "run", "tool": "run",
                                                "repeats_step": 1}]
    with pytest.raises(ValueError, match="t@3: .*final boundary"):
        label_target(traj, 3)  # nothing follows the last boundary: undefined, not 0
    assert [r.after_step for r in label_targets([traj])] == [1, 2]


def test_window_three_and_the_rest_of_the_trajectory_disagree():
    """A re-plan at step 6: window=3 from b=1 sees steps 2-4 only (y=0), the default (rest of trajectory) sees it."""
    plain = "Read the next file to check it."
    traj = _traj([(plain, {"tool": "read", "arguments": {"path": f"{i}.py"}}) for i in range(5)]
                 + [("That didn't work; the import still fails.", {"tool": "read", "arguments": {"path": "z.py"}}),
                    (plain, {"tool": "read", "arguments": {"path": "end.py"}})])
    windowed = label_target(traj, 1, TargetLabelerConfig(window=3))
    rest = label_target(traj, 1)
    assert TargetLabelerConfig().window is None
    assert (windowed.y, windowed.evidence) == (0, [])
    assert rest.y == 1 and rest.evidence == [{"rule": "replanning", "step": 6, "cue": "that didn't work",
                                              "matched": "That didn't work"}]
    assert label_target(traj, 3, TargetLabelerConfig(window=3)).y == 1  # steps 4-6 reach the re-plan
    assert [r.y for r in label_targets([traj], TargetLabelerConfig(window=3))] == [0, 0, 1, 1, 1, 0]
    assert [r.y for r in label_targets([traj])] == [1, 1, 1, 1, 1, 0]  # b = 7 has no row at all


def test_every_positive_names_its_later_step_and_cue(demo_trajectories):
    for r in label_targets(demo_trajectories):
        assert r.y == int(bool(r.evidence))
        for e in r.evidence:
            assert r.after_step < e["step"] and e["cue"] and e["rule"] in ("rederivation", "reasoning_surge",
                                                                            "replanning")


def test_each_documented_cue_fires_on_its_example():
    import probes.targets

    assert len(REPLAN_CUES) == 17 and "wait," in REPLAN_CUES
    table = "\n".join(f"| ``{cue}`` | {example} |" for cue, example in REPLAN_CUE_EXAMPLES)
    assert "| cue | example reasoning that fires it |\n|---|---|\n" + table + "\n" in probes.targets.__doc__
    for cue, example in REPLAN_CUE_EXAMPLES:
        traj = _traj([("Start.", OTHER), (example, {"tool": "read", "arguments": {"path": "b.py"}})])
        evidence = label_target(traj, 1, TargetLabelerConfig(surge_factor=100)).evidence
        assert [(e["rule"], e["step"], e["cue"]) for e in evidence] == [("replanning", 2, cue)], example


def test_surge_and_replanning_cues_and_window():
    short = "Read the next file to check it."
    traj = _traj([(short, OTHER), (short, {"tool": "read", "arguments": {"path": "b.py"}}),
                  ("x" * 100, {"tool": "read", "arguments": {"path": "c.py"}}),
                  ("Wait, I need to reconsider the plan.", {"tool": "read", "arguments": {"path": "d.py"}})])
    evidence = label_target(traj, 2).evidence
    assert {e["rule"]: e["step"] for e in evidence} == {"reasoning_surge": 3, "replanning": 4}
    assert evidence[0] == {"rule": "reasoning_surge", "step": 3, "cue": "100 > 1.8 x 31.0 chars", "chars": 100,
                           "running_norm": 31.0, "threshold": 55.8}
    assert evidence[1]["cue"] == "wait," and evidence[1]["matched"] == "Wait,"
    assert label_target(traj, 2, TargetLabelerConfig(window=1)).evidence[0]["rule"] == "reasoning_surge"
    assert len(label_target(traj, 2, TargetLabelerConfig(window=1)).evidence) == 1
    assert label_target(traj, 1, TargetLabelerConfig(window=1, surge_factor=100)).y == 0


def test_agreement_matches_sklearn_and_demo_runs(demo_trajectories):
    rows = label_targets(demo_trajectories)
    rule = {(r.task_id, r.after_step): r.y for r in rows}
    ref = {(t.task_id, a.after_step): a.future_necessity for t in demo_trajectories for a in t.annotations}
    got = agreement(rule, ref)
    keys = sorted(ref)
    assert len(ref) == 193 and len(rule) == 193 - len(demo_trajectories)  # annotations label the final boundary too
    keys = sorted(set(ref) & set(rule))  # agreement is on the shared defined boundaries
    assert got["n"] == len(keys) == 168
    assert got["kappa"] == pytest.approx(cohen_kappa_score([ref[k] for k in keys], [rule[k] for k in keys]), abs=1e-4)
    assert sum(map(sum, got["confusion"])) == 168


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
    assert set(doc) == {f.name for f in FIELDS} and set(doc["agreement"]) == {"n", "kappa", "confusion"}
    check(doc, FIELDS, "future_necessity_labels.json")
    assert doc["schema"] == schema_dict(FIELDS) and doc["config"]["window"] == 2
    assert doc["n_undefined"] == len(doc["undefined"]) == len(demo_trajectories)
    assert {(u["task_id"], u["after_step"]) for u in doc["undefined"]} == {(t.task_id, t.n_steps)
                                                                          for t in demo_trajectories}
    assert not {(u["task_id"], u["after_step"]) for u in doc["undefined"]} & set(rule)  # not in the CSV either
    ref = {(t.task_id, a.after_step): a.future_necessity for t in demo_trajectories for a in t.annotations}
    keys = sorted(set(ref) & set(rule))
    assert doc["agreement"] == summary["agreement"]
    assert summary["agreement"]["kappa"] == pytest.approx(
        cohen_kappa_score([ref[k] for k in keys], [rule[k] for k in keys]), abs=1e-4)
    assert (summary["n_boundaries"], summary["n_positive"]) == (len(rows), sum(rule.values()))
    assert (doc["n_labelled"], doc["n_positive"], summary["n_undefined"]) == (len(rows), sum(rule.values()), 25)


def test_docstring_table_equals_the_declared_fields():
    assert schema_table(FIELDS) in probes.targets.__doc__


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
    ({"window": 0}, "window"), ({"window": 1.5}, "window"), ({"window": True}, "window"), ({"surge_factor": 0}, "surge_factor"),
    ({"surge_factor": float("nan")}, "surge_factor"), ({"cues": ()}, "cues"), ({"cues": ("wait,", "")}, "cues"),
])
def test_target_config_validates_on_construction(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}: must"):
        TargetLabelerConfig(**kwargs)
    assert TargetLabelerConfig(window=1, surge_factor=0.1, cues=("x",)).window == 1
