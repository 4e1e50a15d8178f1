"""Reasoning anchors on real SmolLM2 weights: on a trajectory whose next output depends on one reasoning block,
that block ranks first by deletion harm and by attention suppression, wherever it sits."""

from __future__ import annotations

import pytest

from patching.anchors import AnchorConfig, boundary_anchors

from .test_anchors import _one_block_trajectory, entropy_of

pytestmark = pytest.mark.e2e


@pytest.mark.slow  # real SmolLM2 (the only model here whose answer can depend on a block): ~25 s on a busy CPU
@pytest.mark.parametrize("position", [1, 4])
def test_the_block_the_answer_depends_on_ranks_first(smol_sensor, position):
    traj = _one_block_trajectory(position)
    result = boundary_anchors(smol_sensor, traj, 1, AnchorConfig(receiver_heads=16), None, entropy_of(smol_sensor, traj))
    rows = result["blocks"]
    assert len(rows) == 6
    anchor = next(r for r in rows if r["block"] == position)
    assert anchor["rank_harm"] == 1 and anchor["rank_suppression"] == 1
    assert len(result["receiver_heads"]["heads"]) == 16
