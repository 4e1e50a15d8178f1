"""Settings of one probe run: CV layout, search grids, resampling counts, seeds."""

from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from interp.params import N_BOOT, ConfigError, Flag, Integer, Items, Maybe, Options, Real, param, validate

ProbeParams = tuple[bool, int | None, float]
"""(standardize, pca, C): the hyperparameters of one `LinearProbe`."""


@dataclass(frozen=True)
class ProbeConfig:
    """Everything that decides a probe run; stored verbatim in probe_results.json.

    Search strategies (inner loop, per outer fold):

    - ``"two_stage"`` (default): rank every (layer, pooling) candidate with the
      fixed probe (``fixed_standardize``, no PCA, ``fixed_C``), then search
      standardize x pca x C on the winning candidate only.
    - ``"full"``: search the whole product candidates x grid. About twice the
      decompositions of two_stage and len(grid) times the (cheap) small fits;
      see `probes.nested_cv` for the cost model.

    The fixed probe is also the probe of the layer curve and of the fast
    permutation screen. ``permutation`` picks the statistic of the
    permutation tests (`probes.stats`): ``"nested"`` (default: the headline
    nested-CV AUROC itself, the whole nested CV rerun per permutation,
    parallel over permutations) or ``"fixed"`` (a fast screen: max over
    candidates of the fixed probe's AUROC, one batched scan; it tests the
    best point of the layer curve, not the headline). Cost of the default
    (``benchmarks/RESULTS.md``): one nested CV per permuted label vector and
    null, ~9 CPU-s on the demo's SmolLM2 features (168 labelled boundaries,
    120 candidates, d = 576; ~22 with the L-BFGS solver the span path used
    before) and ~28 CPU-s at the reference study's scale (measured with
    L-BFGS), so ``n_perm = 100`` under both nulls is ~30 CPU-min on the demo
    (the demo runs 10: smallest p 1/11) and ~47 min on 2 cores at study scale; the smallest possible p is
    1 / (1 + n_perm), reported as ``permutation_p_min``. ``baselines`` runs the position
    baseline and probe + baseline through the same nested CV
    (`probes.baselines`) when the samples carry nuisance features.
    ``n_boot = 0`` or ``n_perm = 0`` skips the bootstrap or the permutation
    tests; ``n_jobs`` follows joblib (-1: all cores).
    """

    analysis: ClassVar[str] = "probe"
    precision: ClassVar[str | None] = None  # reads a store; runs no model

    outer: Literal["kfold", "loto"] = param("kfold", Options(("kfold", "loto")),
                                            "Outer CV: kfold, or loto (leave one task out).")
    n_outer: int = param(5, Integer(2), "Outer folds of outer=kfold (needs at least as many labelled tasks).")
    n_inner: int = param(3, Integer(2), "Inner folds of the hyperparameter search.")
    seed: int = param(0, Integer(0), "Seed of the splits, bootstrap and permutations.")
    search: Literal["two_stage", "full"] = param("two_stage", Options(("two_stage", "full")),
                                                 "Inner search: two_stage or full (see ProbeConfig).")
    standardize_grid: tuple[bool, ...] = param((True, False), Items(Flag(), unique=True),
                                               "Inner grid of standardize (comma list of true/false).")
    pca_grid: tuple[int | None, ...] = param((None, 16, 64), Items(Maybe(Integer(1), "no PCA"), unique=True),
                                             "Inner grid of PCA sizes (comma list; none: no PCA).")
    C_grid: tuple[float, ...] = param((0.01, 0.1, 1.0, 10.0), Items(Real(0, low_open=True), unique=True),
                                      "Inner grid of the inverse L2 strength C (comma list).", option="--c-grid")
    fixed_standardize: bool = param(True, Flag(), "Standardize in the fixed probe (screening, layer curve).")
    fixed_C: float = param(1.0, Real(0, low_open=True), "C of the fixed probe.", option="--fixed-c")
    n_boot: int = param(N_BOOT, Integer(0), "Task-bootstrap resamples for CIs (0: none).")
    n_perm: int = param(100, Integer(0), "Permutations per null for the p-values (0: none).")
    permutation: Literal["fixed", "nested"] = param(
        "nested", Options(("fixed", "nested")), "Permutation statistic: nested (the headline nested-CV AUROC, the "
        "whole nested CV rerun per permutation) or fixed (a fast screen: max over candidates of the fixed probe's "
        "AUROC).")
    baselines: bool = param(True, Flag(), "Also run the position baseline and probe + baseline through the same "
                            "nested CV.")
    n_jobs: int = param(-1, Integer(-1), "Parallel outer folds / permutations (joblib; -1: all cores).")

    def __post_init__(self) -> None:
        validate(self)
        if self.n_jobs == 0:
            raise ConfigError("n_jobs", "must be a positive number of workers or -1 (all cores), got 0")

    @property
    def outer_splits(self) -> int | Literal["loto"]:
        """The outer fold spec for `grouped_splits`."""
        return "loto" if self.outer == "loto" else self.n_outer

    @property
    def min_tasks(self) -> int:
        """Fewest distinct tasks the outer CV can split."""
        return 2 if self.outer == "loto" else self.n_outer

    @property
    def fixed_params(self) -> ProbeParams:
        """Hyperparameters of the fixed probe (screening, layer curve, permutation statistic)."""
        return (self.fixed_standardize, None, self.fixed_C)

    def grid(self) -> list[ProbeParams]:
        """The inner search grid standardize x pca x C, in a fixed order (ties go to the earlier entry)."""
        return list(itertools.product(self.standardize_grid, self.pca_grid, self.C_grid))

    def rng(self, purpose: str) -> np.random.Generator:
        """An independent generator per purpose ('outer', 'inner', 'bootstrap', ...), all derived from `seed`."""
        return np.random.default_rng([self.seed, zlib.crc32(purpose.encode())])

    def split_seed(self, purpose: str) -> int:
        """An integer seed for sklearn splitters, derived like `rng`."""
        return int(self.rng(purpose).integers(2**31 - 1))
