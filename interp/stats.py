"""The one task-level bootstrap: resample tasks with replacement, keep every row of a drawn task.

Rows of one task are not independent (same trajectory, same agent run), so
every confidence interval in this package resamples *tasks*: each resample
draws as many tasks as there are, with replacement, and takes all rows of the
drawn tasks (a task drawn twice counts twice). :func:`task_resamples` is that
rule; :func:`task_bootstrap_ci` applies it to column means (KL Repair per
site, risks, continuation scores) and ``probes.stats.task_bootstrap`` to
probe metrics of out-of-fold scores. :func:`percentile_ci` is the one
percentile step every bootstrap in the toolkit ends with (the equal-tailed
interval of the resampled statistics).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from numpy.typing import ArrayLike


def task_resamples(groups: np.ndarray, n_boot: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Yield ``n_boot`` row-index arrays, each the rows of ``len(tasks)`` tasks drawn with replacement."""
    tasks, task_of = np.unique(np.asarray(groups), return_inverse=True)
    members = [np.flatnonzero(task_of == t) for t in range(tasks.size)]
    for _ in range(n_boot):
        yield np.concatenate([members[t] for t in rng.integers(tasks.size, size=tasks.size)])


def task_bootstrap_ci(values: np.ndarray, groups: np.ndarray, n_boot: int, seed: int = 0,
                      level: float = 0.95) -> np.ndarray:
    """Per-column percentile CI ``[n_cols, 2]`` of the nan-mean of ``values`` ``[n_rows, n_cols]`` over tasks."""
    rng = np.random.default_rng(seed)
    means = [np.nanmean(values[rows], axis=0) for rows in task_resamples(groups, n_boot, rng)]
    return percentile_ci(np.array(means), level, ignore_nan=True)


def percentile_ci(draws: ArrayLike, level: float = 0.95, ignore_nan: bool = False) -> np.ndarray:
    """Equal-tailed percentile interval ``[..., 2]`` (lo, hi) of bootstrap ``draws`` over their first axis.

    ``ignore_nan`` skips NaN draws (a column undefined in some resamples); otherwise a NaN draw makes the bound NaN.
    """
    tails = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
    lo, hi = (np.nanpercentile if ignore_nan else np.percentile)(np.asarray(draws, dtype=float), tails, axis=0)
    return np.stack([lo, hi], axis=-1)
