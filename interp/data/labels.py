"""Boundary labels: the one place that reads, writes and compares 0/1 labels per boundary.

A *boundary* is ``(task_id, after_step)``: the state after ``after_step``
completed steps of a trajectory (``1 <= after_step <= n_steps``). Two labels
live on boundaries, both 0/1:

- ``future_necessity`` (y): the continuation after b re-derives or re-plans
  (``probes.targets`` has the rule-based labeler);
- ``externalization_gap`` (G): derived state at b lives only in reasoning
  (``interp.externalization.labeler`` has the rule-based labeler).

Every label set is a plain ``dict[(task_id, after_step), int]``. It comes from
the trajectories' hand annotations or from a CSV with a ``task_id`` column, an
``after_step`` column and one column per label::

    >>> from interp.data.labels import agreement, annotation_labels, read_labels_csv
    >>> y = read_labels_csv("labels.csv", "future_necessity")             # doctest: +SKIP
    >>> y_ann = annotation_labels(trajectories, "future_necessity")      # doctest: +SKIP
    >>> agreement(predicted=y, reference=y_ann)["kappa"]                 # doctest: +SKIP

Rules of :func:`read_labels_csv` (every error names ``FILE:LINE: field`` and
all problems of a file are reported at once):

- the header must hold ``task_id``, ``after_step`` and the label column (with
  ``required=False`` a file without the label column gives ``{}``);
- an empty cell or ``-1`` means "no label": the boundary is left out;
- a label is ``0``, ``1``, ``0.0`` or ``1.0``; ``after_step`` an integer >= 1;
- a boundary may appear once (a second row is an error naming the first line);
- with ``trajectories``, the task must be in them and ``after_step`` <= its step count;
- a missing file raises :class:`FileNotFoundError`.

:func:`write_labels_csv` writes the same format (optionally with more columns
after the label), atomically. :func:`agreement` compares a predicted label set
with a reference on their shared boundaries: Cohen's kappa (scikit-learn),
accuracy, confusion matrix and positive rates.
"""

from __future__ import annotations

import csv
import io
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from interp.data.trajectory import Trajectory
from interp.io import atomic_write_bytes

LABEL_FIELDS = ("future_necessity", "externalization_gap")
Labels = dict[tuple[str, int], int]


def annotation_labels(trajectories: Iterable[Trajectory], field: str) -> Labels:
    """``{(task_id, after_step): label}`` from the trajectories' hand annotations (unset labels left out).

    ``field`` is one of ``LABEL_FIELDS``.
    """
    if field not in LABEL_FIELDS:
        raise ValueError(f"field: unknown label {field!r}; use one of {', '.join(LABEL_FIELDS)}")
    out: Labels = {}
    for traj in trajectories:
        for ann in traj.annotations:
            value = getattr(ann, field)
            if value is not None:
                out[(traj.task_id, ann.after_step)] = int(value)
    return out


def _row_problem(task_id: str, raw_b: str, raw_v: str, column: str,
                 steps: Mapping[str, int] | None) -> tuple[str, str] | None:
    """``(field, message)`` of the first rule a row breaks, or None (a valid row, labelled or not)."""
    if not task_id:
        return "task_id", "empty"
    try:
        b = int(raw_b)
    except ValueError:
        return "after_step", f"{raw_b!r} is not an integer"
    if steps is not None and task_id not in steps:
        return "task_id", f"unknown task {task_id!r} (not in the trajectory file)"
    if b < 1 or (steps is not None and b > steps[task_id]):
        return "after_step", f"{b} out of range " + (f"1..{steps[task_id]}" if steps is not None else ">= 1")
    if raw_v not in ("", "-1", "0", "1", "0.0", "1.0"):
        return column, f"{raw_v!r} is not 0 or 1 (empty or -1 = no label)"
    return None


def read_labels_csv(path: str | Path, column: str, trajectories: Iterable[Trajectory] | None = None,
                    required: bool = True) -> dict[tuple[str, int], int]:
    """``{(task_id, after_step): 0/1}`` from a CSV ``task_id,after_step,<column>``; errors name FILE:LINE: field.

    Empty cells and -1 mean "no label" and are skipped. With ``trajectories``,
    unknown task_ids and out-of-range boundaries are errors. With
    ``required=False`` a CSV without the column gives an empty mapping.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: file not found")
    steps = {t.task_id: t.n_steps for t in trajectories} if trajectories is not None else None
    out: Labels = {}
    problems: list[str] = []
    first_line: dict[tuple[str, int], int] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        absent = [c for c in ("task_id", "after_step") if c not in header]
        if column not in header:
            if not required and not absent:
                return {}
            absent.append(column)
        if absent:
            raise ValueError(f"{path}:1: header: missing column(s) {', '.join(absent)}; "
                             f"expected task_id,after_step,{column}")
        for line, row in enumerate(reader, start=2):
            task_id, raw_b, raw_v = ((row.get(c) or "").strip() for c in ("task_id", "after_step", column))
            problem = _row_problem(task_id, raw_b, raw_v, column, steps)
            if problem is not None:
                problems.append(f"{path}:{line}: {problem[0]}: {problem[1]}")
                continue
            if raw_v in ("", "-1"):
                continue
            key = (task_id, int(raw_b))
            if key in first_line:
                problems.append(f"{path}:{line}: after_step: duplicate boundary {task_id}@{key[1]} "
                                f"(first on line {first_line[key]})")
                continue
            first_line[key] = line
            out[key] = int(float(raw_v))
    if problems:
        raise ValueError(f"{len(problems)} problem(s) in {path}:\n" + "\n".join(problems[:50]))
    return out


def write_labels_csv(path: str | Path, rows: Iterable[Mapping[str, Any]], column: str,
                     extra: Sequence[str] = ()) -> Path:
    """Write ``task_id,after_step,<column>[,<extra>...]`` rows atomically (``\\n`` line ends); return the path.

    Each row maps those column names to values (a missing one is written
    empty; an empty label cell reads back as "no label").
    """
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=["task_id", "after_step", column, *extra], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path = Path(path)
    atomic_write_bytes(path, buf.getvalue().encode())
    return path


def agreement(predicted: Mapping[tuple[str, int], int],
              reference: Mapping[tuple[str, int], int]) -> dict[str, Any]:
    """Agreement of two label sets on their shared boundaries.

    Keys: ``n`` (shared boundaries), ``kappa`` (Cohen's, ``sklearn.metrics.cohen_kappa_score``
    with labels [0, 1]; None when undefined), ``accuracy``, ``confusion`` (rows:
    reference 0/1, columns: predicted 0/1), ``predicted_positive_rate`` and
    ``reference_positive_rate``; all None but ``n`` without shared boundaries.
    Fractions are rounded to 4 decimals.
    """
    from sklearn.exceptions import UndefinedMetricWarning
    from sklearn.metrics import cohen_kappa_score, confusion_matrix

    keys = sorted(set(predicted) & set(reference))
    if not keys:
        return {"n": 0, "kappa": None, "accuracy": None, "confusion": None,
                "predicted_positive_rate": None, "reference_positive_rate": None}
    pred = [int(predicted[k]) for k in keys]
    ref = [int(reference[k]) for k in keys]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)  # one class only: kappa undefined, reported as None
        kappa = float(cohen_kappa_score(ref, pred, labels=[0, 1]))
    return {"n": len(keys), "kappa": None if kappa != kappa else round(kappa, 4),
            "accuracy": round(sum(p == r for p, r in zip(pred, ref)) / len(keys), 4),
            "confusion": confusion_matrix(ref, pred, labels=[0, 1]).tolist(),
            "predicted_positive_rate": round(sum(pred) / len(pred), 4),
            "reference_positive_rate": round(sum(ref) / len(ref), 4)}
