"""Agreement of any number of annotators a study can report: percent agreement, Krippendorff's alpha, Gwet's AC1.

The data are label sets ``{name: {(task_id, after_step): value}}`` (one per
annotator, a judge or a file; :mod:`interp.data.labels`); a boundary any
annotator labelled is a *unit*, and an annotator who did not label it is
missing data. :func:`unit_counts` turns them into a units x categories count
matrix (``counts[u, c]``: how many annotators gave unit ``u`` category ``c``),
the only input of the coefficients (nominal data; every one is a function of
the counts, so any number of annotators and missing labels are handled alike):

- :func:`percent_agreement`: over units with two or more labels, the share of
  agreeing ordered pairs of annotators per unit, averaged over units (two
  annotators: the share of boundaries where they agree);
- :func:`krippendorff_alpha`: nominal alpha, ``1 - (n - 1) * D_o / D_e`` on the
  coincidence matrix of the pairable units (Krippendorff 2011, "Computing
  Krippendorff's Alpha-Reliability"); undefined (None) with a single value in
  the data (no expected disagreement) or fewer than two pairable labels;
- :func:`gwet_ac1`: Gwet's AC1 for any number of raters with missing ratings
  (Gwet 2014, Handbook of Inter-Rater Reliability, 4th ed., ch. 2):
  ``p_a`` as percent agreement, ``p_e = sum_k pi_k (1 - pi_k) / (q - 1)`` with
  ``pi_k`` the mean share of category k per unit rated at least once and ``q``
  the number of categories (2 for 0/1 labels, whether or not both are used).
  Stable where kappa collapses (one class dominant).

:func:`reliability` reports each with a task-level bootstrap CI (resample tasks
with replacement, all boundaries of a drawn task; :mod:`interp.stats`) and a
``note`` saying when the CI says little or nothing (:func:`ci_note`): no CI
under ``2`` tasks, few tasks (under :data:`FEW_TASKS`), a statistic undefined in
some resamples (left out) or every resample giving the same value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

FEW_TASKS = 10  # under this many tasks a task bootstrap's percentile CI is too narrow to take at its word
STATISTICS = ("percent_agreement", "krippendorff_alpha", "gwet_ac1")


def unit_counts(sets: Mapping[str, Mapping[Any, Any]], categories: Sequence[Any] | None = None
                ) -> tuple[list[Any], np.ndarray, list[Any]]:
    """``(units, counts [n_units, n_categories], categories)``: per unit any annotator labelled (sorted), how many
    annotators gave each category; ``categories`` default to the values seen (sorted)."""
    units = sorted({k for labels in sets.values() for k in labels})
    cats = list(categories) if categories is not None else sorted({v for s in sets.values() for v in s.values()})
    col = {c: i for i, c in enumerate(cats)}
    counts = np.zeros((len(units), len(cats)), dtype=np.int64)
    row = {u: i for i, u in enumerate(units)}
    for labels in sets.values():
        for unit, value in labels.items():
            if value not in col:
                raise ValueError(f"value {value!r} of {unit!r} is not one of the categories {cats}")
            counts[row[unit], col[value]] += 1
    return units, counts, cats


def percent_agreement(counts: np.ndarray) -> float | None:
    """Mean over units with >= 2 labels of the share of agreeing ordered annotator pairs; None without such a unit."""
    m = counts.sum(axis=1)
    keep = m >= 2
    if not keep.any():
        return None
    c, m = counts[keep].astype(float), m[keep].astype(float)
    return float(np.mean((c * (c - 1)).sum(axis=1) / (m * (m - 1))))


def krippendorff_alpha(counts: np.ndarray) -> float | None:
    """Nominal Krippendorff's alpha of a units x categories count matrix (units with < 2 labels are not pairable
    and left out); None when undefined (fewer than 2 pairable labels, or a single value: no expected disagreement)."""
    m = counts.sum(axis=1)
    c = counts[m >= 2].astype(float)
    m = m[m >= 2].astype(float)
    n_c = c.sum(axis=0)
    n = n_c.sum()
    expected = n * n - (n_c * n_c).sum()  # sum over c != k of n_c n_k
    if n < 2 or expected == 0:
        return None
    observed = ((m * m - (c * c).sum(axis=1)) / (m - 1)).sum()  # sum over c != k of the coincidences o_ck
    return float(1.0 - (n - 1) * observed / expected)


def gwet_ac1(counts: np.ndarray) -> float | None:
    """Gwet's AC1 of a units x categories count matrix (q = its number of columns, >= 2), any number of raters,
    missing ratings allowed; None without a unit with >= 2 labels."""
    p_a = percent_agreement(counts)
    q = counts.shape[1]
    if p_a is None or q < 2:
        return None
    m = counts.sum(axis=1)
    rated = counts[m >= 1].astype(float) / m[m >= 1, None]
    pi = rated.mean(axis=0)
    p_e = float((pi * (1 - pi)).sum() / (q - 1))
    return (p_a - p_e) / (1 - p_e)


STATISTIC_FUNCTIONS = {"percent_agreement": percent_agreement, "krippendorff_alpha": krippendorff_alpha,
                       "gwet_ac1": gwet_ac1}


def undefined_reason(counts: np.ndarray, categories: Sequence[Any]) -> str:
    """Why a coefficient of ``counts`` is undefined, in one sentence."""
    if not (counts.sum(axis=1) >= 2).any():
        return "undefined: no boundary labelled by two annotators, so no CI"
    used = [c for c, n in zip(categories, counts[counts.sum(axis=1) >= 2].sum(axis=0)) if n]
    if len(used) == 1:
        return (f"undefined: every label on the shared boundaries is {used[0]!r}, so no disagreement is expected by "
                "chance (0/0), and no CI")
    return "undefined on these labels, so no CI"


def ci_note(n_tasks: int, value: float | None, draws: Sequence[float], n_boot: int, undefined: str = "") -> str:
    """Why a task-bootstrap CI says little or nothing, in one sentence (empty when nothing to say); ``undefined``
    is the reason when ``value`` is None."""
    if value is None:
        return undefined or "undefined on these labels, so no CI"
    if n_boot == 0:
        return "no CI (--n-boot 0)"
    if n_tasks < 2:
        return f"no CI: {n_tasks} task, and a task bootstrap needs at least 2"
    notes = []
    if n_tasks < FEW_TASKS:
        notes.append(f"only {n_tasks} tasks (fewer than {FEW_TASKS}): the CI is too narrow, read it as a lower "
                     "bound on the uncertainty")
    if len(draws) < n_boot:
        notes.append(f"{n_boot - len(draws)} of {n_boot} resamples undefined (one class only) and left out")
    if draws and max(draws) == min(draws):
        notes.append("degenerate: every resample gave the same value (too few tasks or classes to vary)")
    return "; ".join(notes)


def reliability(sets: Mapping[str, Mapping[tuple[str, int], Any]], categories: Sequence[Any] = (0, 1),
                *, n_boot: int, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """Percent agreement, Krippendorff's alpha and Gwet's AC1 of any number of label sets, each with a task-bootstrap
    percentile CI at ``level`` and a ``note`` (:func:`ci_note`), unrounded.

    Returns ``{n_annotators, n_units, n_pairable, n_tasks, n_boot, level, <statistic>: {value, ci, n_boot_defined,
    note}}``; ``ci`` is ``[lo, hi]`` or None.
    """
    from interp.stats import percentile_ci, task_resamples

    units, counts, cats = unit_counts(sets, categories)
    groups = np.array([u[0] for u in units], dtype=object)
    n_tasks = len(set(groups.tolist()))
    out: dict[str, Any] = {"n_annotators": len(sets), "n_units": len(units),
                           "n_pairable": int((counts.sum(axis=1) >= 2).sum()), "n_tasks": n_tasks,
                           "n_boot": n_boot, "level": level}
    values = {name: fn(counts) for name, fn in STATISTIC_FUNCTIONS.items()}
    draws: dict[str, list[float]] = {name: [] for name in STATISTICS}
    if n_tasks >= 2 and n_boot > 0 and any(v is not None for v in values.values()):
        for rows in task_resamples(groups, n_boot, np.random.default_rng(seed)):
            for name, fn in STATISTIC_FUNCTIONS.items():
                if values[name] is not None and (v := fn(counts[rows])) is not None:
                    draws[name].append(v)
    for name in STATISTICS:
        ci = ([float(b) for b in percentile_ci(draws[name], level)] if draws[name] and n_tasks >= 2 else None)
        out[name] = {"value": values[name], "ci": ci, "n_boot_defined": len(draws[name]),
                     "note": ci_note(n_tasks, values[name], draws[name], n_boot,
                                        undefined_reason(counts, cats) if values[name] is None else "")}
    return out
