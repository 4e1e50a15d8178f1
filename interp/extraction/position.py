"""Position features of a boundary row: where it sits and how long its history is, the probe's nuisance baseline.

One definition: :data:`POSITION_FEATURES` names the store manifest columns
(``interp.extraction.store.MANIFEST_FIELDS`` documents each) that describe a
boundary's position, in the baseline's column order; :func:`position_features`
computes those that are not already a manifest column of their own
(``after_step`` and ``n_tokens`` are), exactly from the condition's render (no
re-tokenising). ``probes`` reads them back as ``FeatureSet.nuisance``
(``probes.baselines.NUISANCE_FEATURES`` is this tuple). To widen the baseline
(another length measure), compute it here, add its name here and its row to the
manifest table.
"""

from __future__ import annotations

from typing import Any

from interp.data.render import Rendered
from interp.data.trajectory import Trajectory

POSITION_FEATURES: tuple[str, ...] = (
    "after_step",          # boundary b: completed steps before it
    "n_steps",             # steps of the trajectory
    "rel_position",        # after_step / n_steps
    "n_tokens",            # length of the render (tokens)
    "reasoning_tokens",    # tokens in the render's reasoning-block spans so far
    "n_reasoning_blocks",  # reasoning-block spans in the render so far
)
"""Manifest columns of the position baseline, in column order; each is computed from the render at extraction."""


def position_features(traj: Trajectory, after_step: int, r: Rendered) -> dict[str, Any]:
    """Where boundary b sits and how much reasoning its render holds (exact spans), for the probe's position baseline."""
    blocks = r.spans("reasoning_block")
    return {"n_steps": traj.n_steps, "rel_position": after_step / traj.n_steps,
            "reasoning_tokens": sum(s.n_tokens for s in blocks), "n_reasoning_blocks": len(blocks)}
