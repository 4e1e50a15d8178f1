"""ICLR proxy: mean token predictive entropy (bits) of each reasoning block under full causal context.

For block tokens ``[s, e)`` of step t in the full-history render, the score is
the mean over i in ``[s, e)`` of ``H(P(. | tokens < i))`` in bits, read at
position ``i - 1``. One forward over the render of the whole trajectory
(system prompt, tools, history and the current step in order) scores every
block of every step; only those rows are unembedded, in slices.

A step whose reasoning ends beyond ``max_tokens`` is not scored (``None``):
ICLR then leaves it untouched rather than truncating the context.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from interp.extraction.extract import DEFAULT_MAX_TOKENS, model_max_positions
from interp.sensor.forward import Plan, run_plan
from interp.data.render import render
from interp.data.trajectory import Trajectory


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
    limit = min(max_tokens, model_max_positions(sensor))
    blocks = rendered.spans("reasoning_block")
    ends = {}
    for s in blocks:
        ends[s.step] = max(ends.get(s.step, 0), s.end)
    scored = [s for s in blocks if ends[s.step] <= limit and s.start >= 1]
    end = max((ends[s.step] for s in scored), default=0)
    out_entropy: dict[int, float] = {}
    if scored:
        plan = Plan(entropy=sorted({i - 1 for s in scored for i in range(s.start, s.end)}))
        out_entropy = run_plan(sensor, rendered.input_ids[:end], plan).entropy
    result = []
    for s in blocks:
        ok = s in scored
        value = sum(out_entropy[i - 1] for i in range(s.start, s.end)) / s.n_tokens if ok else None
        result.append(BlockScore(traj.task_id, s.step, s.block, s.n_tokens, value))
    return result


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
