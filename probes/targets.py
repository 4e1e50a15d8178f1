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

Reference labels (annotations or a ``task_id,after_step,future_necessity``
CSV) are read, and compared with the rule labels, by :mod:`interp.data.labels`.
:func:`targets_command` is the body of ``interp label``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interp.data.labels import agreement, annotation_labels, read_labels_csv, write_labels_csv
from interp.data.trajectory import Trajectory, load_trajectories
from interp.io import atomic_write_json

REPLAN_CUES = (
    "re-plan", "replan", "let me reconsider", "i need to reconsider", "wait,", "actually,", "going back to",
    "change of plan", "new plan", "that didn't work", "that did not work", "start over", "different approach",
    "instead, i", "my earlier assumption", "i was wrong", "revisit",
)


@dataclass(frozen=True)
class TargetLabelerConfig:
    """Settings of the rule-based future-necessity labeler (see the module docstring); validated on construction."""

    window: int = 3
    surge_factor: float = 1.8
    cues: tuple[str, ...] = REPLAN_CUES

    def __post_init__(self) -> None:
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
            raise ValueError(f"window must be an integer >= 1 (later steps inspected), got {self.window!r}")
        if not self.surge_factor > 0:
            raise ValueError(f"surge_factor must be > 0, got {self.surge_factor!r}")
        if not self.cues or not all(isinstance(c, str) and c for c in self.cues):
            raise ValueError(f"cues must be non-empty strings (an empty cue matches every step), got {self.cues!r}")


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


def label_target(traj: Trajectory, b: int, config: TargetLabelerConfig = TargetLabelerConfig()) -> TargetLabel:
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


def label_targets(trajs: list[Trajectory], config: TargetLabelerConfig = TargetLabelerConfig()) -> list[TargetLabel]:
    """Rule labels for every boundary 1..n of every trajectory."""
    return [label_target(t, b, config) for t in trajs for b in range(1, t.n_steps + 1)]


TARGETS_SCHEMA = {"y": "1 when steps b+1..b+window re-derive, surge in reasoning or re-plan",
                  "evidence": "every rule that fired, with its step"}
AGREEMENT_KEYS = ("n", "kappa", "confusion")  # the agreement fields future_necessity_labels.json has always held


def targets_command(trajectories: Path, out: Path, labels: Path | None = None,
                    config: TargetLabelerConfig = TargetLabelerConfig()) -> dict[str, Any]:
    """``interp label``: rule-based targets with evidence, and agreement with reference labels.

    The reference is ``labels`` (a CSV read by :func:`interp.data.labels.read_labels_csv`
    against the trajectories) or else the annotations. Writes
    ``future_necessity_labels.json`` (schema, agreement, every boundary with its
    evidence) and ``future_necessity_labels.csv`` (``task_id,after_step,future_necessity``),
    both atomically; returns ``{n_boundaries, n_positive, agreement}``.
    """
    trajs = load_trajectories(trajectories)
    rows = label_targets(trajs, config)
    reference = (read_labels_csv(labels, "future_necessity", trajs) if labels is not None
                 else annotation_labels(trajs, "future_necessity"))
    full = agreement({(r.task_id, r.after_step): r.y for r in rows}, reference)
    agree = {k: full[k] for k in AGREEMENT_KEYS}
    out = Path(out)
    atomic_write_json(out / "future_necessity_labels.json",
                      {"schema": TARGETS_SCHEMA, "agreement": agree, "labels": [vars(r) for r in rows]})
    write_labels_csv(out / "future_necessity_labels.csv",
                     ({"task_id": r.task_id, "after_step": r.after_step, "future_necessity": r.y} for r in rows),
                     "future_necessity")
    return {"n_boundaries": len(rows), "n_positive": sum(r.y for r in rows), "agreement": agree}
