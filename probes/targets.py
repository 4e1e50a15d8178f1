"""Future-necessity targets y_i: from annotations, a CSV, or a documented rule-based labeler.

``y = 1`` at boundary b when the trajectory *after* b re-derives, adds
reasoning or re-plans (the reference study's target: "the later trajectory
contains re-derivation, additional reasoning or explicit replanning"); the
definitions of the three are the labelling guideline's
(``interp/annotation/guideline.md``, sections *Re-derivation*, *Added
reasoning*, *Re-planning*, *y: future necessity*), and the rules below are
this labeler's lexical proxy of them. The steps inspected are b+1 .. n (the whole rest of the trajectory) by default,
or b+1 .. b+window with ``TargetLabelerConfig(window=N)`` (``interp label
--window N``).

**Undefined boundaries.** The final boundary b = n of a trajectory has no later
step, so nothing can re-derive or re-plan after it: its target is undefined,
not 0. :func:`label_targets` emits no row for it; ``future_necessity_labels.json``
counts and lists it under ``undefined``, the CSV has no row for it (no row
means "no label" to :func:`interp.data.labels.read_labels_csv`), and agreement
is computed on the boundaries both label sets define (annotations that label
a final boundary are simply not compared there). :func:`label_target` on b = n
raises ``ValueError``.

The three rules (each fires once per later step that meets it; ``y = 1`` when
any fires):

- ``rederivation``: a later step re-issues a tool call already made at or
  before b: same tool, same JSON arguments after collapsing whitespace and
  lower-casing. Example: step 1 ``run {"cmd": "pytest -q"}``, step 5
  ``run {"cmd": "pytest  -Q"}`` -> at b = 1..4 the evidence is
  ``{"rule": "rederivation", "step": 5, "cue": "run", "tool": "run", "repeats_step": 1}``.
- ``reasoning_surge``: a later step's reasoning is longer (characters) than
  ``surge_factor`` (default 1.8) x the mean reasoning length of steps 1..b
  (the running norm at b). Example: steps 1-2 of 30 characters each, step 3
  of 100 -> at b = 2 the threshold is 54 and the evidence is
  ``{"rule": "reasoning_surge", "step": 3, "cue": "100 > 1.8 x 30.0 chars", "chars": 100,
  "running_norm": 30.0, "threshold": 54.0}``.
- ``replanning``: a later step's reasoning contains one of the replanning
  cues below, as a case-insensitive substring (so ``replan`` also matches
  "replanning" and ``revisit`` "revisited"); the evidence names the cue as
  configured and the text that matched. Example: "Wait, the config is
  elsewhere." at step 4 -> ``{"rule": "replanning", "step": 4, "cue": "wait,", "matched": "Wait,"}``.

A step without reasoning (no non-blank block) counts as 0 characters of
reasoning: it lowers the running norm (a mean over all steps 1..b), never
surges and never holds a cue; its tool calls still count for
``rederivation``. A running norm of 0 (steps 1..b all without reasoning)
fires no ``reasoning_surge``.

Every evidence entry names the later ``step`` (1-based) and the ``cue``
that fired (the tool for a re-issued call, the length comparison for a
surge, the cue phrase for replanning). The replanning cues (``REPLAN_CUES``;
a unit test checks that this table shows them and that each example fires
its cue):

| cue | example reasoning that fires it |
|---|---|
| ``re-plan`` | I should re-plan: the API has no batch endpoint. |
| ``replan`` | Time to replan around the missing dependency. |
| ``let me reconsider`` | Let me reconsider the parser design. |
| ``i need to reconsider`` | I need to reconsider which table holds the totals. |
| ``wait,`` | Wait, the config lives in setup.cfg, not pyproject. |
| ``actually,`` | Actually, the failing test is in utils. |
| ``going back to`` | Going back to the original error message. |
| ``change of plan`` | Change of plan: patch the caller instead. |
| ``new plan`` | New plan: read the logs first. |
| ``that didn't work`` | That didn't work; the import still fails. |
| ``that did not work`` | That did not work, the cache is stale. |
| ``start over`` | I will start over with a clean checkout. |
| ``different approach`` | A different approach: bisect the commits. |
| ``instead, i`` | Instead, I will mock the network call. |
| ``my earlier assumption`` | My earlier assumption about the encoding was wrong. |
| ``i was wrong`` | I was wrong about the off-by-one. |
| ``revisit`` | Revisit the schema before writing the migration. |

Reference labels (annotations or a ``task_id,after_step,future_necessity``
CSV) are read, and compared with the rule labels, by :mod:`interp.data.labels`.
:func:`targets_command` is the body of ``interp label``.

Fields of ``future_necessity_labels.json`` (``FIELDS``; :func:`targets_command` writes them):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``config`` | ``{...}`` | object | - | the labeler's settings: window (later steps inspected; null = the rest of the trajectory), surge_factor, cues |
| ``agreement`` | ``{...}`` | object | - | rule labels vs the reference on their shared defined boundaries: n, kappa (Cohen's), confusion (rows reference 0/1, columns rule 0/1) |
| ``n_labelled`` | ``[]`` | int | boundaries | boundaries with a defined rule label (every boundary but each trajectory's last) |
| ``n_positive`` | ``[]`` | int | boundaries | labelled boundaries with y = 1 |
| ``labels`` | ``[n_labelled] of {task_id, after_step, y, evidence}`` | object | - | every labelled boundary: y (0/1) and evidence, one entry per rule firing: {rule, step, cue, ...} |
| ``n_undefined`` | ``[]`` | int | boundaries | boundaries left without a label (nothing follows them) |
| ``undefined`` | ``[n_undefined] of {task_id, after_step, reason}`` | object | - | the boundaries left without a label, with why; absent from the CSV and from agreement |
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypedDict

from interp.data.labels import agreement, annotation_labels, final_boundaries, read_labels_csv, write_labels_csv
from interp.data.trajectory import Trajectory, load_trajectories
from interp.io import atomic_write_json
from interp.params import Integer, Items, Maybe, Real, Text, param, validate
from interp.schema import Field, schema_dict

FIELDS = (
    Field("schema", "{...}", "object", "-", "this table: {field: {shape, dtype, units, doc}}"),
    Field("config", "{...}", "object", "-",
          "the labeler's settings: window (later steps inspected; null = the rest of the trajectory), "
          "surge_factor, cues"),
    Field("agreement", "{...}", "object", "-",
          "rule labels vs the reference on their shared defined boundaries: n, kappa (Cohen's), confusion "
          "(rows reference 0/1, columns rule 0/1)"),
    Field("n_labelled", "[]", "int", "boundaries",
          "boundaries with a defined rule label (every boundary but each trajectory's last)"),
    Field("n_positive", "[]", "int", "boundaries", "labelled boundaries with y = 1"),
    Field("labels", "[n_labelled] of {task_id, after_step, y, evidence}", "object", "-",
          "every labelled boundary: y (0/1) and evidence, one entry per rule firing: {rule, step, cue, ...}"),
    Field("n_undefined", "[]", "int", "boundaries", "boundaries left without a label (nothing follows them)"),
    Field("undefined", "[n_undefined] of {task_id, after_step, reason}", "object", "-",
          "the boundaries left without a label, with why; absent from the CSV and from agreement"),
)


# The replanning cues and an example each fires on (their one home; the docstring's table shows them and a
# unit test keeps the two equal).
REPLAN_CUE_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("re-plan", "I should re-plan: the API has no batch endpoint."),
    ("replan", "Time to replan around the missing dependency."),
    ("let me reconsider", "Let me reconsider the parser design."),
    ("i need to reconsider", "I need to reconsider which table holds the totals."),
    ("wait,", "Wait, the config lives in setup.cfg, not pyproject."),
    ("actually,", "Actually, the failing test is in utils."),
    ("going back to", "Going back to the original error message."),
    ("change of plan", "Change of plan: patch the caller instead."),
    ("new plan", "New plan: read the logs first."),
    ("that didn't work", "That didn't work; the import still fails."),
    ("that did not work", "That did not work, the cache is stale."),
    ("start over", "I will start over with a clean checkout."),
    ("different approach", "A different approach: bisect the commits."),
    ("instead, i", "Instead, I will mock the network call."),
    ("my earlier assumption", "My earlier assumption about the encoding was wrong."),
    ("i was wrong", "I was wrong about the off-by-one."),
    ("revisit", "Revisit the schema before writing the migration."),
)
REPLAN_CUES = tuple(cue for cue, _ in REPLAN_CUE_EXAMPLES)
UNDEFINED_FINAL = "final boundary: no later step, so future necessity is undefined"


@dataclass(frozen=True)
class TargetLabelerConfig:
    """Settings of the rule-based future-necessity labeler (see the module docstring); validated on construction.

    ``window`` is the number of later steps inspected; None (the default) inspects the whole rest of the trajectory.
    """

    analysis: ClassVar[str] = "label"  # its labels feed ``probe`` (and are compared in ``externalize label``)
    precision: ClassVar[str | None] = None  # reads text; runs no model

    window: int | None = param(None, Maybe(Integer(1), "the whole rest of the trajectory"),
                               "Later steps inspected after each boundary.", "steps")
    surge_factor: float = param(1.8, Real(0, low_open=True), "Reasoning surge: length over this multiple of the "
                                "running mean.")
    cues: tuple[str, ...] = param(REPLAN_CUES, Items(Text("a non-empty cue (an empty cue matches every step)")),
                                  "Re-planning cues (comma list).")

    def __post_init__(self) -> None:
        validate(self)


@dataclass
class TargetLabel:
    """y at one boundary with the evidence of every rule that fired (each entry names its later step and cue)."""

    task_id: str
    after_step: int
    y: int
    evidence: list[dict[str, object]] = field(default_factory=list)


def _call_key(tool: str, arguments: object) -> tuple[str, str]:
    text = json.dumps(arguments, sort_keys=True, ensure_ascii=False)
    return tool, re.sub(r"\s+", " ", text).lower()


def _reasoning_chars(step: Any) -> int:
    """Characters of a step's reasoning; 0 for a step without reasoning (whitespace is not reasoning)."""
    return len(step.reasoning) if step.blocks else 0


def label_target(traj: Trajectory, b: int, config: TargetLabelerConfig = TargetLabelerConfig()) -> TargetLabel:
    """Apply the three rules to the later steps of boundary ``b`` (1 <= b < n_steps: the last boundary has no label)."""
    if not 1 <= b < traj.n_steps:
        raise ValueError(f"{traj.task_id}@{b}: boundaries 1..{traj.n_steps - 1} have a label "
                         f"({'the ' + UNDEFINED_FINAL if b == traj.n_steps else 'out of range'})")
    label = TargetLabel(traj.task_id, b, 0)
    earlier: dict[tuple[str, str], int] = {}
    for s, step in enumerate(traj.steps[:b], start=1):
        for c in step.action.calls:
            earlier.setdefault(_call_key(c.tool, c.arguments), s)
    norm = sum(_reasoning_chars(s) for s in traj.steps[:b]) / b
    cues = {c.lower(): c for c in config.cues}
    cue_re = re.compile("|".join(re.escape(c) for c in config.cues), re.I)
    last = traj.n_steps if config.window is None else min(traj.n_steps, b + config.window)
    for t in range(b + 1, last + 1):
        step = traj.steps[t - 1]
        for call in step.action.calls:
            first = earlier.get(_call_key(call.tool, call.arguments))
            if first is not None:
                label.evidence.append({"rule": "rederivation", "step": t, "cue": call.tool, "tool": call.tool,
                                       "repeats_step": first})
        threshold = config.surge_factor * norm
        chars = _reasoning_chars(step)
        if norm and chars > threshold:
            label.evidence.append({"rule": "reasoning_surge", "step": t,
                                   "cue": f"{chars} > {config.surge_factor} x {norm:.1f} chars",
                                   "chars": chars, "running_norm": round(norm, 1),
                                   "threshold": round(threshold, 1)})
        match = cue_re.search(step.reasoning)
        if match:
            label.evidence.append({"rule": "replanning", "step": t, "cue": cues.get(match.group(0).lower(),
                                                                                    match.group(0)),
                                   "matched": match.group(0)})
    label.y = int(bool(label.evidence))
    return label


def undefined_boundaries(trajs: list[Trajectory]) -> list[dict[str, Any]]:
    """The boundaries that get no rule label (each trajectory's last: nothing follows it), with the reason."""
    return [{"task_id": task_id, "after_step": b, "reason": UNDEFINED_FINAL}
            for task_id, b in sorted(final_boundaries(trajs))]


# Threshold grid of the held-out evaluation of this labeler (tuned on some tasks, kappa on the others)
class TuningGrid(TypedDict):
    """Candidate values of each threshold of :class:`TargetLabelerConfig` tuned on held-out tasks."""
    window: tuple[int | None, ...]
    surge_factor: tuple[float, ...]


TUNING_GRID: TuningGrid = {"window": (None, 1, 2, 3, 5), "surge_factor": (1.4, 1.8, 2.2, 3.0)}


def tuning_configs() -> list[TargetLabelerConfig]:
    """Every config of :data:`TUNING_GRID` (window x surge factor), for held-out threshold tuning."""
    return [TargetLabelerConfig(window=w, surge_factor=f)
            for w in TUNING_GRID["window"] for f in TUNING_GRID["surge_factor"]]


def label_targets(trajs: list[Trajectory], config: TargetLabelerConfig = TargetLabelerConfig()) -> list[TargetLabel]:
    """Rule labels for every defined boundary 1..n-1 of every trajectory (the final one is undefined: no row)."""
    return [label_target(t, b, config) for t in trajs for b in range(1, t.n_steps)]


AGREEMENT_KEYS = ("n", "kappa", "confusion")  # the agreement fields future_necessity_labels.json has always held


def targets_command(trajectories: Path, out: Path, labels: Path | None = None,
                    config: TargetLabelerConfig = TargetLabelerConfig()) -> dict[str, Any]:
    """``interp label``: rule-based targets with evidence, and agreement with reference labels.

    The reference is ``labels`` (a CSV read by :func:`interp.data.labels.read_labels_csv`
    against the trajectories) or else the annotations; agreement is on the
    boundaries both define. Writes ``future_necessity_labels.json`` (``FIELDS``)
    and ``future_necessity_labels.csv`` (``task_id,after_step,future_necessity``,
    defined boundaries only), both atomically; returns ``{n_boundaries, n_positive,
    n_undefined, agreement}`` (``n_boundaries``: labelled boundaries).
    """
    trajs = load_trajectories(trajectories, allow_control_tokens=True)  # read as text, never rendered
    rows = label_targets(trajs, config)
    undefined = undefined_boundaries(trajs)
    reference = (read_labels_csv(labels, "future_necessity", trajs) if labels is not None
                 else annotation_labels(trajs, "future_necessity"))
    full = agreement({(r.task_id, r.after_step): r.y for r in rows}, reference)
    agree = {k: full[k] for k in AGREEMENT_KEYS}
    n_positive = sum(r.y for r in rows)
    out = Path(out)
    atomic_write_json(out / "future_necessity_labels.json", {
        "schema": schema_dict(FIELDS),
        "config": {"window": config.window, "surge_factor": config.surge_factor, "cues": list(config.cues)},
        "agreement": agree, "n_labelled": len(rows), "n_positive": n_positive, "labels": [vars(r) for r in rows],
        "n_undefined": len(undefined), "undefined": undefined})
    write_labels_csv(out / "future_necessity_labels.csv",
                     ({"task_id": r.task_id, "after_step": r.after_step, "future_necessity": r.y} for r in rows),
                     "future_necessity")
    return {"n_boundaries": len(rows), "n_positive": n_positive, "n_undefined": len(undefined), "agreement": agree}
