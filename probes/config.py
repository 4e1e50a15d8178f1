"""Settings of one probe run: CV layout, search grids, resampling counts, seeds."""

from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

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

    outer: Literal["kfold", "loto"] = "kfold"
    n_outer: int = 5
    n_inner: int = 3
    seed: int = 0
    search: Literal["two_stage", "full"] = "two_stage"
    standardize_grid: tuple[bool, ...] = (True, False)
    pca_grid: tuple[int | None, ...] = (None, 16, 64)
    C_grid: tuple[float, ...] = (0.01, 0.1, 1.0, 10.0)
    fixed_standardize: bool = True
    fixed_C: float = 1.0
    n_boot: int = 1000
    n_perm: int = 100
    permutation: Literal["fixed", "nested"] = "nested"
    baselines: bool = True
    n_jobs: int = -1

    def __post_init__(self) -> None:
        if self.outer not in ("kfold", "loto"):
            raise ValueError(f"ProbeConfig.outer must be 'kfold' or 'loto', got {self.outer!r}")
        if self.search not in ("two_stage", "full"):
            raise ValueError(f"ProbeConfig.search must be 'two_stage' or 'full', got {self.search!r}")
        if self.permutation not in ("fixed", "nested"):
            raise ValueError(f"ProbeConfig.permutation must be 'fixed' or 'nested', got {self.permutation!r}")
        if not isinstance(self.baselines, bool):
            raise ValueError(f"ProbeConfig.baselines must be True or False, got {self.baselines!r}")
        if self.n_outer < 2 or self.n_inner < 2:
            raise ValueError(f"ProbeConfig needs n_outer >= 2 and n_inner >= 2, got {self.n_outer}, {self.n_inner}")
        if not (self.standardize_grid and self.pca_grid and self.C_grid):
            raise ValueError("ProbeConfig grids must be non-empty")
        if any(k is not None and k < 1 for k in self.pca_grid):
            raise ValueError(f"ProbeConfig.pca_grid entries must be None or >= 1, got {self.pca_grid}")
        if isinstance(self.n_jobs, bool) or not isinstance(self.n_jobs, int) or self.n_jobs == 0 \
                or self.n_jobs < -1:
            raise ValueError(f"ProbeConfig.n_jobs must be a positive number of workers or -1 (all cores), "
                             f"got {self.n_jobs!r}")
        for name in ("n_boot", "n_perm"):
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), int) \
                    or getattr(self, name) < 0:
                raise ValueError(f"ProbeConfig.{name} must be an integer >= 0, got {getattr(self, name)!r}")

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
