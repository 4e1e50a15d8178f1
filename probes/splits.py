"""Task-grouped CV splits: the only place the probe code makes train/test index pairs."""

from __future__ import annotations

from typing import Literal

import numpy as np
from sklearn.model_selection import LeaveOneGroupOut, StratifiedGroupKFold


def grouped_splits(
    y: np.ndarray, groups: np.ndarray, n_splits: int | Literal["loto"], seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train_idx, test_idx) pairs that never put one task on both sides; tests audit every split through here.

    An int gives StratifiedGroupKFold (tasks shuffled with `seed`, class
    balance kept as far as whole tasks allow); "loto" gives leave-one-task-out.
    """
    placeholder = np.zeros((len(y), 1))
    if n_splits == "loto":
        return list(LeaveOneGroupOut().split(placeholder, y, groups))
    splitter = StratifiedGroupKFold(n_splits=n_splits, shuffle=True, random_state=seed)
    return list(splitter.split(placeholder, y, groups))
