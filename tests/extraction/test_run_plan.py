"""``run_plan``: pooled sums at arbitrary positions across arbitrary cuts (chunked forward with a cache),
log-probs and entropies, snapshots and continuation, all against one unchunked plain HF forward.

Tolerances, relative to the max magnitude of the reference hidden state of the
layer (``REL``):

- SmolLM2 (softmax attention only): 1e-5. A chunked forward with a KV cache
  computes the same function with differently shaped matmuls, so fp32 sums are
  reordered; their rounding is proportional to the largest terms, and SmolLM2
  residuals reach ~2.4e4 at a few positions while most are O(1-100).
  Measured <= 6e-7.
- tiny-qwen3.5 with arbitrary cuts: 5e-4. Its Gated-DeltaNet layers run
  HF's chunked delta rule (fp32 internally, 64-token chunks; a cut that is not
  a multiple of 64 changes the chunk alignment). With random-init keys the
  chunk's unit-triangular solve is ill-conditioned: HF's *own* two algorithms
  (chunked vs token-recurrent) disagree by up to 5.6e-5 x max on one unchunked
  forward of these ids, and a mis-aligned cut moves results by up to 2.1e-4 x
  max (both measured; a float64 model gives the same numbers because the
  kernel casts to fp32). With cuts at multiples of 64 the alignment is the
  same and tiny-qwen3.5 gets 1e-5 (``test_aligned_cuts_are_exact_on_the_hybrid``).

Log-probs and entropies: 1e-4 absolute (measured <= 5e-5 on SmolLM2's 49K-way
softmax).
"""

from __future__ import annotations

import random

import pytest
import torch

from interp.sensor.forward import Plan, run_plan

from ._reference import close_to_max, entropy_bits, hf_forward, random_ids

pytestmark = pytest.mark.parity

N_TINY, N_SMOL = 300, 128
REL = {"smollm2-135m": 1e-5, "tiny-qwen3.5": 5e-4}
LP_ATOL = {"smollm2-135m": 1e-4, "tiny-qwen3.5": 4e-3}  # tiny: 5e-4 x max|logit| (~8), as REL


@pytest.fixture(scope="module")
def case(sensor):
    """(sensor, ids, unchunked HF reference) for each sensor."""
    n = N_TINY if sensor.spec == "tiny-qwen3.5" else N_SMOL
    ids = random_ids(sensor, n, seed=5)
    return sensor, ids, hf_forward(sensor, ids)


def _random_plan(rng: random.Random, n: int, n_layers: int):
    """Arbitrary cuts (edges included) and position sets (single, scattered, contiguous, straddling cuts)."""
    cuts = sorted(set([1, n - 1] + rng.sample(range(2, n - 1), 4)))
    a = rng.choice(cuts[1:-1])
    pos_sets = {
        "first": [0],
        "last": [n - 1],
        "scatter": sorted(rng.sample(range(n), 9)),
        "straddle": list(range(max(0, a - 3), min(n, a + 3))),  # crosses a cut
        "all": list(range(n)),
    }
    layers = sorted({0, n_layers - 1, rng.randrange(n_layers)})
    return cuts, pos_sets, layers


def test_pooled_sums_across_cuts_equal_unchunked_forward(case):
    """Three random plans on tiny-qwen3.5, one on SmolLM2 (keeps the suite fast)."""
    sensor, ids, ref = case
    for seed in [0, 1, 2] if sensor.spec == "tiny-qwen3.5" else [0]:
        _check_random_plan(sensor, ids, ref, seed)


def _check_random_plan(sensor, ids, ref, seed):
    n, L = len(ids), sensor.n_layers
    rel = REL[sensor.spec]
    cuts, pos_sets, layers = _random_plan(random.Random(seed), n, L)
    plan = Plan(cuts=cuts)
    for layer in layers:
        for name, pos in pos_sets.items():
            plan.pooled[("pre", layer, name)] = ("resid_pre", layer, pos)
            if layer < L - 1:
                plan.pooled[("post", layer, name)] = ("resid_post", layer, pos)
    out = run_plan(sensor, ids, plan)
    for layer in layers:
        for name, pos in pos_sets.items():
            h = ref.hidden[layer]
            scale = float(h.abs().max())
            assert out.counts[("pre", layer, name)] == len(pos)
            close_to_max(out.sums[("pre", layer, name)], h[pos].double().sum(0).float(), rel,
                         f"sum resid_pre L{layer} {name}", scale=scale * len(pos))
            close_to_max(out.mean(("pre", layer, name)), h[pos].mean(0), rel, f"mean resid_pre L{layer} {name}",
                         scale=scale)
            if layer < L - 1:
                h1 = ref.hidden[layer + 1]
                close_to_max(out.mean(("post", layer, name)), h1[pos].mean(0), rel,
                             f"mean resid_post L{layer} {name}", scale=float(h1.abs().max()))
    assert out.sums[("pre", layers[0], "first")].dtype == torch.float32


def test_every_position_across_every_cut(case):
    """Each position pooled alone, with a cut after every 7th token: no position is lost or double-counted."""
    sensor, ids, ref = case
    n = len(ids)
    layer = sensor.n_layers // 2
    plan = Plan(cuts=list(range(7, n, 7)))
    for p in range(n):
        plan.pooled[p] = ("resid_pre", layer, [p])
    out = run_plan(sensor, ids, plan)
    assert set(out.counts.values()) == {1} and len(out.sums) == n
    got = torch.stack([out.sums[p] for p in range(n)])
    close_to_max(got, ref.hidden[layer], REL[sensor.spec], "per-position resid_pre")
    # Sensitivity: a one-position shift is far outside the tolerance.
    scale = float(ref.hidden[layer].abs().max())
    assert float((got[1:] - ref.hidden[layer][:-1]).abs().max()) > 100 * REL[sensor.spec] * scale


def test_aligned_cuts_are_exact_on_the_hybrid(tiny_sensor):
    """Cuts at multiples of the 64-token delta-rule chunk keep the alignment: 1e-5 on every layer and position."""
    ids = random_ids(tiny_sensor, N_TINY, seed=5)
    ref = hf_forward(tiny_sensor, ids, logits=False)
    layers = list(range(tiny_sensor.n_layers))
    plan = Plan(cuts=[64, 128, 256])
    for layer in layers:
        for p in range(N_TINY):
            plan.pooled[(layer, p)] = ("resid_pre", layer, [p])
    out = run_plan(tiny_sensor, ids, plan)
    for layer in layers:
        got = torch.stack([out.sums[(layer, p)] for p in range(N_TINY)])
        close_to_max(got, ref.hidden[layer], 1e-5, f"aligned cuts, layer {layer}")


def test_logprobs_and_entropy_equal_hand_computation(case):
    sensor, ids, ref = case
    n = len(ids)
    pos = sorted({0, 1, n // 3, n // 2, n - 2, n - 1})
    out = run_plan(sensor, ids, Plan(logprobs=pos, entropy=pos, cuts=[n // 3 + 1, n // 2]))
    expected_lp = torch.log_softmax(ref.logits.float(), dim=-1)
    expected_h = entropy_bits(ref.logits)
    assert sorted(out.logprobs) == pos and sorted(out.entropy) == pos
    for p in pos:
        assert out.logprobs[p].dtype == torch.float32
        torch.testing.assert_close(out.logprobs[p], expected_lp[p], rtol=0, atol=LP_ATOL[sensor.spec])
        assert abs(out.entropy[p] - float(expected_h[p])) < LP_ATOL[sensor.spec], (p, out.entropy[p])
    # Sensitivity: the neighbouring position's distribution is far outside the tolerance.
    assert float((out.logprobs[pos[-1]] - expected_lp[pos[-2]]).abs().max()) > 10 * LP_ATOL[sensor.spec]


def test_entropy_slices_cover_many_positions(tiny_sensor, monkeypatch):
    """More entropy positions than one unembedding slice: every one is still exact."""
    import interp.sensor.forward as fwd

    monkeypatch.setattr(fwd, "ENTROPY_SLICE", 16)
    ids = random_ids(tiny_sensor, 200, seed=9)
    ref = hf_forward(tiny_sensor, ids)
    pos = list(range(3, 200, 2))
    out = run_plan(tiny_sensor, ids, Plan(entropy=pos, cuts=[64, 128]))
    got = torch.tensor([out.entropy[p] for p in pos], dtype=torch.float64)
    torch.testing.assert_close(got, entropy_bits(ref.logits)[pos], rtol=0, atol=1e-4)


def test_snapshot_continuation_equals_full_forward(case):
    """Run a prefix with a snapshot, then two different suffixes from it: each equals its own full forward,
    and using the snapshot does not mutate it (the second continuation is unaffected by the first)."""
    sensor, ids, _ = case
    n = len(ids)
    cut = n // 2
    layers = [0, sensor.n_layers - 1]
    base = run_plan(sensor, ids, Plan(snapshots=[cut], cuts=[cut // 2]))
    snap = base.snapshots[cut]
    assert snap.length == cut
    for seed in (21, 22, 21):
        suffix = random_ids(sensor, n - cut, seed=seed)
        full = ids[:cut] + suffix
        ref = hf_forward(sensor, full)
        q = [cut, cut + 3, n - 1]
        plan = Plan(pooled={(l, p): ("resid_pre", l, [p]) for l in layers for p in q}, logprobs=[n - 1],
                    rows={(l, n - 1): "row" for l in sensor.full_attention_layers[-1:]})
        out = run_plan(sensor, suffix, plan, start=snap)
        for l in layers:
            for p in q:
                close_to_max(out.sums[(l, p)], ref.hidden[l][p], REL[sensor.spec], f"continued L{l} p{p}",
                             scale=float(ref.hidden[l].abs().max()))
        torch.testing.assert_close(out.logprobs[n - 1], torch.log_softmax(ref.logits[n - 1], -1), rtol=0,
                                   atol=LP_ATOL[sensor.spec])
        row = out.rows["row"][sensor.full_attention_layers[-1]]
        assert row.shape[-1] == n  # the row spans the snapshot's keys and the suffix's
