"""``run_batch`` (right-padded suffixes continuing one snapshot) against ``run_plan`` row by row, in float64."""

from __future__ import annotations

import pytest
import torch

from interp.sensor.forward import Plan, batch_supported, run_batch, run_plan

pytestmark = pytest.mark.parity

LENGTHS = (5, 40, 90, 1, 63)  # padded to 90: short rows carry long padding, one row is a single token


def _rows(vocab: int, seed: int, offset: int) -> tuple[list[list[int]], list[Plan]]:
    gen = torch.Generator().manual_seed(seed)
    suffixes = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in LENGTHS]
    plans = [Plan(targets={offset + i: t for i, t in enumerate(ids[1:])}, logprobs=[offset + len(ids) - 1],
                  entropy=[offset]) for ids in suffixes]
    return suffixes, plans


@pytest.mark.parametrize("offset", [0, 150])
def test_rows_equal_their_own_forward(tiny_sensor_fp64, offset):
    """The hybrid: attention KV broadcast from the snapshot, Gated-DeltaNet states copied per row; the snapshot
    itself is left as it was (a later run from it gives the same outputs)."""
    sensor = tiny_sensor_fp64
    assert batch_supported(sensor)
    vocab = sensor.hf_model.config.vocab_size
    snap = None
    if offset:
        prefix = torch.randint(0, vocab, (offset,), generator=torch.Generator().manual_seed(1)).tolist()
        snap = run_plan(sensor, prefix, Plan(snapshots=[offset])).snapshots[offset]
    suffixes, plans = _rows(vocab, 2, offset)
    alone = [run_plan(sensor, ids, plan, start=snap) for ids, plan in zip(suffixes, plans)]
    batched = run_batch(sensor, suffixes, plans, start=snap)
    for a, b in zip(alone, batched, strict=True):
        assert a.target_logprob.keys() == b.target_logprob.keys() and len(a.target_logprob) == len(b.target_logprob)
        for p, v in a.target_logprob.items():
            assert b.target_logprob[p] == pytest.approx(v, rel=1e-9, abs=1e-12)
        for p, v in a.entropy.items():
            assert b.entropy[p] == pytest.approx(v, rel=1e-9, abs=1e-12)
        for p, v in a.logprobs.items():
            torch.testing.assert_close(b.logprobs[p], v, rtol=1e-9, atol=1e-12)
    again = run_plan(sensor, suffixes[2], plans[2], start=snap)
    assert again.target_logprob == alone[2].target_logprob


def test_refuses_what_a_batch_cannot_keep(tiny_sensor):
    with pytest.raises(ValueError, match="only log-probs"):
        run_batch(tiny_sensor, [[1, 2], [3]], [Plan(pooled={"k": ("resid_pre", 0, [0])}), Plan()])
    with pytest.raises(ValueError, match="one non-empty suffix per plan"):
        run_batch(tiny_sensor, [[1, 2], []], [Plan(), Plan()])
