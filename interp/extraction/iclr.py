"""ICLR statistics: per-block entropy scores, which blocks are dropped at rho, tokens removed."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from interp.extraction.entropy import EntropyScorer
from interp.data.trajectory import Trajectory


def entropy_table(sensor: Any, trajectories: list[Trajectory], rho: float = 0.8,
                  max_tokens: int = 42_000) -> pd.DataFrame:
    """One row per reasoning block: entropy (bits), tokens, and whether ICLR at ``rho`` drops it."""
    scorer = EntropyScorer(sensor, max_tokens)
    rows = []
    for traj in trajectories:
        scores = scorer.scores(traj)
        for step in sorted({s.step for s in scores}):
            mine = sorted((s for s in scores if s.step == step), key=lambda s: s.block)
            n = len(mine)
            scored = all(s.mean_entropy_bits is not None for s in mine)
            order = sorted(range(n), key=lambda i: (mine[i].mean_entropy_bits or 0.0, i))
            dropped = set(order[: math.floor(rho * n)]) if scored and n > 1 else set()
            rows.extend({"task_id": traj.task_id, "domain": traj.domain, "step": s.step, "block": s.block,
                         "n_tokens": s.n_tokens, "mean_entropy_bits": s.mean_entropy_bits, "scored": scored,
                         "n_blocks_in_step": n, "dropped": i in dropped} for i, s in enumerate(mine))
    return pd.DataFrame(rows)
