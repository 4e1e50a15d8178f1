"""The final norm and the unembedding run in float32 whatever the model dtype (``interp.sensor.unembed``).

Reference: a plain HF forward of the same checkpoint with a hook taking the
final norm's input (the pre-norm hidden state, bfloat16 for a bfloat16 model),
then the norm and ``lm_head`` written out by hand in float32. The library's
log-probs (``run_plan``, the variants kernel, ``run_with_hooks``, KL Repair's
reference path) must equal it to float32 tolerance, and must differ from what
the old path gave (the model's own bfloat16 norm and ``lm_head``, cast to
float32 afterwards) by more than that tolerance. A float32 model is untouched.
"""

from __future__ import annotations

import pytest
import torch

from interp.sensor.forward import Plan, run_plan
from interp.sensor.unembed import logits as unembed_logits
from interp.sensor.unembed import promotes, unembedding
from patching.config import PatchConfig

RULE = PatchConfig().noise_rule  # the study's KL noise rule: PatchConfig's defaults

pytestmark = pytest.mark.parity

IDS = list(range(5, 70))
POS = [3, 40, len(IDS) - 1]
FP32_TOL = 1e-4  # nats: float32 round-off of a 64-wide norm, a 716-way unembedding and a log-softmax (~1e-6 seen)


@pytest.fixture(scope="module")
def bf16_sensor():
    from interp.sensor.models import load_model

    return load_model("tiny-qwen3.5", dtype="bf16")


def _hand_reference(sensor, ids):
    """(float32 log-probs from the pre-norm hidden by hand, the old path's log-probs), [n, vocab] each."""
    model = sensor.hf_model
    pre = {}
    handle = model.model.norm.register_forward_hook(lambda m, args, out: pre.__setitem__("x", args[0]))
    try:
        with torch.inference_mode():
            old = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float().log_softmax(-1)
    finally:
        handle.remove()
    return _hand(model, pre["x"][0]), old


def test_bf16_logprobs_equal_a_float32_hand_reference(bf16_sensor):
    assert bf16_sensor.dtype == torch.bfloat16 and promotes(bf16_sensor)
    ref, old = _hand_reference(bf16_sensor, IDS)
    out = run_plan(bf16_sensor, IDS, Plan(logprobs=POS, entropy=POS, targets={p: IDS[p + 1] for p in POS[:-1]}))
    for p in POS:
        assert out.logprobs[p].dtype == torch.float32
        assert (out.logprobs[p] - ref[p]).abs().max() < FP32_TOL
        # the old path (bf16 norm and lm_head) is off by far more than float32 round-off
        assert (old[p] - ref[p]).abs().max() > 20 * FP32_TOL
        bits = float(-(ref[p].exp() * ref[p]).sum() / torch.log(torch.tensor(2.0)))
        assert out.entropy[p] == pytest.approx(bits, abs=FP32_TOL)
    for p in POS[:-1]:
        assert out.target_logprob[p] == pytest.approx(float(ref[p, IDS[p + 1]]), abs=FP32_TOL)
    # the TransformerLens-style API: float32 logits of the same distribution
    logits = bf16_sensor.run_with_hooks(torch.tensor([IDS]), positions=POS)
    assert logits.dtype == torch.float32
    assert (logits[0].log_softmax(-1) - ref[POS]).abs().max() < FP32_TOL


def _hand(model, pre):
    """Qwen3.5's final RMSNorm, (1 + w) * x / rms(x), and lm_head, written out in float32 on pre-norm states."""
    x = pre.float()
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + model.config.rms_norm_eps) \
        * (1.0 + model.model.norm.weight.float())
    return (normed @ model.lm_head.weight.float().T).log_softmax(-1)


def test_chunked_and_cached_paths_use_it(bf16_sensor):
    """A chunked run (cache carried between chunks) and the variants kernel over a snapshot: each equals the float32
    hand reference of the pre-norm state that forward itself computed (taken by a hook on the model's final norm)."""
    from interp.sensor.kernels.variants import run_variants

    model, n = bf16_sensor.hf_model, len(IDS)
    seen: list[torch.Tensor] = []
    handle = model.model.norm.register_forward_hook(lambda m, args, out: seen.append(args[0]))
    try:
        out = run_plan(bf16_sensor, IDS, Plan(logprobs=[n - 1], cuts=[17, 33], snapshots=[n - 1]))
        assert seen[-1].dtype == torch.bfloat16 and seen[-1].shape[1] == 1  # the last chunk: the last token
        assert (out.logprobs[n - 1] - _hand(model, seen[-1][0, -1])).abs().max() < FP32_TOL
        snap = out.snapshots[n - 1]
        lp = run_variants(bf16_sensor, snap.cache, snap.length, IDS[-1:], [{}, {}])
        assert lp.dtype == torch.float32 and lp.shape[0] == 2
        assert (lp - _hand(model, seen[-1][:, -1])).abs().max() < FP32_TOL
    finally:
        handle.remove()


def test_float32_model_is_untouched(tiny_sensor):
    """A float32 model: no hook, its own weights: log-probs are its own lm_head on its own final norm, exactly."""
    assert not promotes(tiny_sensor)
    final = "ln_final.hook_out"
    out = run_plan(tiny_sensor, IDS, Plan(logprobs=POS, captures={p: (final, p) for p in POS}))
    rows = torch.stack([out.captures[p] for p in POS])  # one batch, as run_plan unembeds the rows of a chunk
    assert rows.dtype == torch.float32
    with torch.inference_mode():
        plain = tiny_sensor.hf_model.lm_head(rows).log_softmax(-1)
    for i, p in enumerate(POS):
        assert torch.equal(out.logprobs[p], plain[i])
    assert unembedding(tiny_sensor).extra_bytes == 0
    assert unembedding(tiny_sensor).weight is tiny_sensor.hf_model.lm_head.weight  # no copy


def test_copies_are_cached_and_sized(bf16_sensor):
    """One float32 copy per sensor (vocab x d_model x 4 bytes for lm_head), rebuilt when the weight changes."""
    u = unembedding(bf16_sensor)
    assert unembedding(bf16_sensor) is u
    head = bf16_sensor.hf_model.lm_head.weight
    assert u.weight.dtype == torch.float32 and torch.equal(u.weight, head.float())
    norm_bytes = sum(t.numel() * 4 for t in u.norm.parameters())
    assert u.extra_bytes == head.numel() * 4 + norm_bytes
    saved = head.detach().clone()
    with torch.no_grad():
        head.mul_(2.0)
    try:
        again = unembedding(bf16_sensor)
        assert again is not u and torch.equal(again.weight, head.float())
        probe = torch.randn(2, bf16_sensor.d_model)
        assert torch.allclose(unembed_logits(bf16_sensor, probe), 2 * (probe @ saved.float().T), rtol=1e-5, atol=1e-4)
    finally:
        with torch.no_grad():
            head.copy_(saved)
    assert torch.equal(unembedding(bf16_sensor).weight, saved.float())


def test_kl_repair_reference_path_is_float32(bf16_sensor, demo_trajectories):
    """KL Repair's reference path (the bridge) norms and unembeds in float32 too: its P_full equals the fast path's
    within bf16 layer round-off and its row for the final site is the hand reference of the bridge's pre-norm state."""
    from patching.kl_repair import kl_repair_trajectory

    traj = min(demo_trajectories, key=lambda t: t.n_steps)
    sites = [("resid_pre", 2), ("resid_post", bf16_sensor.n_layers - 1)]
    ref = kl_repair_trajectory(bf16_sensor, traj, "delete_all_reasoning", sites, boundaries=[2], method="reference", rule=RULE)[0]
    fast = kl_repair_trajectory(bf16_sensor, traj, "delete_all_reasoning", sites, boundaries=[2], rule=RULE)[0]
    # patching the final resid_post with the full run's gives P_full up to the final norm: KL ~ 0 in float32
    assert ref.kl_patch[-1] < 1e-6 and fast.kl_patch[-1] < 1e-6
    assert ref.d == pytest.approx(fast.d, rel=0.2, abs=0.02)
