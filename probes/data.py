"""Probe inputs: boundary features per (layer, pooling) candidate, labels and task groups."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from interp.extraction.position import POSITION_FEATURES

if TYPE_CHECKING:
    from interp.extraction.store import Store

MISSING = -1
"""Label value of a boundary whose future-necessity target is unknown."""

CandidateKey = tuple[int, str]
"""(layer index, pooling name) of one feature matrix."""


@dataclass
class FeatureSet:
    """Features, labels and task groups of n boundary samples, validated on construction.

    features: (layer, pooling) -> array [n_samples, d], floating point (float32 from the store).
    y: int [n_samples], 1 = the later trajectory needed the reasoning, 0 = it did not,
       -1 = label missing (drop with `drop_missing` before CV).
    groups: str [n_samples], the task_id of each sample; all CV splits are by task.
    sample_ids: one unique id per sample, in row order.
    nuisance: name -> float [n_samples], position/length features of each sample for the
       baseline (`interp.extraction.position.POSITION_FEATURES`; empty: no baseline can be fitted).
    undefined: sample_ids whose target is undefined (final boundaries, after_step == n_steps:
       no later step); their y is -1, so `drop_missing` excludes them.
    """

    features: dict[CandidateKey, np.ndarray]
    y: np.ndarray
    groups: np.ndarray
    sample_ids: list[str]
    nuisance: dict[str, np.ndarray] = field(default_factory=dict)
    undefined: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.y = np.asarray(self.y)
        self.groups = np.asarray(self.groups).astype(str)
        self.sample_ids = [str(s) for s in self.sample_ids]
        n = len(self.sample_ids)
        if self.y.ndim != 1 or len(self.y) != n or self.groups.ndim != 1 or len(self.groups) != n:
            raise ValueError(
                f"FeatureSet: y has shape {self.y.shape} and groups {self.groups.shape}, "
                f"but there are {n} sample_ids; all three must be 1-D with one entry per sample"
            )
        if len(set(self.sample_ids)) != n:
            raise ValueError("FeatureSet.sample_ids must be unique")
        if not (np.issubdtype(self.y.dtype, np.integer) or self.y.dtype == bool):
            raise ValueError(f"FeatureSet.y must be integers (0/1, -1 = missing), got dtype {self.y.dtype}")
        bad = np.setdiff1d(np.unique(self.y), [MISSING, 0, 1])
        if bad.size:
            raise ValueError(f"FeatureSet.y may hold only 0, 1 and -1 (missing), found {bad.tolist()}")
        self.y = self.y.astype(np.int64)
        if not self.features:
            raise ValueError("FeatureSet.features is empty; give at least one (layer, pooling) matrix")
        for key, X in self.features.items():
            self._check_matrix(key, X, n)
        self.nuisance = {str(name): np.asarray(v, dtype=np.float64) for name, v in self.nuisance.items()}
        for name, v in self.nuisance.items():
            if v.shape != (n,) or not np.isfinite(v).all():
                raise ValueError(f"FeatureSet.nuisance[{name!r}] must be {n} finite numbers (one per sample), "
                                 f"got shape {v.shape}")
        self.undefined = [str(s) for s in self.undefined]
        position = {s: i for i, s in enumerate(self.sample_ids)}
        labelled = [s for s in self.undefined if s not in position or self.y[position[s]] != MISSING]
        if labelled:
            raise ValueError(f"FeatureSet.undefined must list samples with y = -1; not so for {labelled[:5]}")

    @classmethod
    def from_store(cls, store: Store, site: str = "resid_pre", condition: str = "full",
                   labels: Mapping[tuple[str, int], int] | None = None) -> FeatureSet:
        """The probe's inputs from an activation store: ``ok`` rows of ``condition`` at ``site``.

        Labels are the store's ``future_necessity`` column (the trajectories'
        annotations) unless ``labels`` maps ``(task_id, after_step)`` to 0/1;
        boundaries absent from ``labels`` get :data:`MISSING`. A final boundary
        (``after_step == n_steps``) has no later step, so "the later trajectory
        needed the reasoning" is undefined there: whatever its label, it gets
        :data:`MISSING` and is listed in ``undefined``. The manifest's position
        columns (``interp.extraction.position.POSITION_FEATURES``) become ``nuisance``.
        """
        frame, features = store.load_features(site, condition=condition)
        if frame.empty:
            present = sorted(set(store.manifest().get("condition", [])))
            raise ValueError(f"{store.root}: no extracted samples for condition {condition!r} "
                             f"(the store has: {', '.join(present) or 'none'})")
        absent = [c for c in POSITION_FEATURES if c not in frame or frame[c].isna().any()]
        if absent:
            raise ValueError(f"{store.root}: manifest rows lack the position columns {absent} (a store written "
                             f"before they were recorded); re-extract into a new --store directory")
        if labels is None:
            y = frame["future_necessity"].to_numpy()
        else:
            y = np.array([labels.get((t, int(b)), MISSING) for t, b in zip(frame["task_id"], frame["after_step"])],
                         dtype=int)
        final = (frame["after_step"] == frame["n_steps"]).to_numpy()
        y = np.where(final, MISSING, y)
        return cls(features=features, y=y, groups=frame["task_id"].to_numpy(), sample_ids=frame["sample_id"].tolist(),
                   nuisance={c: frame[c].to_numpy(dtype=np.float64) for c in POSITION_FEATURES},
                   undefined=frame.loc[final, "sample_id"].tolist())

    def _check_matrix(self, key: CandidateKey, X: np.ndarray, n: int) -> None:
        if not (isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], int | np.integer)
                and isinstance(key[1], str)):
            raise ValueError(f"FeatureSet.features keys must be (layer: int, pooling: str), got {key!r}")
        if not isinstance(X, np.ndarray) or X.ndim != 2 or X.shape[0] != n:
            shape = getattr(X, "shape", type(X).__name__)
            raise ValueError(f"features[{key!r}] has shape {shape}; expected a 2-D array [{n} samples, d]")
        if not np.issubdtype(X.dtype, np.floating):
            raise ValueError(f"features[{key!r}] has dtype {X.dtype}; expected floating point (float32)")
        bad_rows = np.flatnonzero(~np.isfinite(X).all(axis=1))
        if bad_rows.size:
            first = [self.sample_ids[i] for i in bad_rows[:5]]
            raise ValueError(
                f"features[{key!r}]: {bad_rows.size} of {n} rows contain NaN or inf "
                f"(first sample_ids: {first}); re-extract or drop those samples"
            )

    @property
    def keys(self) -> list[CandidateKey]:
        """Candidate keys in a fixed order (by layer, then pooling); selection ties go to the earlier key."""
        return sorted(self.features)

    def positions(self) -> np.ndarray:
        """Order of each sample within its task: ``nuisance["after_step"]``, else the row order (for position nulls)."""
        if "after_step" in self.nuisance:
            return self.nuisance["after_step"]
        return np.arange(len(self.sample_ids), dtype=np.float64)

    @property
    def n_tasks(self) -> int:
        """Number of distinct tasks."""
        return int(np.unique(self.groups).size)

    def subset(self, rows: np.ndarray) -> FeatureSet:
        """The samples at integer positions `rows`, in that order."""
        kept = {self.sample_ids[i] for i in rows}
        return FeatureSet(
            features={k: X[rows] for k, X in self.features.items()},
            y=self.y[rows],
            groups=self.groups[rows],
            sample_ids=[self.sample_ids[i] for i in rows],
            nuisance={name: v[rows] for name, v in self.nuisance.items()},
            undefined=[s for s in self.undefined if s in kept],
        )

    def drop_missing(self) -> tuple[FeatureSet, list[str]]:
        """Drop samples whose label is -1; return the labelled set and the excluded sample_ids (for the report)."""
        missing = self.y == MISSING
        if not missing.any():
            return self, []
        excluded = [s for s, m in zip(self.sample_ids, missing) if m]
        return self.subset(np.flatnonzero(~missing)), excluded

    def check_cv(self, min_tasks: int) -> None:
        """Raise a clear error unless task-grouped CV with `min_tasks` folds can run on these samples."""
        if (self.y == MISSING).any():
            raise ValueError(
                f"{int((self.y == MISSING).sum())} samples have a missing label (-1); call drop_missing() first"
            )
        counts = {c: int((self.y == c).sum()) for c in (0, 1)}
        if min(counts.values()) == 0:
            raise ValueError(
                f"only one class present (y=0: {counts[0]}, y=1: {counts[1]}); a probe needs both classes"
            )
        if self.n_tasks < min_tasks:
            raise ValueError(
                f"{self.n_tasks} distinct tasks but the outer CV needs at least {min_tasks}; "
                f"use fewer outer folds (ProbeConfig.n_outer) or more tasks"
            )
