"""ICLR proxy: mean token predictive entropy (bits) of each reasoning block under full causal context.

For block tokens ``[s, e)`` of step t in the full-history render, the score is
the mean over i in ``[s, e)`` of ``H(P(. | tokens < i))`` in bits, read at
position ``i - 1`` (:func:`block_mean_entropy`; the positions a forward must
keep are :func:`entropy_positions`). One forward over the render of the whole
trajectory (system prompt, tools, history and the current step in order)
scores every block of every step; only those rows are unembedded, in slices.
The in-forward path of ``interp.extraction.extract`` (``block_entropy=True``)
uses the same two functions.

A step whose reasoning ends beyond ``max_tokens`` is not scored (``None``):
ICLR then leaves it untouched rather than truncating the context.

Tables: :func:`drop_table` marks, in a table of block entropies (one row per
block), the blocks ICLR drops at ``rho`` (the rule of
``interp.data.conditions.iclr_dropped``); :func:`entropy_table` scores
trajectories and returns that table. Its columns (``DROP_TABLE_FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``task_id`` | ``[n_blocks]`` | str | - | trajectory |
| ``domain`` | ``[n_blocks]`` | str | - | the trajectory's domain |
| ``step`` | ``[n_blocks]`` | int | step | step t whose reasoning holds the block (1-based) |
| ``block`` | ``[n_blocks]`` | int | - | block index within the step's reasoning (0-based) |
| ``n_tokens`` | ``[n_blocks]`` | int | tokens | tokens of the block in the full-history render |
| ``mean_entropy_bits`` | ``[n_blocks]`` | float or null | bits/token | mean next-token entropy over the block's tokens; null when the step was not scored |
| ``n_blocks_in_step`` | ``[n_blocks]`` | int | blocks | blocks of the step |
| ``scored`` | ``[n_blocks]`` | bool | - | every block of the step has a score (fit the scorer context) |
| ``dropped`` | ``[n_blocks]`` | bool | - | ICLR at rho replaces the block with [SKIP] |
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from interp.data.conditions import ICLR_RHO, iclr_dropped
from interp.data.render import Segment, render
from interp.data.trajectory import Trajectory
from interp.extraction.limits import DEFAULT_MAX_TOKENS, context_limit
from interp.schema import fields_from_doc
from interp.sensor.forward import Plan, run_plan


DROP_TABLE_FIELDS = fields_from_doc(__doc__, "DROP_TABLE_FIELDS")  # iclr_blocks.csv, one row per block


def entropy_positions(spans: Iterable[Segment]) -> list[int]:
    """Sorted positions whose next-token entropy the blocks ``spans`` need (``i - 1`` for each token i)."""
    return sorted({i - 1 for s in spans for i in range(s.start, s.end)})


def block_mean_entropy(entropy: Mapping[int, float], span: Segment) -> float:
    """Mean over the block's tokens i in ``[start, end)`` of ``entropy[i - 1]`` (bits)."""
    return sum(entropy[i - 1] for i in range(span.start, span.end)) / span.n_tokens


@dataclass
class BlockScore:
    """Entropy score of one reasoning block."""

    task_id: str
    step: int
    block: int
    n_tokens: int
    mean_entropy_bits: float | None  # None: over the scorer limit


def block_entropies(sensor: Any, traj: Trajectory, max_tokens: int = DEFAULT_MAX_TOKENS) -> list[BlockScore]:
    """Score every reasoning block of ``traj`` with one forward (see module docstring)."""
    rendered = render(traj, traj.n_steps, sensor.tokenizer)
    limit = context_limit(sensor, max_tokens)
    blocks = rendered.spans("reasoning_block")
    ends = {}
    for s in blocks:
        ends[s.step] = max(ends.get(s.step, 0), s.end)
    scored = [s for s in blocks if ends[s.step] <= limit and s.start >= 1]
    end = max((ends[s.step] for s in scored), default=0)
    out_entropy: dict[int, float] = {}
    if scored:
        plan = Plan(entropy=entropy_positions(scored))
        out_entropy = run_plan(sensor, rendered.input_ids[:end], plan).entropy
    return [BlockScore(traj.task_id, s.step, s.block, s.n_tokens,
                       block_mean_entropy(out_entropy, s) if s in scored else None) for s in blocks]


@dataclass
class EntropyScorer:
    """A block scorer for the ``iclr`` condition: scores from :func:`block_entropies`, cached per task."""

    sensor: Any
    max_tokens: int = DEFAULT_MAX_TOKENS
    _cache: dict[str, list[BlockScore]] = field(default_factory=dict)

    def scores(self, traj: Trajectory) -> list[BlockScore]:
        """All block scores of ``traj`` (computed once per task_id)."""
        if traj.task_id not in self._cache:
            self._cache[traj.task_id] = block_entropies(self.sensor, traj, self.max_tokens)
        return self._cache[traj.task_id]

    def __call__(self, traj: Trajectory, step: int) -> list[float] | None:
        """Scores of the blocks of ``step`` (higher = less predictable), or None if not scored."""
        mine = sorted((s for s in self.scores(traj) if s.step == step), key=lambda s: s.block)
        if any(s.mean_entropy_bits is None for s in mine):
            return None
        return [s.mean_entropy_bits for s in mine]


def drop_table(blocks: pd.DataFrame, rho: float = ICLR_RHO) -> pd.DataFrame:
    """``blocks`` (one row per reasoning block: task_id, [domain,] step, block, n_tokens,
    mean_entropy_bits, NaN/None when unscored) plus ``n_blocks_in_step``, ``scored`` (every block
    of the step has a score) and ``dropped`` (ICLR at ``rho`` drops it: ``iclr_dropped`` on the
    step's scores in block order; an unscored step is left whole). Rows keep their order."""
    iclr_dropped((), rho)  # validates rho even when no step is scored
    n = len(blocks)
    n_blocks, scored, dropped = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    values = blocks["mean_entropy_bits"].to_numpy(dtype=object) if n else []
    block_ids = blocks["block"].to_numpy() if n else []
    for rows in (blocks.groupby(["task_id", "step"], sort=False).indices.values() if n else []):
        rows = sorted(rows, key=lambda r: block_ids[r])  # block order within the step
        n_blocks[rows] = len(rows)
        scores = [values[r] for r in rows]
        if all(pd.notna(v) for v in scores):
            scored[rows] = True
            drop = iclr_dropped([float(v) for v in scores], rho)
            dropped[rows] = [i in drop for i in range(len(rows))]
    return blocks.assign(n_blocks_in_step=n_blocks, scored=scored, dropped=dropped)


def entropy_table(sensor: Any, trajectories: list[Trajectory], rho: float = ICLR_RHO,
                  max_tokens: int = DEFAULT_MAX_TOKENS) -> pd.DataFrame:
    """One row per reasoning block: entropy (bits), tokens, and whether ICLR at ``rho`` drops it (:func:`drop_table`)."""
    scorer = EntropyScorer(sensor, max_tokens)
    rows = [{"task_id": traj.task_id, "domain": traj.domain, "step": s.step, "block": s.block,
             "n_tokens": s.n_tokens, "mean_entropy_bits": s.mean_entropy_bits}
            for traj in trajectories for s in sorted(scorer.scores(traj), key=lambda s: (s.step, s.block))]
    columns = ["task_id", "domain", "step", "block", "n_tokens", "mean_entropy_bits"]
    return drop_table(pd.DataFrame(rows, columns=columns), rho)
