"""Future-necessity targets y_i: from annotations, a CSV, or a documented rule-based labeler.

``y = 1`` at boundary b when the trajectory *after* b (steps b+1 .. b+window)
re-derives, adds reasoning or re-plans. The rule-based labeler fires on:

- ``rederivation``: a later action equivalent to an action at or before b is
  re-issued (same tool, same arguments after whitespace/case normalisation);
- ``reasoning_surge``: a later step's reasoning length (characters) exceeds
  ``surge_factor`` x the mean length of steps 1..b (the trajectory's running norm);
- ``replanning``: a later step's reasoning contains a replanning cue
  (``REPLAN_CUES``, case-insensitive whole phrases).

Every positive records which rule fired and at which step. The last boundary
(nothing follows) is always 0.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from sklearn.metrics import cohen_kappa_score, confusion_matrix

from interp.data.trajectory import Trajectory

REPLAN_CUES = (
    "re-plan", "replan", "let me reconsider", "i need to reconsider", "wait,", "actually,", "going back to",
    "change of plan", "new plan", "that didn't work", "that did not work", "start over", "different approach",
    "instead, i", "my earlier assumption", "i was wrong", "revisit",
)


@dataclass(frozen=True)
class LabelerConfig:
    """Rule settings (see module docstring)."""

    window: int = 3
    surge_factor: float = 1.8
    cues: tuple[str, ...] = REPLAN_CUES


@dataclass
class TargetLabel:
    """y at one boundary with the evidence of every rule that fired."""

    task_id: str
    after_step: int
    y: int
    evidence: list[dict[str, object]] = field(default_factory=list)


def _call_key(tool: str, arguments: object) -> tuple[str, str]:
    text = json.dumps(arguments, sort_keys=True, ensure_ascii=False)
    return tool, re.sub(r"\s+", " ", text).lower()


def label_boundary(traj: Trajectory, b: int, config: LabelerConfig = LabelerConfig()) -> TargetLabel:
    """Apply the three rules to the steps after boundary ``b``."""
    label = TargetLabel(traj.task_id, b, 0)
    earlier = {_call_key(c.tool, c.arguments) for s in traj.steps[:b] for c in s.action.calls}
    norm = sum(len(s.reasoning) for s in traj.steps[:b]) / max(b, 1)
    cue_re = re.compile("|".join(re.escape(c) for c in config.cues), re.I)
    for t in range(b + 1, min(traj.n_steps, b + config.window) + 1):
        step = traj.steps[t - 1]
        for call in step.action.calls:
            if _call_key(call.tool, call.arguments) in earlier:
                label.evidence.append({"rule": "rederivation", "step": t, "tool": call.tool})
        if norm and len(step.reasoning) > config.surge_factor * norm:
            label.evidence.append({"rule": "reasoning_surge", "step": t, "chars": len(step.reasoning),
                                   "running_norm": round(norm, 1)})
        match = cue_re.search(step.reasoning)
        if match:
            label.evidence.append({"rule": "replanning", "step": t, "cue": match.group(0)})
    label.y = int(bool(label.evidence))
    return label


def label_trajectories(trajs: list[Trajectory], config: LabelerConfig = LabelerConfig()) -> list[TargetLabel]:
    """Rule labels for every boundary 1..n of every trajectory."""
    return [label_boundary(t, b, config) for t in trajs for b in range(1, t.n_steps + 1)]


def annotation_targets(trajs: list[Trajectory]) -> dict[tuple[str, int], int]:
    """``{(task_id, after_step): future_necessity}`` from the trajectories' annotations."""
    return {(t.task_id, a.after_step): a.future_necessity for t in trajs for a in t.annotations
            if a.future_necessity is not None}


def read_targets_csv(path: Path) -> dict[tuple[str, int], int]:
    """``task_id,after_step,future_necessity`` CSV; errors name FILE:LINE: field."""
    frame = pd.read_csv(path)
    missing = {"task_id", "after_step", "future_necessity"} - set(frame.columns)
    if missing:
        raise ValueError(f"{path}:1: header: missing column(s) {sorted(missing)}")
    out = {}
    for i, row in enumerate(frame.itertuples(), start=2):
        if row.future_necessity not in (0, 1):
            raise ValueError(f"{path}:{i}: future_necessity: {row.future_necessity!r} is not 0 or 1")
        out[(str(row.task_id), int(row.after_step))] = int(row.future_necessity)
    return out


def agreement(rule: dict[tuple[str, int], int], reference: dict[tuple[str, int], int]) -> dict[str, object]:
    """Cohen's kappa and confusion matrix (rows: reference 0/1, columns: rule 0/1) on shared boundaries."""
    keys = sorted(set(rule) & set(reference))
    if not keys:
        return {"n": 0, "kappa": None, "confusion": None}
    ref = [reference[k] for k in keys]
    got = [rule[k] for k in keys]
    return {"n": len(keys), "kappa": round(float(cohen_kappa_score(ref, got)), 4),
            "confusion": confusion_matrix(ref, got, labels=[0, 1]).tolist()}
