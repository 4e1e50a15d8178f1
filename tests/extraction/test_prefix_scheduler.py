"""The prefix scheduler (``interp.sensor.prefix``) against one whole HF forward per branch, on the hybrid tiny model.

Branches cover every edge rule: served by the base (a prefix, the base
itself), departing mid-way (two that share their suffix: one forward), at the
very end of the base, sharing nothing, with targets (which depart no later
than their first position) and with a kept cache (continued afterwards).
Requests cross the departure point (a mean pool over positions on both sides),
so the base part and the suffix part of a branch are added. The reference is
the plain HF forward over each branch's whole tokens (``output_hidden_states``:
``hidden_states[l]`` is ``resid_pre`` of layer l), in float64 so that only the
float32 pooled sums limit the agreement.
"""

from __future__ import annotations

import math

import pytest
import torch

from interp.sensor.forward import Plan, run_plan
from interp.sensor.prefix import Branch, Resume, departure, lcp, run_branches

pytestmark = pytest.mark.parity

N_BASE = 60


def _tokens(sensor, n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, sensor.hf_model.config.vocab_size, (n,), generator=g).tolist()


def _branches(sensor) -> tuple[list[int], list[Branch]]:
    base = _tokens(sensor, N_BASE, 1)
    tail = _tokens(sensor, 20, 2)
    other = _tokens(sensor, 24, 3)
    other[0] = (base[0] + 1) % sensor.hf_model.config.vocab_size  # shares nothing
    seqs = {"prefix": base[:30], "base": base, "mid": base[:25] + tail[:12], "mid_longer": base[:25] + tail,
            "end": base + tail[:6], "none": other, "targets": base[:40] + tail[:5]}
    linear, full = sensor.linear_attention_layers[0], sensor.full_attention_layers[0]
    branches = []
    for key, ids in seqs.items():
        n = len(ids)
        plan = Plan(pooled={("span", linear): ("resid_pre", linear, list(range(10, n))),
                            ("span", full): ("resid_pre", full, list(range(10, n))),
                            ("last", full): ("resid_pre", full, [n - 1])},
                    captures={"z": (f"blocks.{full}.attn.hook_z", n - 2)},
                    rows={(full, n - 1): "row"}, logprobs=[5, n - 1], entropy=[n - 3, n - 2])
        if key == "targets":  # log-probs of the branch's own next tokens from position 33 on
            plan.targets = {p: ids[p + 1] for p in range(33, n - 1)}
        branches.append(Branch(key, ids, plan, keep_cache=key in ("prefix", "mid")))
    return base, branches


def _reference(sensor, ids: list[int], plan: Plan) -> dict:
    """Everything the plan asks for, from one whole HF forward (hidden states, logits) and one whole run_plan."""
    with torch.inference_mode():
        out = sensor.hf_model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    logp = torch.log_softmax(out.logits[0].double(), dim=-1)
    whole = run_plan(sensor, ids, Plan(captures=plan.captures, rows=plan.rows))  # one chunk: no cut before the row
    return {"pooled": {k: out.hidden_states[layer][0, pos].double().mean(0) for k, (_, layer, pos) in plan.pooled.items()},
            "logprobs": {p: logp[p] for p in plan.logprobs},
            "entropy": {p: float(-(logp[p].exp() * logp[p]).sum() / math.log(2)) for p in plan.entropy},
            "targets": {p: float(logp[p, t]) for p, t in plan.targets.items()},
            "captures": whole.captures, "rows": whole.rows}


def _check(got, want) -> None:
    for k, v in want["pooled"].items():
        torch.testing.assert_close(got.mean(k).double(), v, rtol=1e-6, atol=1e-6)  # float32 sums
    for p, v in want["logprobs"].items():
        torch.testing.assert_close(got.logprobs[p].double(), v, rtol=0, atol=1e-9)
    assert got.entropy.keys() == want["entropy"].keys() and got.target_logprob.keys() == want["targets"].keys()
    for name in ("entropy", "targets"):
        mine = got.entropy if name == "entropy" else got.target_logprob
        assert all(abs(mine[p] - v) < 1e-9 for p, v in want[name].items())
    for k, v in want["captures"].items():
        torch.testing.assert_close(got.captures[k], v, rtol=0, atol=1e-9)
    for k, layers in want["rows"].items():
        for layer, v in layers.items():
            torch.testing.assert_close(got.rows[k][layer], v, rtol=0, atol=1e-9)


@pytest.mark.parametrize("mode", ["interleaved", "hold", "own"])
def test_every_branch_equals_its_whole_forward(tiny_sensor_fp64, mode):
    sensor = tiny_sensor_fp64
    base, branches = _branches(sensor)
    results = {r.key: r for r in run_branches(sensor, branches, base, share=mode != "own", hold=mode == "hold")}
    assert sorted(results) == sorted(b.key for b in branches)
    for b in branches:
        _check(results[b.key].outputs, _reference(sensor, list(b.tokens), b.plan))
    if mode == "own":
        assert {r.forward for r in results.values()} == {"own"}
        return
    forward = {k: r.forward for k, r in results.items()}
    assert forward == {"prefix": "shared", "base": "shared", "mid": "suffix@25", "mid_longer": "suffix@25",
                       "end": f"suffix@{N_BASE}", "none": "own", "targets": "suffix@33"}


@pytest.mark.parametrize("hold", [False, True])
def test_a_kept_cache_continues_like_the_whole_sequence(tiny_sensor_fp64, hold):
    sensor = tiny_sensor_fp64
    base, branches = _branches(sensor)
    extra = _tokens(sensor, 7, 4)
    for r in run_branches(sensor, branches, base, hold=hold):
        b = next(x for x in branches if x.key == r.key)
        if not b.keep_cache:
            assert r.cache is None
            continue
        assert r.cache.length == len(b.tokens)
        ids = list(b.tokens) + extra
        got = run_plan(sensor, extra, Plan(logprobs=[len(ids) - 1]), start=r.cache).logprobs[len(ids) - 1]
        torch.testing.assert_close(got, _reference(sensor, ids, Plan(logprobs=[len(ids) - 1]))["logprobs"][len(ids) - 1],
                                   rtol=0, atol=1e-9)


def test_edge_rules_by_hand():
    base = [1, 2, 3, 4, 5]
    assert lcp([1, 2, 9], base) == 2 and lcp([], base) == 0 and lcp(base + [6], base) == 5
    assert departure([1, 2, 3], base, Plan()) == 3  # a prefix: served
    assert departure(base + [6, 7], base, Plan()) == 5  # departs at the very end of the base
    assert departure([1, 2, 9, 9], base, Plan()) == 2
    assert departure([9, 9], base, Plan()) == 0  # nothing shared: its own forward
    assert departure([1, 2, 3], base, Plan(targets={0: 2, 1: 3})) == 3  # targets inside a prefix: served
    assert departure([1, 2, 3], base, Plan(targets={2: 7})) == 2  # a target past its end: it runs a token itself
    assert departure([1, 2, 3, 4, 8, 8], base, Plan(targets={1: 3})) == 1  # departs by its first target
    assert departure([1, 2, 3], base, Plan(logprobs=[1]), merge=False) == 1  # no base outputs: all its own
    assert departure(base, base, Plan(), merge=False) == 4  # and at least one token to run


def test_resume_continues_the_last_sequence(tiny_sensor_fp64):
    sensor = tiny_sensor_fp64
    first, second = _tokens(sensor, 40, 5), None
    second = first[:30] + _tokens(sensor, 10, 6)
    resume = Resume(sensor)
    resume.run(first, Plan(), marks=[20, 28, 40], context="t")
    plan = Plan(entropy=[31, 35])
    got = resume.run(second, plan, marks=[40], context="t")
    assert resume.tokens_run == 40 + (40 - 28)  # continued from the latest snapshot before the departure (30)
    want = _reference(sensor, second, plan)
    assert all(abs(got.entropy[p] - v) < 1e-9 for p, v in want["entropy"].items())
    resume.run(second, plan, context="another task")
    assert resume.tokens_run == 40 + 12 + 40  # another context: nothing reused


@pytest.mark.parametrize("hold", [False, True])
def test_two_groups_leaving_the_base_at_one_token_both_continue_from_it(tiny_sensor_fp64, hold):
    """Two branches that leave the base at the same token and part later (neither a prefix of the other): each
    gets its own outputs and cache (the held base's snapshot there serves both groups)."""
    sensor = tiny_sensor_fp64
    base = _tokens(sensor, 40, 11)
    shared = _tokens(sensor, 8, 12)
    seqs = {"a": base[:20] + shared + _tokens(sensor, 6, 13), "b": base[:20] + shared + _tokens(sensor, 9, 14)}
    branches = [Branch(k, ids, Plan(logprobs=[len(ids) - 1]), keep_cache=True) for k, ids in seqs.items()]
    extra = _tokens(sensor, 3, 15)
    for r in run_branches(sensor, branches, base, hold=hold):
        ids = seqs[r.key]
        _check(r.outputs, _reference(sensor, ids, Plan(logprobs=[len(ids) - 1])))
        assert r.cache is not None and r.cache.length == len(ids)
        got = run_plan(sensor, extra, Plan(logprobs=[len(ids) + 2]), start=r.cache).logprobs[len(ids) + 2]
        want = _reference(sensor, ids + extra, Plan(logprobs=[len(ids) + 2]))["logprobs"][len(ids) + 2]
        torch.testing.assert_close(got, want, rtol=0, atol=1e-9)


@pytest.fixture(scope="module")
def llama_fp64(llama_path):
    from interp.sensor.models import load_model

    return load_model(str(llama_path), dtype="fp64")


def test_resume_cuts_an_attention_cache_back_to_any_departure(llama_fp64, tiny_sensor_fp64):
    """Plain attention KV (the random Llama): the next sequence continues from the last one's cache cut to the
    departure point itself, not to a mark before it; the outputs equal a whole forward. The hybrid's cache
    cannot be cut (Gated-DeltaNet states): ``crop_snapshot`` refuses it."""
    from interp.sensor.forward import Snapshot, croppable, crop_snapshot, new_cache

    sensor = llama_fp64
    first = _tokens(sensor, 40, 5)
    second = first[:30] + _tokens(sensor, 10, 6)
    third = second[:33] + _tokens(sensor, 4, 7)
    resume = Resume(sensor)
    resume.run(first, Plan(), marks=[20, 28], context="t")
    plan = Plan(entropy=[31, 35])
    got = resume.run(second, plan, context="t")
    assert resume.tokens_run == 40 + 10  # departs at 30 (the marks are not needed)
    want = _reference(sensor, second, plan)
    assert all(abs(got.entropy[p] - v) < 1e-9 for p, v in want["entropy"].items())
    plan = Plan(entropy=[33, 36])
    got = resume.run(third, plan, context="t")  # departs at 33 of the previous sequence's final cache
    assert resume.tokens_run == 40 + 10 + 4
    want = _reference(sensor, third, plan)
    assert all(abs(got.entropy[p] - v) < 1e-9 for p, v in want["entropy"].items())
    assert croppable(new_cache(sensor)) and not croppable(new_cache(tiny_sensor_fp64))
    with pytest.raises(ValueError, match="other than plain attention"):
        crop_snapshot(Snapshot(3, new_cache(tiny_sensor_fp64)), 2)
