"""ICLR entropy scores (full context) and the ``iclr`` condition they feed, against hand computations.

The online scorer (the default, the study's method) is tested against a
from-scratch loop in ``test_iclr_online.py``; here ``context="full"``.

Reference for a block's score: one plain HF forward over the render of the
whole trajectory; block tokens are located by searching the block texts in
the prompt (in order) and mapping characters to tokens with the tokenizer's
offsets; the score is the mean over block tokens i of the entropy (bits,
float64) of the logits at position i-1. The forward under test is the same
length and unchunked: tolerance 1e-4 bits.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from interp.data.conditions import SKIP, apply_condition
from interp.extraction.entropy import EntropyScorer, block_entropies
from interp.extraction.extract import ExtractConfig, extract_trajectory
from interp.data.render import render
from interp.data.trajectory import join_blocks

from ._reference import entropy_bits, hf_forward, tokens_covering

pytestmark = pytest.mark.parity


def _hand_block_tokens(traj, rendered) -> dict[tuple[int, int], list[int]]:
    """(step, block) -> token positions, found by ordered text search in the full render."""
    out, cursor = {}, rendered.text.index(traj.task) + len(traj.task)
    for t, step in enumerate(traj.steps, start=1):
        for k, blk in enumerate(step.blocks):
            start = rendered.text.index(blk, cursor)
            out[(t, k)] = tokens_covering(rendered.offsets, start, start + len(blk))
            cursor = start + len(blk)
    return out


def _hand_scores(sensor, traj):
    """(scores by (step, block), entropy by position, block token positions) from one full-render forward."""
    rendered = render(traj, traj.n_steps, sensor.tokenizer)
    positions = _hand_block_tokens(traj, rendered)
    needed = sorted({j for pos in positions.values() for i in pos for j in (i - 1, i)})
    logits = hf_forward(sensor, rendered.input_ids, keep=needed).logits  # HF's logits at those rows only
    h = dict(zip(needed, entropy_bits(logits).tolist()))  # float64
    scores = {key: sum(h[i - 1] for i in pos) / len(pos) for key, pos in positions.items()}
    return scores, h, positions



def _tol(sensor) -> float:
    """Entropy tolerance in bits: 100 x eps of the dtype times the largest entropy, log2(vocab) (not one machine's)."""
    return 100 * torch.finfo(sensor.dtype).eps * math.log2(sensor.hf_model.config.vocab_size)

def test_block_entropies_equal_hand_computation(sensor, mini_trajectory):
    expected, h, positions = _hand_scores(sensor, mini_trajectory)
    scores = block_entropies(sensor, mini_trajectory)
    assert [(s.step, s.block) for s in scores] == list(expected)
    for s in scores:
        assert s.task_id == mini_trajectory.task_id
        assert s.n_tokens == len(positions[(s.step, s.block)])
        want = expected[(s.step, s.block)]
        assert abs(s.mean_entropy_bits - want) < _tol(sensor), (s, want)
    # Sensitivity: reading the entropy at i instead of i-1 would be caught.
    shifted = [sum(h[i] for i in pos) / len(pos) for pos in positions.values()]
    assert max(abs(a - b) for a, b in zip(shifted, expected.values())) > 1e-3


def test_tiny_demo_block_entropies(tiny_sensor, demo_trajectories):
    traj = next(t for t in demo_trajectories if t.task_id == "web-002")
    expected, _, _ = _hand_scores(tiny_sensor, traj)
    got = {(s.step, s.block): s.mean_entropy_bits for s in block_entropies(tiny_sensor, traj)}
    assert got.keys() == expected.keys()
    assert max(abs(got[k] - expected[k]) for k in got) < _tol(tiny_sensor)


def test_max_tokens_leaves_late_steps_unscored(tiny_sensor, mini_trajectory):
    full = block_entropies(tiny_sensor, mini_trajectory)
    # the scorer's input for step t: the render at boundary t, action and observation included
    ends = {t: render(mini_trajectory, t, tiny_sensor.tokenizer).n_tokens for t in range(1, 5)}
    limit = (ends[2] + ends[3]) // 2  # steps 1-2's inputs fit, steps 3-4's do not
    capped = block_entropies(tiny_sensor, mini_trajectory, max_tokens=limit)
    for f, c in zip(full, capped):
        if ends[c.step] <= limit:
            assert c.mean_entropy_bits is not None and abs(c.mean_entropy_bits - f.mean_entropy_bits) < 5e-4
        else:
            assert c.mean_entropy_bits is None, c
    assert {c.step for c in capped if c.mean_entropy_bits is None} == {3, 4}
    scorer = EntropyScorer(tiny_sensor, max_tokens=limit, context="full")
    assert scorer(mini_trajectory, 2) is not None and scorer(mini_trajectory, 3) is None
    edited, log = apply_condition("iclr", mini_trajectory, 4, scorer=scorer)
    assert edited.steps[2] == mini_trajectory.steps[2], "an unscored step must be left whole"
    assert any("step 3" in note and "not scored" in note for note in log.notes), log.notes
    assert SKIP in edited.steps[0].reasoning and SKIP in edited.steps[1].reasoning


@pytest.mark.parametrize("rho", [0.8, 0.5])
def test_iclr_drops_lowest_entropy_blocks(tiny_sensor, mini_trajectory, rho):
    scorer = EntropyScorer(tiny_sensor, context="full")
    scores = {(s.step, s.block): s.mean_entropy_bits for s in block_entropies(tiny_sensor, mini_trajectory)}
    counter = lambda s: len(tiny_sensor.tokenizer.encode(s, add_special_tokens=False))  # noqa: E731
    for b in range(1, mini_trajectory.n_steps + 1):
        edited, log = apply_condition("iclr", mini_trajectory, b, counter=counter, scorer=scorer, rho=rho)
        expected_steps, expected_removed = [], 0
        for t, step in enumerate(mini_trajectory.steps, start=1):
            blocks = step.blocks
            if t > b or len(blocks) <= 1:
                expected_steps.append(step)
                continue
            by_score = sorted(range(len(blocks)), key=lambda k: scores[(t, k)])
            drop = set(by_score[: math.floor(rho * len(blocks))])
            assert all(scores[(t, k)] <= scores[(t, j)] for k in drop for j in set(range(len(blocks))) - drop)
            expected_removed += sum(counter(blocks[k]) for k in drop)
            kept = [SKIP if k in drop else blk for k, blk in enumerate(blocks)]
            expected_steps.append(replace(step, reasoning=join_blocks(kept)))
        assert edited.steps == tuple(expected_steps), b
        assert log.tokens_removed == expected_removed
    # Features through extract_trajectory use exactly this hand-edited history.
    config = ExtractConfig(layers=[0])
    rows = extract_trajectory(tiny_sensor, mini_trajectory, "iclr", config, condition_params={"scorer": scorer,
                                                                                               "rho": rho})
    for r in rows:
        edited, _ = apply_condition("iclr", mini_trajectory, r.after_step, scorer=scorer, rho=rho)
        assert r.n_tokens == render(edited, r.after_step, tiny_sensor.tokenizer).n_tokens
    assert {r.forward for r in rows} == {"shared"}, "online ICLR renders are prefixes of each other"


def test_scorer_scores_each_task_once(tiny_sensor, mini_trajectory, monkeypatch):
    import interp.extraction.entropy as entropy_mod

    calls = []
    real = entropy_mod.block_entropies
    monkeypatch.setattr(entropy_mod, "block_entropies", lambda *a, **k: calls.append(1) or real(*a, **k))
    scorer = EntropyScorer(tiny_sensor, context="full")
    for b in range(1, mini_trajectory.n_steps + 1):
        apply_condition("iclr", mini_trajectory, b, scorer=scorer)
    assert len(calls) == 1


@pytest.mark.parametrize("task_id", ["mini-code-1", "web-002", "code-003"])
def test_extraction_block_entropy_equals_block_entropies(tiny_sensor_fp64, mini_trajectory, demo_trajectories,
                                                         task_id):
    """Block entropies recorded by extraction (``block_entropy=True``, from the boundary-feature forward)
    equal ``block_entropies``' own forward over the whole render: same (step, block) keys, same values (fp64)."""
    traj = mini_trajectory if task_id == mini_trajectory.task_id else next(
        t for t in demo_trajectories if t.task_id == task_id)
    config = ExtractConfig(layers=[0, 3], poolings=["last", "mean_latest_step"], attention_layers=[3],
                           block_entropy=True)
    rows = extract_trajectory(tiny_sensor_fp64, traj, "full", config)
    recorded = [e for r in rows for e in r.block_entropy]
    assert [r.after_step for r in rows if r.block_entropy] == [traj.n_steps], "recorded once, on the longest render"
    got = {(e["step"], e["block"]): e for e in recorded}
    assert len(got) == len(recorded), "each block recorded once"
    reference = {(s.step, s.block): s for s in block_entropies(tiny_sensor_fp64, traj)}
    assert got.keys() == reference.keys()
    assert len(got) == sum(len(step.blocks) for step in traj.steps)
    for key, ref in reference.items():
        assert ref.mean_entropy_bits is not None and math.isfinite(ref.mean_entropy_bits), key
        assert got[key]["n_tokens"] == ref.n_tokens, key
        assert abs(got[key]["mean_entropy_bits"] - ref.mean_entropy_bits) <= 1e-9, (key, got[key], ref)
    # Not vacuous: the blocks' scores differ from each other by far more than the tolerance.
    values = [ref.mean_entropy_bits for ref in reference.values()]
    assert max(values) - min(values) > 1e-3


def test_drop_table_applies_the_iclr_rule_per_step():
    import pandas as pd

    from interp.data.conditions import iclr_dropped
    from interp.extraction.entropy import drop_table

    frame = pd.DataFrame({"task_id": ["a"] * 6 + ["b"] * 3, "step": [1, 1, 1, 2, 2, 3, 1, 1, 1],
                          "block": [2, 0, 1, 0, 1, 0, 0, 1, 2], "n_tokens": 4,
                          "mean_entropy_bits": [1.0, 3.0, 1.0, 2.0, None, 7.0, 5.0, 5.0, 5.0]})
    got = drop_table(frame)
    assert list(got.columns[: len(frame.columns)]) == list(frame.columns) and len(got) == len(frame)
    assert got["n_blocks_in_step"].tolist() == [3, 3, 3, 2, 2, 1, 3, 3, 3]
    assert got["scored"].tolist() == [True, True, True, False, False, True, True, True, True]
    # step a/1 in block order scores [3, 1, 1] -> drops blocks 1 and 2 (ties: earlier first); a/2 unscored; a/3 N = 1
    assert got["dropped"].tolist() == [True, False, True, False, False, False, True, True, False]
    assert iclr_dropped([3.0, 1.0, 1.0]) == {1, 2} and iclr_dropped([5.0] * 3) == {0, 1}
    assert drop_table(frame, rho=0.0)["dropped"].sum() == 0
    with pytest.raises(ValueError, match="rho"):
        drop_table(frame, rho=1.2)
    empty = drop_table(pd.DataFrame())
    assert empty.empty and {"n_blocks_in_step", "scored", "dropped"} <= set(empty.columns)


@pytest.mark.parametrize("context", ["online", "full"])
def test_entropy_table_drops_what_the_iclr_condition_skips(tiny_sensor, mini_trajectory, context):
    from interp.extraction.entropy import DROP_TABLE_FIELDS, entropy_table

    scorer = EntropyScorer(tiny_sensor, context=context)
    table = entropy_table(tiny_sensor, [mini_trajectory], rho=0.5, context=context, full=context == "online")
    assert list(table.columns) == [f.name for f in DROP_TABLE_FIELDS]
    assert set(table["context"]) == {context}
    edited, _ = apply_condition("iclr", mini_trajectory, mini_trajectory.n_steps, scorer=scorer, rho=0.5)
    scores = {(t, s.block): s.mean_entropy_bits for (_, t), rec in scorer.records.items() for s in rec}
    assert [(r.step, r.block) for r in table.itertuples()] == sorted(scores)
    assert table["mean_entropy_bits"].tolist() == [scores[k] for k in sorted(scores)]
    skipped = {(t, k) for t, step in enumerate(edited.steps, start=1) for k, blk in enumerate(step.blocks) if blk == SKIP}
    assert skipped and {(r.step, r.block) for r in table.itertuples() if r.dropped} == skipped
    if context == "online":  # the full-context columns are the full scorer's
        full = {(s.step, s.block): s.mean_entropy_bits for s in block_entropies(tiny_sensor, mini_trajectory)}
        assert table["mean_entropy_bits_full"].tolist() == [full[k] for k in sorted(full)]
        assert table["dropped_full"].notna().all()
    else:
        assert table["dropped_full"].isna().all()
