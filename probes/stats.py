"""Uncertainty and controls for the probe: task bootstrap CIs, paired gains, permutation tests, a control task.

All of them respect the task structure: samples of one task are correlated
(labels are often near-constant within a task), so the effective sample size
is closer to the number of tasks than to the number of boundaries.

Permutation tests (`permutation_tests`) have two nulls (`NULLS`):

- ``across_tasks`` (`permute_labels_across_tasks`): each task receives another
  task's positive rate at random boundaries. It keeps the task clustering but
  destroys the label-by-position structure, so a probe that only reads
  position (step index, history length) beats it.
- ``within_length`` (`permute_labels_within_length`): whole label sequences,
  ordered by after_step, are swapped between tasks with the same number of
  samples. Every task keeps a label-by-position pattern that occurs in the
  data, so position alone does not beat it; what beats it is information
  that ties a task's labels to its own features.

and two statistics (`ProbeConfig.permutation`):

- ``"nested"`` (default, exact): the headline itself, the whole nested CV
  rerun on each permuted label vector (folds, inner search and threshold
  included), joblib-parallel over permutations;
- ``"fixed"`` (a fast screen): the maximum over (layer, pooling) candidates of
  the fixed probe's grouped-CV AUROC (the best point of the layer curve, not
  the headline), all label vectors scored on the real labels' folds in one
  batched scan.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np
from joblib import Parallel, delayed

from interp.progress import track
from interp.stats import percentile_ci, task_resamples
from probes.config import ProbeConfig
from probes.data import FeatureSet
from probes.nested_cv import NestedCVResult, run_nested_cv
from probes.scan import candidate_aurocs

NULLS = ("across_tasks", "within_length")
"""The permutation nulls, in report order (see the module docstring)."""

STATISTICS = {
    "fixed": "max over (layer, pooling) candidates of the fixed probe's pooled grouped-CV AUROC (best point of the "
             "layer curve), permuted labels scored on the real labels' outer folds",
    "nested": "the headline nested-CV AUROC; the whole task-level nested CV (folds, inner search, threshold) rerun "
              "on every permuted label vector",
}
"""What the permutation statistic is, per `ProbeConfig.permutation` (stored in probe_results.json)."""

Metric = Callable[[np.ndarray, np.ndarray], float]


@dataclass
class BootstrapResult:
    """Percentile CIs per metric name ([low, high], None if no resample had two classes) and resamples used."""

    cis: dict[str, list[float] | None]
    n_used: int
    n_skipped: int


@dataclass
class PermutationResult:
    """Observed statistic, its null distribution [n_valid] and p = (1 + #(null >= observed)) / (1 + n_valid).

    candidate_auroc: the real-label AUROC per candidate (fs.keys order) whose max is `observed` (fixed
    statistic only; None for the nested one). n_failed: permuted label vectors whose nested CV could not
    run (an outer training fold with one class); they are left out of `null`. fixed_tasks: tasks the null
    cannot move (alone in their length stratum under ``within_length``; 0 under ``across_tasks``).
    """

    observed: float
    null: np.ndarray
    p_value: float
    candidate_auroc: np.ndarray | None
    n_failed: int = 0
    fixed_tasks: int = 0


@dataclass
class PairedGain:
    """Gain (probe minus baseline) per metric on the pooled out-of-fold rows, its paired task-bootstrap CI."""

    estimate: dict[str, float]
    cis: dict[str, list[float] | None]
    n_used: int
    n_skipped: int


def task_bootstrap(y: np.ndarray, score: np.ndarray, groups: np.ndarray, metrics: Mapping[str, Metric], n_boot: int,
                   rng: np.random.Generator, level: float = 0.95) -> BootstrapResult:
    """Task-level percentile bootstrap CIs of metrics of pooled out-of-fold scores.

    Each resample draws as many tasks as there are, with replacement, takes all
    out-of-fold rows of the drawn tasks (a task drawn twice counts twice) and
    recomputes every metric on them; resamples with one class are skipped and
    counted. The scores are not refit: the CI covers which tasks were sampled,
    not the variability of the selection.
    """
    cis, skipped = _task_percentile_cis(
        y, groups, lambda rows: {name: m(y[rows], score[rows]) for name, m in metrics.items()}, list(metrics),
        n_boot, rng, level)
    return BootstrapResult(cis=cis, n_used=n_boot - skipped, n_skipped=skipped)


def _task_percentile_cis(y: np.ndarray, groups: np.ndarray, statistic: Callable[[np.ndarray], dict[str, float]],
                         names: list[str], n_boot: int, rng: np.random.Generator,
                         level: float) -> tuple[dict[str, list[float] | None], int]:
    """Percentile CIs of ``statistic(rows)`` over task resamples; resamples with one class are skipped (counted)."""
    values: dict[str, list[float]] = {}
    skipped = 0
    for rows in task_resamples(groups, n_boot, rng):
        if np.unique(y[rows]).size < 2:
            skipped += 1
            continue
        for name, value in statistic(rows).items():
            values.setdefault(name, []).append(value)
    cis = {name: [float(q) for q in percentile_ci(values[name], level)] if values.get(name) else None
           for name in names}
    return cis, skipped


def paired_gain(y: np.ndarray, score_base: np.ndarray, score_new: np.ndarray, groups: np.ndarray,
                metrics: Mapping[str, Metric], n_boot: int, rng: np.random.Generator,
                level: float = 0.95) -> PairedGain:
    """metric(y, score_new) - metric(y, score_base) with a percentile CI where both use the same resampled tasks.

    The two scores are out-of-fold scores of the same samples (rows aligned).
    Pairing matters: both estimates share the sampled tasks, so their
    difference varies far less than either alone. Resamples with one class
    are skipped and counted, as in `task_bootstrap`.
    """
    estimate = {name: float(m(y, score_new) - m(y, score_base)) for name, m in metrics.items()}
    cis, skipped = _task_percentile_cis(
        y, groups, lambda rows: {name: m(y[rows], score_new[rows]) - m(y[rows], score_base[rows])
                                 for name, m in metrics.items()}, list(metrics), n_boot, rng, level)
    return PairedGain(estimate=estimate, cis=cis, n_used=n_boot - skipped, n_skipped=skipped)


def permute_labels_across_tasks(y: np.ndarray, groups: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One null label vector that moves label patterns between whole tasks.

    Tasks are randomly permuted; each task receives the positive rate of the
    task it is paired with, realised as round(rate * its size) positives at
    random boundaries of the receiving task. This keeps the within-task
    clustering of labels (a task-constant label stays task-constant) and
    roughly the class balance, so the null has the same task-level effective
    sample size as the real labels. Permuting single samples across the whole
    dataset instead would break that clustering and give too-small p-values
    when labels are nearly constant within tasks.
    """
    tasks, task_of = np.unique(groups, return_inverse=True)
    rates = np.array([y[task_of == t].mean() for t in range(tasks.size)])
    donor = rng.permutation(tasks.size)
    permuted = np.zeros_like(y)
    for t in range(tasks.size):
        rows = np.flatnonzero(task_of == t)
        n_positive = int(np.rint(rates[donor[t]] * rows.size))
        permuted[rng.choice(rows, size=n_positive, replace=False)] = 1
    return permuted


def length_strata(groups: np.ndarray) -> list[np.ndarray]:
    """Task indices (into np.unique(groups)) grouped by their number of samples: the strata of ``within_length``."""
    tasks, counts = np.unique(groups, return_counts=True)
    return [np.flatnonzero(counts == c) for c in np.unique(counts)]


def permute_labels_within_length(
    y: np.ndarray, groups: np.ndarray, positions: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """One null label vector that swaps whole label sequences between tasks of equal length, keeping positions.

    Tasks with the same number of samples form a stratum; within each, tasks
    are randomly permuted and each receives its donor's labels in after_step
    order (`positions`): the k-th boundary of the receiver gets the label of
    the donor's k-th boundary. Every label-by-position pattern of the null
    occurs in the data, and class balance within a stratum is kept. A task
    alone in its stratum keeps its own labels (it can only make p larger).
    """
    tasks, task_of = np.unique(groups, return_inverse=True)
    ordered = [np.flatnonzero(task_of == t)[np.argsort(positions[task_of == t], kind="stable")]
               for t in range(tasks.size)]
    permuted = np.empty_like(y)
    for stratum in length_strata(groups):
        for receiver, donor in zip(stratum, rng.permutation(stratum)):
            permuted[ordered[receiver]] = y[ordered[donor]]
    return permuted


def null_labels(fs: FeatureSet, null: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` permuted label vectors [n, n_samples] drawn in order from `rng` under `null`; one-class draws are redrawn.

    Gives up (ValueError) when 1000 draws in a row have one class: the null
    cannot move the labels (e.g. ``within_length`` with every task alone in
    its stratum and one class per stratum).
    """
    if null not in NULLS:
        raise ValueError(f"unknown permutation null {null!r}; known: {', '.join(NULLS)}")
    labels: list[np.ndarray] = []
    failures = 0
    while len(labels) < n:
        if null == "across_tasks":
            permuted = permute_labels_across_tasks(fs.y, fs.groups, rng)
        else:
            permuted = permute_labels_within_length(fs.y, fs.groups, fs.positions(), rng)
        if np.unique(permuted).size == 2:
            labels.append(permuted)
            failures = 0
        else:
            failures += 1
            if failures >= 1000:
                raise ValueError(f"the {null!r} null drew 1000 one-class label vectors in a row")
    return np.stack(labels) if labels else np.zeros((0, fs.y.size), dtype=fs.y.dtype)


def permutation_test(fs: FeatureSet, config: ProbeConfig, null: str = "across_tasks") -> PermutationResult:
    """Permutation p-value of the probe under one null (`NULLS`) with the statistic of `config.permutation`."""
    return permutation_tests(fs, config, (null,))[null]


def permutation_tests(
    fs: FeatureSet, config: ProbeConfig, nulls: tuple[str, ...] = NULLS, observed: float | None = None
) -> dict[str, PermutationResult]:
    """p-values for "the probe carries signal" under each null, with the statistic of `config.permutation`.

    ``"fixed"``: the statistic is the max over (layer, pooling) candidates of
    the fixed probe's pooled grouped-CV AUROC (`candidate_aurocs`), which
    accounts for the layer search but not for the inner search; all label
    vectors of all nulls are scored in one batched scan on the real labels'
    folds. ``"nested"``: the statistic is the nested-CV AUROC (`observed`, the
    headline, computed here when not given); `run_nested_cv` is rerun on each
    permuted label vector with n_jobs=1, the permutations in parallel
    (`config.n_jobs`), so the result equals a plain loop over the same vectors.
    Each null draws `config.n_perm` vectors from its own generator
    (``config.rng("permutation")`` for across_tasks, ``config.rng("permutation:<null>")``
    otherwise). p = (1 + #(null >= observed)) / (1 + n_valid); with 19 valid
    permutations the smallest possible p is 0.05.
    """
    draws = {null: null_labels(fs, null, config.n_perm, config.rng(_rng_purpose(null))) for null in nulls}
    alone = sum(stratum.size == 1 for stratum in length_strata(fs.groups))
    fixed = {null: alone if null == "within_length" else 0 for null in nulls}
    results = {}
    if config.permutation == "fixed":
        aurocs = candidate_aurocs(fs, np.vstack([fs.y[None, :], *draws.values()]), config)
        statistic = np.nanmax(aurocs, axis=1)
        start = 1
        for null in nulls:
            values = statistic[start:start + config.n_perm]
            start += config.n_perm
            results[null] = _result(float(statistic[0]), values, aurocs[0], 0, fixed[null])
        return results
    if observed is None:
        observed = run_nested_cv(fs, config).auroc
    inner = replace(config, n_jobs=1)
    vectors = [(null, y) for null in nulls for y in draws[null]]
    values = []
    with track("permutations (nested CV)", total=len(vectors), unit="label vectors") as bar:
        for value in Parallel(n_jobs=config.n_jobs, return_as="generator")(
                delayed(_nested_auroc)(fs, y, inner) for _, y in vectors):
            values.append(value)  # in submission order (a generator of ordered results)
            bar.advance(info=f"{sum(v is not None for v in values)} valid")
    for null in nulls:
        got = [v for (name, _), v in zip(vectors, values) if name == null]
        valid = np.array([v for v in got if v is not None], dtype=float)
        results[null] = _result(observed, valid, None, len(got) - valid.size, fixed[null])
    return results


def _rng_purpose(null: str) -> str:
    return "permutation" if null == "across_tasks" else f"permutation:{null}"


def _result(observed: float, null: np.ndarray, candidate_auroc: np.ndarray | None, n_failed: int,
            fixed_tasks: int) -> PermutationResult:
    return PermutationResult(observed=observed, null=null,
                             p_value=float((1 + np.sum(null >= observed)) / (1 + null.size)),
                             candidate_auroc=candidate_auroc, n_failed=n_failed, fixed_tasks=fixed_tasks)


def _nested_auroc(fs: FeatureSet, y: np.ndarray, config: ProbeConfig) -> float | None:
    """The nested-CV AUROC of `fs` with labels `y`; None when the nested CV cannot run on them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # skipped inner folds are expected under permuted labels
        try:
            return run_nested_cv(replace(fs, y=y), config).auroc
        except ValueError:
            return None


def control_task(fs: FeatureSet, config: ProbeConfig) -> NestedCVResult:
    """The nested CV rerun on a control task (Hewitt & Liang 2019): labels the features cannot explain.

    Control labels are the real labels randomly permuted across all samples
    (seeded by config.seed; same class balance, no relation to the features).
    The identical nested pipeline, search included, is run on them; its AUROC
    (expected near 0.5) is what the search alone achieves, and
    selectivity = real AUROC - control AUROC.
    """
    control = replace(fs, y=config.rng("control").permutation(fs.y))
    return run_nested_cv(control, config)
