"""Reasoning anchors: the suppression kernel against TransformerLens' own ``hook_attn_scores`` on the bridge, the
ranking on a trajectory whose next output depends on one block, DRSR singleton harms reused, and the summary."""

from __future__ import annotations

import pytest
import torch

from interp.data.trajectory import Trajectory
from interp.extraction.entropy import block_entropies
from patching.anchors import AnchorConfig, _log_probs, boundary_anchors, singleton_harms, summarize_anchors, suppressed

pytestmark = pytest.mark.unit

FILLER = ["The weather outside is sunny and warm.", "I enjoy reading long books about history.",
          "Cats usually sleep for most of the day.", "The train station is near the old bridge.",
          "Tea tastes better with a little honey."]


def entropy_of(sensor, traj: Trajectory) -> dict:
    """ICLR's block entropies of ``traj`` (what the anchors stage gives boundary_anchors)."""
    return {(e.step, e.block): e.mean_entropy_bits for e in block_entropies(sensor, traj)}


def _one_block_trajectory(position: int) -> Trajectory:
    """Step 1 has six reasoning blocks; only the one at ``position`` holds the code step 2 states."""
    blocks = FILLER[:position] + ["The secret code is 7391."] + FILLER[position:]
    return Trajectory.from_json({
        "task_id": f"anchor-{position}", "domain": "code", "system_prompt": "You are an agent.", "tools": [],
        "task": "Find the secret code and report it.",
        "steps": [{"reasoning": "\n\n".join(blocks), "action": {"text": "I found it."}, "observation": "ok"},
                  {"reasoning": "The secret code is 7391.", "action": {"text": "The secret code is 7391."},
                   "observation": "done"}],
        "final_answer": "7391", "outcome": {"success": True}})


def _bridge_suppressed(sensor, ids: torch.Tensor, span: tuple[int, int]) -> torch.Tensor:
    """The slow reference: the TransformerLens bridge with the scores of later queries on the span set to -inf."""
    def mask(scores: torch.Tensor, hook) -> torch.Tensor:
        q = torch.arange(scores.shape[-2])[:, None]
        k = torch.arange(scores.shape[-1])[None]
        return scores.masked_fill((k >= span[0]) & (k < span[1]) & (q >= span[1]), float("-inf"))
    with torch.no_grad():
        logits = sensor.bridge.run_with_hooks(ids, fwd_hooks=[(lambda n: n.endswith("attn.hook_attn_scores"), mask)])
    return logits[0].float().log_softmax(-1)


def test_suppression_matches_the_bridge_hook_attn_scores(tiny_sensor):
    ids = torch.randint(10, 500, (1, 48), generator=torch.Generator().manual_seed(1))
    span, positions = (12, 20), list(range(48))
    with suppressed(tiny_sensor, span, tiny_sensor.full_attention_layers):
        mine = _log_probs(tiny_sensor, ids, positions)
    with suppressed(tiny_sensor, None, tiny_sensor.full_attention_layers):
        clean = _log_probs(tiny_sensor, ids, positions)
    ref = _bridge_suppressed(tiny_sensor, ids, span)
    assert (mine[20:] - clean[20:]).abs().max() > 1e-3  # the suppression changes the later positions
    torch.testing.assert_close(mine[:20], clean[:20], atol=1e-5, rtol=0)  # and nothing before the span's end
    torch.testing.assert_close(mine, ref, atol=2e-4, rtol=0)


def test_drsr_singletons_are_reused_and_summarised(tiny_sensor):
    traj = _one_block_trajectory(2)
    record = {"task_id": traj.task_id, "after_step": 1,
              "sets": [{"members": [["reasoning", 1, k]], "harm": 0.1 * k} for k in range(6)]
              + [{"members": [["reasoning", 1, 0], ["reasoning", 1, 1]], "harm": 9.0},
                 {"members": [["observation", 1, 0]], "harm": 5.0}]}
    harms = singleton_harms([record])[(traj.task_id, 1)]
    assert harms == {("reasoning", 1, k): pytest.approx(0.1 * k) for k in range(6)}
    result = boundary_anchors(tiny_sensor, traj, 1, AnchorConfig(), harms, entropy_of(tiny_sensor, traj))
    assert [r["rank_harm"] for r in result["blocks"]] == [6, 5, 4, 3, 2, 1]
    dropped = sum(r["iclr_dropped"] for r in result["blocks"])
    assert dropped == 4  # floor(0.8 * 6) blocks of the step
    summary = summarize_anchors([result, {"skipped": {"task_id": "x", "after_step": 1, "n_tokens": 9, "reason": "r"}}])
    assert summary["iclr"]["dropped"]["n"] == 4 and summary["iclr"]["kept"]["n"] == 2
    assert summary["iclr"]["n_anchors"] == 1 and len(summary["skipped"]) == 1
    assert summary["agreement"]["harm_vs_suppression"]["n"] == 6
