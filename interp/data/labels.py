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
- a missing file raises :class:`FileNotFoundError`;
- ids, notes and every other text are kept exactly as written (never stripped: ``" a"`` is not ``"a"``);
- a cell starting with ``'`` before a formula character loses that ``'``
  (:func:`write_labels_csv` guards text cells against spreadsheet formulas that
  way, :func:`guard_cell`).

Every label file (hand labels, adjudication, review, the judge's, the rule
labelers') is written by :func:`labels_csv_text` and read by
:func:`parse_labels_csv`: RFC 4180 (``\\r\\n`` line ends; a cell holding a comma,
quote, CR or LF is quoted), every text cell guarded against spreadsheet formulas
(:func:`guard_cell`: a leading ``'`` before ``=``, ``+``, ``-``, ``@``, tab or
CR, also after leading spaces) after quoting and unguarded on read, so any text
round-trips byte for byte. :func:`agreement` compares a predicted label set
with a reference on their shared boundaries: Cohen's kappa (scikit-learn),
accuracy, confusion matrix and positive rates.

Honest agreement of a rule labeler whose thresholds are tuned on annotations:
:func:`task_split` splits the tasks (seeded, stratified, disjoint),
:func:`held_out_agreement` tunes a labeler (any ``config -> labels`` function
and a config grid) on the tuning tasks only and reports its kappa on the
held-out tasks, with :func:`kappa_ci` (a task-bootstrap CI of kappa, the
resampling rule of ``interp.stats``).

Two annotators: :func:`pair_agreement` is the report of ``interp labels
agree`` (kappa with a task-bootstrap CI, the confusion table with rows = the
first annotator, :func:`disagreements`, the boundaries where they differ, and
:func:`kappa_note`, why kappa is undefined or 0 when an annotator used one
class). Many annotators: :func:`annotator_counts` (who labelled what) and
:func:`overlap` (boundaries each pair shares) are ``interp labels status``.
"""

from __future__ import annotations

import csv
import io
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from interp.data.trajectory import Trajectory
from interp.io import atomic_write_bytes, read_text

V = TypeVar("V")  # a CSV cell value

LABEL_FIELDS = ("future_necessity", "externalization_gap")
Labels = dict[tuple[str, int], int]
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet runs a cell starting so as a formula
# A cell a spreadsheet runs: a formula start, after any quotes and white space (Excel trims a leading space). The
# leading ``'`` are part of the prefix, so adding one more ``'`` keeps a guarded cell guarded and is reversible.
_FORMULA = re.compile(r"['\s]*[=+\-@\t\r]")


def guard_cell(value: V) -> V | str:
    """A CSV cell no spreadsheet runs: a text that starts with ``= + - @``, tab or CR after any quotes and white
    space gets a leading ``'`` (so :func:`unguard_cell` reverses it exactly); other values are returned as they are."""
    if isinstance(value, str) and _FORMULA.match(value):
        return "'" + value
    return value


def unguard_cell(text: str) -> str:
    """The text :func:`guard_cell` was given (one leading ``'`` dropped before a guarded formula start), else
    ``text``."""
    return text[1:] if text.startswith("'") and _FORMULA.match(text, 1) else text


def labels_csv_text(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """The CSV text of ``rows`` under ``columns`` (RFC 4180: ``\\r\\n`` line ends, every cell holding a comma, quote,
    CR or LF quoted, so it stays one cell), text cells guarded against formulas (:func:`guard_cell`), a missing or
    None value empty. The one writer of every label file (hand labels, adjudication, review, judge, rule labels)."""
    buf = io.StringIO()
    writer = csv.writer(buf, quoting=csv.QUOTE_MINIMAL, lineterminator="\r\n")  # quotes the cells with CR or LF
    writer.writerow(columns)
    for row in rows:
        writer.writerow([guard_cell(row.get(c)) for c in columns])
    return buf.getvalue()


def parse_labels_csv(text: str, path: str | Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """``(header, [(line, {column: cell})])`` of a label file's text: RFC 4180 (quoted cells may hold commas,
    quotes, CR and LF), cells unguarded (:func:`unguard_cell`) and never stripped, a missing cell empty, blank
    lines skipped; ``line`` is where the row starts. A leading UTF-8 BOM is dropped. Malformed quoting is a
    ValueError naming ``FILE:LINE``. The one reader of every label file."""
    reader = csv.reader(io.StringIO(text.removeprefix("\ufeff"), newline=""), strict=True)
    rows: list[tuple[int, dict[str, str]]] = []
    header: list[str] | None = None
    start = 1
    try:
        for cells in reader:
            if header is None:
                header = cells
            elif cells:
                rows.append((start, {c: unguard_cell(cells[i]) if i < len(cells) else ""
                                     for i, c in enumerate(header)}))
            start = reader.line_num + 1
    except csv.Error as exc:
        raise ValueError(f"{path}:{start}: not a valid CSV row ({exc}); quote a cell holding a comma, quote or "
                         "line break") from None
    return header or [], rows


def read_label_table(path: str | Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """:func:`parse_labels_csv` of a file; :class:`FileNotFoundError` naming it when it is missing."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: file not found")
    return parse_labels_csv(read_text(path, newline=""), path)


def final_boundaries(trajectories: Iterable[Trajectory]) -> set[tuple[str, int]]:
    """Each trajectory's last boundary ``(task_id, n_steps)``: nothing follows it, so y is undefined there.

    The one home of that rule: the rule labeler (``probes.targets``) emits no
    label there, the probe (``probes.data``) marks it missing, and the risk
    table (``interp.externalization.risk``) leaves it out.
    """
    return {(t.task_id, t.n_steps) for t in trajectories}


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
        near = [t for t in steps if t.strip() == task_id.strip()]
        hint = f"; the file has {near[0]!r} (ids are compared exactly, spaces included)" if near else ""
        return "task_id", f"unknown task {task_id!r} (not in the trajectory file{hint})"
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
    header, rows = read_label_table(path)
    return labels_from_table(header, rows, path, column, trajectories, required)


def labels_from_table(header: Sequence[str], rows: Sequence[tuple[int, Mapping[str, str]]], path: str | Path,
                      column: str, trajectories: Iterable[Trajectory] | None = None,
                      required: bool = True) -> dict[tuple[str, int], int]:
    """:func:`read_labels_csv` of a table :func:`parse_labels_csv` read: the ids as written (never stripped; the
    numbers may carry spaces)."""
    steps = {t.task_id: t.n_steps for t in trajectories} if trajectories is not None else None
    out: Labels = {}
    problems: list[str] = []
    first_line: dict[tuple[str, int], int] = {}
    absent = [c for c in ("task_id", "after_step") if c not in header]
    if column not in header:
        if not required and not absent:
            return {}
        absent.append(column)
    if absent:
        raise ValueError(f"{path}:1: header: missing column(s) {', '.join(absent)}; "
                         f"expected task_id,after_step,{column}")
    for line, row in rows:
        task_id, raw_b, raw_v = row["task_id"], row["after_step"].strip(), row[column].strip()
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
    if len(problems) == 1:
        raise ValueError(problems[0])
    if problems:
        raise ValueError(f"{len(problems)} problem(s) in {path}:\n" + "\n".join(problems[:50]))
    return out


def write_labels_csv(path: str | Path, rows: Iterable[Mapping[str, Any]], column: str,
                     extra: Sequence[str] = ()) -> Path:
    """Write ``task_id,after_step,<column>[,<extra>...]`` rows atomically (:func:`labels_csv_text`); return the path.

    Each row maps those column names to values (a missing one is written
    empty; an empty label cell reads back as "no label").
    """
    path = Path(path)
    atomic_write_bytes(path, labels_csv_text(rows, ["task_id", "after_step", column, *extra]).encode())
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


def task_split(task_ids: Iterable[str], strata: Mapping[str, str] | None = None, tune_fraction: float = 0.5,
               seed: int = 0) -> tuple[list[str], list[str]]:
    """``(tune_tasks, eval_tasks)``: a seeded split of the distinct tasks, disjoint, stratified by ``strata[task]``.

    Within each stratum (e.g. the trajectory domain) the tasks are shuffled with
    ``random.Random(f"{seed}:{stratum}")`` and the first ``round(tune_fraction * n)``
    go to tuning (at least one task to each side when the stratum has two or more).
    """
    import random

    if not 0.0 < tune_fraction < 1.0:
        raise ValueError(f"tune_fraction must be in (0, 1), got {tune_fraction!r}")
    tasks = sorted(set(task_ids))
    groups: dict[str, list[str]] = {}
    for task in tasks:
        groups.setdefault((strata or {}).get(task, ""), []).append(task)
    tune: list[str] = []
    held: list[str] = []
    for stratum in sorted(groups):
        members = groups[stratum]
        random.Random(f"{seed}:{stratum}").shuffle(members)
        k = round(tune_fraction * len(members))
        if len(members) >= 2:
            k = min(max(k, 1), len(members) - 1)
        tune += members[:k]
        held += members[k:]
    return sorted(tune), sorted(held)


def kappa_ci(predicted: Mapping[tuple[str, int], int], reference: Mapping[tuple[str, int], int],
             n_boot: int, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """:func:`agreement` plus ``kappa_ci``: a task-bootstrap percentile CI of Cohen's kappa (``interp.stats``).

    Resamples tasks with replacement (all boundaries of a drawn task); resamples
    where kappa is undefined (one class only) are left out, ``n_boot_defined``
    counts the others. ``kappa_ci`` is None without two tasks or a defined kappa; ``kappa_ci_note`` says when the
    CI says little or nothing (:func:`interp.data.reliability.ci_note`).
    """
    import numpy as np
    from sklearn.exceptions import UndefinedMetricWarning
    from sklearn.metrics import cohen_kappa_score

    from interp.data.reliability import ci_note
    from interp.stats import percentile_ci, task_resamples

    out = agreement(predicted, reference)
    keys = sorted(set(predicted) & set(reference))
    groups = np.array([k[0] for k in keys])
    out.update(kappa_ci=None, n_tasks=len(set(groups.tolist())), n_boot=n_boot, n_boot_defined=0)
    if out["kappa"] is None or out["n_tasks"] < 2:
        out["kappa_ci_note"] = ci_note(out["n_tasks"], out["kappa"], [], n_boot, "undefined, so no CI")
        return out
    pred = np.array([int(predicted[k]) for k in keys])
    ref = np.array([int(reference[k]) for k in keys])
    kappas = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        for rows in task_resamples(groups, n_boot, np.random.default_rng(seed)):
            k = float(cohen_kappa_score(ref[rows], pred[rows], labels=[0, 1]))
            if k == k:
                kappas.append(k)
    out["n_boot_defined"] = len(kappas)
    out["kappa_ci_note"] = ci_note(out["n_tasks"], out["kappa"], kappas, n_boot)
    if kappas:
        out["kappa_ci"] = [round(float(bound), 4) for bound in percentile_ci(kappas, level)]
    return out


def held_out_agreement(label_fn: Callable[[Any], Mapping[tuple[str, int], int]], grid: Sequence[Any],
                       reference: Mapping[tuple[str, int], int], split: tuple[Sequence[str], Sequence[str]],
                       default: object = None, *, n_boot: int, seed: int = 0) -> dict[str, Any]:
    """Tune a rule labeler on some tasks, report its agreement on other tasks (held-out kappa with a task-bootstrap CI).

    ``label_fn(config)`` labels every boundary under one config of ``grid``;
    ``split = (tune_tasks, eval_tasks)`` must be disjoint (else ValueError). The
    config with the highest kappa against ``reference`` on the tuning tasks is
    chosen (ties: the earlier in ``grid``); its agreement on the evaluation tasks
    is ``held_out`` (:func:`kappa_ci`). With ``default`` (the labeler's shipped
    config), its agreement on the evaluation tasks is ``default_held_out``.
    Configs are recorded with ``dataclasses.asdict`` when they are dataclasses.
    """
    import dataclasses

    tune, held = set(split[0]), set(split[1])
    if tune & held:
        raise ValueError(f"tuning and evaluation tasks overlap: {sorted(tune & held)[:5]}")
    if not tune or not held:
        raise ValueError("the split needs at least one tuning task and one evaluation task")
    if not grid:
        raise ValueError("the config grid is empty")

    def describe(config: object) -> dict[str, Any] | str:
        if dataclasses.is_dataclass(config) and not isinstance(config, type):
            return dataclasses.asdict(config)
        return repr(config)

    def part(labels: Mapping[tuple[str, int], int], tasks: set[str]) -> dict[tuple[str, int], int]:
        return {k: v for k, v in labels.items() if k[0] in tasks}

    scored = []
    for config in grid:
        labels = label_fn(config)
        tuned = agreement(part(labels, tune), part(reference, tune))
        scored.append((config, labels, tuned))
    best = max(range(len(scored)), key=lambda i: (-1.0 if scored[i][2]["kappa"] is None else scored[i][2]["kappa"], -i))
    config, labels, tuned = scored[best]
    out = {
        "tune_tasks": sorted(tune), "eval_tasks": sorted(held),
        "grid": [{"config": describe(c), "tune_kappa": a["kappa"]} for c, _, a in scored],
        "chosen": describe(config), "tune": tuned,
        "held_out": kappa_ci(part(labels, held), part(reference, held), n_boot, seed),
        "default": None, "default_held_out": None,
    }
    if default is not None:
        out["default"] = describe(default)
        out["default_held_out"] = kappa_ci(part(label_fn(default), held), part(reference, held), n_boot, seed)
    return out


def disagreements(first: Mapping[tuple[str, int], int],
                  second: Mapping[tuple[str, int], int]) -> list[dict[str, Any]]:
    """``[{task_id, after_step, first, second}]``: the shared boundaries where two label sets differ, sorted."""
    return [{"task_id": k[0], "after_step": k[1], "first": int(first[k]), "second": int(second[k])}
            for k in sorted(set(first) & set(second)) if int(first[k]) != int(second[k])]


def kappa_note(first: Mapping[tuple[str, int], int], second: Mapping[tuple[str, int], int],
               names: tuple[str, str] = ("first", "second")) -> str:
    """Why Cohen's kappa of two label sets says little or nothing, in one sentence; empty when it is informative.

    On the shared boundaries kappa = (p_o - p_e) / (1 - p_e), p_e the agreement
    expected from the two annotators' class rates. Both used one and the same
    class: p_e = 1, kappa is 0/0, undefined. One used a single class: p_e = p_o,
    kappa is 0 whatever the other did (no agreement beyond chance can be shown).
    """
    keys = set(first) & set(second)
    if not keys:
        return "kappa undefined: no boundary labelled by both"
    used = [sorted({int(labels[k]) for k in keys}) for labels in (first, second)]
    n = len(keys)
    if len(used[0]) == 1 and used[0] == used[1]:
        return (f"kappa undefined: {names[0]} and {names[1]} both used only class {used[0][0]} on the {n} shared "
                f"boundaries, so chance agreement is 1 and kappa is 0/0 (accuracy {n}/{n} says nothing either)")
    single = [(name, u[0]) for name, u in zip(names, used) if len(u) == 1]
    if single:
        name, cls = single[0]
        return (f"kappa is 0 by construction: {name} used only class {cls} on the {n} shared boundaries, so "
                f"observed agreement equals chance agreement")
    return ""


def pair_agreement(first: Mapping[tuple[str, int], int], second: Mapping[tuple[str, int], int],
                   n_boot: int, seed: int = 0, level: float = 0.95,
                   names: tuple[str, str] = ("first", "second")) -> dict[str, Any]:
    """Agreement of two annotators: :func:`kappa_ci` at ``level`` (confusion rows = ``first``, columns =
    ``second``) plus ``only_first``/``only_second`` (boundaries one of them labelled), ``disagreements``,
    ``level`` and ``kappa_note`` (:func:`kappa_note`: why kappa is undefined or 0 by construction, else empty)."""
    out = kappa_ci(predicted=second, reference=first, n_boot=n_boot, seed=seed, level=level)
    out["level"] = level
    out["first_positive_rate"] = out.pop("reference_positive_rate")
    out["second_positive_rate"] = out.pop("predicted_positive_rate")
    out["only_first"] = len(set(first) - set(second))
    out["only_second"] = len(set(second) - set(first))
    out["disagreements"] = disagreements(first, second)
    out["kappa_note"] = kappa_note(first, second, names)
    return out


def annotator_counts(path: str | Path, fields: Sequence[str]) -> dict[str, dict[str, int]]:
    """``{annotator: {field: labels}}`` of a labels CSV (the ``annotator`` column, else the file's stem), counting
    the cells :func:`read_labels_csv` reads as labels; call that first to validate the file."""
    path = Path(path)
    out: dict[str, dict[str, int]] = {}
    for _, row in read_label_table(path)[1]:
        who = row.get("annotator") or path.stem
        for name in fields:
            if row.get(name, "").strip() not in ("", "-1"):
                counts = out.setdefault(who, {f: 0 for f in fields})
                counts[name] += 1
    return out


def overlap(sets: Mapping[str, Mapping[tuple[str, int], int]]) -> dict[tuple[str, str], int]:
    """``{(a, b): shared boundaries}`` for every pair of named label sets (a before b in ``sets``' order): the
    boundaries on which their agreement can be measured."""
    names = list(sets)
    return {(a, b): len(set(sets[a]) & set(sets[b])) for i, a in enumerate(names) for b in names[i + 1:]}
