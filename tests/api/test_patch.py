"""``patching.patch`` against a hand-written two-forward computation with the TransformerLens bridge.

Reference: the bridge's ``run_with_cache`` on the source (whole forward, eager
attention) for the site activations, then one ``run_with_hooks`` of the target
per site with a hook that writes them over the target's last k rows; the
metric is a logit difference read on the last token. Tolerance 1e-4 on the
metric (sdpa vs eager kernels). Cases: source and target sharing a prefix (the
fast path continues the target from the source's cache) and not sharing one.
"""

from __future__ import annotations

import pytest
import torch


import patching
from patching.patch import patch

pytestmark = pytest.mark.parity


def _two_forward(sensor, source, target, groups, k, metric):
    bridge = sensor.bridge
    with torch.inference_mode():
        src_logits, cache = bridge.run_with_cache(torch.tensor([source]))
        values = [metric(src_logits[0, -1].float()), metric(bridge(torch.tensor([target]))[0, -1].float())]
        for group in groups:
            def put(x, hook):
                x = x.clone()
                x[0, -k:] = cache[hook.name][0, -k:]
                return x
            logits = bridge.run_with_hooks(torch.tensor([target]), fwd_hooks=[(n, put) for n in group])
            values.append(metric(logits[0, -1].float()))
    return [float(v) for v in values]


@pytest.mark.parametrize("share", ["prefix", "whole-prefix", "none"])
def test_patch_logit_difference_equals_two_forwards(tiny_sensor, share):
    """prefix: 25 shared tokens then 14 others; whole-prefix: the target's tokens before its tail are all shared."""
    g = torch.Generator().manual_seed(3)
    vocab = tiny_sensor.hf_model.config.vocab_size
    source = torch.randint(3, vocab, (60,), generator=g).tolist()
    tail = source[-3:]
    middle = torch.randint(3, vocab, (14,), generator=g).tolist()
    k = 2
    target = {"prefix": source[:25] + middle + tail, "whole-prefix": source[:25] + [(source[25] + 1) % vocab] + tail[-1:],
              "none": torch.randint(3, vocab, (30,), generator=g).tolist() + middle + tail}[share]
    a, b = int(torch.randint(3, vocab, (1,), generator=g)), int(torch.randint(3, vocab, (1,), generator=g))

    def logit_diff(logits):
        return logits[a] - logits[b]

    sites = ["blocks.0.hook_resid_pre", "blocks.3.hook_resid_pre", "blocks.3.attn.hook_z", "blocks.5.hook_mlp_out",
             ["blocks.2.hook_attn_out", "blocks.6.hook_resid_post"]]
    got = patch(tiny_sensor, source, target, sites, positions=k, metric=logit_diff)
    groups = [[s] if isinstance(s, str) else s for s in sites]
    # the bridge reports hook_attn_out of a linear-attention layer as linear_attn.hook_out
    bridge_groups = [[n.replace("2.hook_attn_out", "2.linear_attn.hook_out") for n in grp] for grp in groups]
    want = _two_forward(tiny_sensor, source, target, bridge_groups, k, logit_diff)
    # float32 through two kernel paths (chunked Gated-DeltaNet, sdpa vs the bridge's eager run): agreement to
    # ~1000 x float32's eps relative to the logit differences' size (~4), 1e-4 absolute near zero
    torch.testing.assert_close(torch.tensor([got.source, got.target, *got.patched]), torch.tensor(want),
                               rtol=1000 * torch.finfo(torch.float32).eps, atol=1e-4)
    assert got.sites[-1] == "blocks.2.hook_attn_out+blocks.6.hook_resid_post"
    assert max(abs(p - got.target) for p in got.patched) > 1e-2  # the patches matter
    assert got.logits.shape == (2 + len(sites), vocab)


def test_patch_is_exported_and_checks_its_input(tiny_sensor):
    assert patching.patch is patch
    with pytest.raises(ValueError, match="positions"):
        patch(tiny_sensor, [5, 6, 7], [5, 6], ["blocks.0.hook_resid_pre"], positions=2, metric=lambda lg: lg[0])
    with pytest.raises(ValueError, match="sites"):
        patch(tiny_sensor, [5, 6, 7], [5, 6, 7], [], metric=lambda lg: lg[0])
