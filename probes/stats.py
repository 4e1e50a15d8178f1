"""Uncertainty and controls for the probe: task bootstrap CIs, a max-over-candidates permutation test, a control task.

All three respect the task structure: samples of one task are correlated
(labels are often near-constant within a task), so the effective sample size
is closer to the number of tasks than to the number of boundaries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from interp.stats import task_resamples
from probes.config import ProbeConfig
from probes.data import FeatureSet
from probes.nested_cv import NestedCVResult, run_nested_cv
from probes.scan import candidate_aurocs

Metric = Callable[[np.ndarray, np.ndarray], float]


@dataclass
class BootstrapResult:
    """Percentile CIs per metric name ([low, high], None if no resample had two classes) and resamples used."""

    cis: dict[str, list[float] | None]
    n_used: int
    n_skipped: int


@dataclass
class PermutationResult:
    """Observed statistic, its null distribution [n_perm] and p = (1 + #(null >= observed)) / (1 + n_perm).

    candidate_auroc: the real-label AUROC per candidate (fs.keys order) whose max is `observed`.
    """

    observed: float
    null: np.ndarray
    p_value: float
    candidate_auroc: np.ndarray


def task_bootstrap(
    y: np.ndarray,
    score: np.ndarray,
    groups: np.ndarray,
    metrics: Mapping[str, Metric],
    n_boot: int,
    rng: np.random.Generator,
    level: float = 0.95,
) -> BootstrapResult:
    """Task-level percentile bootstrap CIs of metrics of pooled out-of-fold scores.

    Each resample draws as many tasks as there are, with replacement, takes all
    out-of-fold rows of the drawn tasks (a task drawn twice counts twice) and
    recomputes every metric on them; resamples with one class are skipped and
    counted. The scores are not refit: the CI covers which tasks were sampled,
    not the variability of the selection.
    """
    values: dict[str, list[float]] = {name: [] for name in metrics}
    skipped = 0
    for rows in task_resamples(groups, n_boot, rng):
        if np.unique(y[rows]).size < 2:
            skipped += 1
            continue
        for name, metric in metrics.items():
            values[name].append(metric(y[rows], score[rows]))
    tail = (1 - level) / 2
    cis = {
        name: [float(q) for q in np.quantile(v, [tail, 1 - tail])] if v else None
        for name, v in values.items()
    }
    return BootstrapResult(cis=cis, n_used=n_boot - skipped, n_skipped=skipped)


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


def permutation_test(fs: FeatureSet, config: ProbeConfig) -> PermutationResult:
    """Permutation p-value for "some searched candidate carries signal", accounting for the layer search.

    Statistic: the maximum over all (layer, pooling) candidates of the fixed
    probe's pooled grouped-CV AUROC (`candidate_aurocs`), i.e. the best point of
    the layer curve. It is recomputed, with the same folds, for `config.n_perm`
    label vectors from `permute_labels_across_tasks` (vectors with one class are
    redrawn). p = (1 + #(null >= observed)) / (1 + n_perm); with n_perm = 19 the
    smallest possible p is 0.05.
    """
    rng = config.rng("permutation")
    labels = [fs.y]
    while len(labels) < config.n_perm + 1:
        permuted = permute_labels_across_tasks(fs.y, fs.groups, rng)
        if np.unique(permuted).size == 2:
            labels.append(permuted)
    aurocs = candidate_aurocs(fs, np.stack(labels), config)
    statistic = np.nanmax(aurocs, axis=1)
    observed, null = float(statistic[0]), statistic[1:]
    return PermutationResult(
        observed=observed,
        null=null,
        p_value=float((1 + np.sum(null >= observed)) / (1 + config.n_perm)),
        candidate_auroc=aurocs[0],
    )


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
