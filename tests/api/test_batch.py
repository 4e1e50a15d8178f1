"""Batches of different-length rows on the fast path against running the rows one by one, and the TL-shaped helpers.

Reference: the same sensor's single-sequence ``run_with_cache`` / ``run_with_hooks``
on each row alone. A right-padded row's real tokens see exactly what they see
alone (causal forward, positions 0..n_i-1), so the two agree up to the kernel's
batch round-off: relative Frobenius error <= 100 x eps of the dtype per name.
The cache helpers TransformerLens offers (``accumulated_resid``,
``decompose_resid``, ``stack_activation``) are checked against stacking and
summing the cached sites by hand.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.parity

MODELS = ["tiny-qwen3.5", "gpt2", "llama"]
FIXTURE = {"tiny-qwen3.5": "tiny_sensor", "gpt2": "gpt2_sensor", "llama": "llama_sensor"}
LENGTHS = (16, 11, 5)
POSITIONS = [0, 2, -1]


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    return request.getfixturevalue(FIXTURE[request.param])


def _rows(sensor, lengths=LENGTHS) -> list[list[int]]:
    g = torch.Generator().manual_seed(11)
    vocab = sensor.hf_model.config.vocab_size
    return [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def _tol(sensor) -> float:
    return 100 * torch.finfo(sensor.dtype).eps


def test_a_ragged_batch_equals_its_rows_one_by_one(model):
    rows = _rows(model)
    logits, cache = model.run_with_cache(rows, positions=POSITIONS)
    assert logits.shape[:2] == (len(rows), len(POSITIONS))
    bad = {}
    for i, row in enumerate(rows):
        alone_logits, alone = model.run_with_cache(row, positions=POSITIONS)
        bad["logits"] = max(bad.get("logits", 0.0), _rel(logits[i], alone_logits[0]))
        for name in alone.keys():
            got, want = cache[name][i], alone[name][0]
            if name.endswith("hook_pattern"):  # [h, P, n_max]: keys past the row are padding, weight exactly 0
                assert torch.count_nonzero(got[..., len(row):]) == 0, name
                got = got[..., :len(row)]
            assert got.shape == want.shape, name
            bad[name] = max(bad.get(name, 0.0), _rel(got, want))
    assert max(bad.values()) <= _tol(model), {k: v for k, v in bad.items() if v > _tol(model)}
    # Sensitivity: the padded batch's last column is not the short row's last token.
    padded_last = model.run_with_hooks(rows, positions=[max(LENGTHS) - 1 - LENGTHS[2]] * 0 + [-1])
    last_column = model.run_with_hooks(torch.nn.utils.rnn.pad_sequence([torch.tensor(r) for r in rows], True, 0),
                                       positions=[-1], attention_mask=torch.ones(3, max(LENGTHS)))
    assert _rel(last_column[2], padded_last[2]) > 1e-2


def test_padded_tensors_and_masks_equal_the_ragged_rows(model):
    rows = _rows(model, (9, 4))
    pad = model.tokenizer.pad_token_id
    right = torch.full((2, 9), pad, dtype=torch.long)
    left = torch.full((2, 9), pad, dtype=torch.long)
    mask_left = torch.zeros(2, 9, dtype=torch.long)
    for i, row in enumerate(rows):
        right[i, :len(row)] = torch.tensor(row)
        left[i, 9 - len(row):] = torch.tensor(row)
        mask_left[i, 9 - len(row):] = 1
    want = model.run_with_hooks(rows, positions=[-1, 1])
    assert _rel(model.run_with_hooks(right, positions=[-1, 1]), want) <= _tol(model)  # trailing pads dropped
    assert _rel(model.run_with_hooks(left, positions=[-1, 1], attention_mask=mask_left), want) <= _tol(model)
    with pytest.raises(ValueError, match="row 0 has a gap"):
        model.run_with_hooks(right, attention_mask=torch.tensor([[1, 0, 1, 1, 1, 1, 1, 1, 1], [1] * 9]))
    with pytest.raises(ValueError, match="one length"):
        model.run_with_cache(rows, positions=None)


def test_hooks_patch_each_row_as_when_it_runs_alone(model):
    rows = _rows(model)

    def damp(activation: torch.Tensor, hook) -> torch.Tensor:
        out = activation.clone()
        out[:, 1] *= 0.25  # position 1 of every row
        return out

    hooks = [("blocks.1.hook_resid_pre", damp)]
    batch = model.run_with_hooks(rows, fwd_hooks=hooks)
    for i, row in enumerate(rows):
        assert _rel(batch[i], model.run_with_hooks(row, fwd_hooks=hooks)[0]) <= _tol(model)
    assert _rel(batch, model.run_with_hooks(rows)) > 1e-3  # the hook changed something


def test_to_tokens_and_to_string_as_transformer_lens(model):
    texts = ["hello world", "a much longer sentence, here it is"]
    tokens = model.to_tokens(texts)
    assert tokens.dim() == 2 and tokens.shape[0] == 2 and tokens.device == model.device
    assert torch.equal(tokens, model.bridge.to_tokens(texts))
    assert model.to_string(tokens[1]) == model.bridge.to_string(tokens[1])
    assert model.to_string(tokens) == model.bridge.to_string(tokens) and len(model.to_string(tokens)) == 2
    assert "".join(model.to_str_tokens(texts[0], prepend_bos=False)) == texts[0]
    # to_tokens output runs as is: the short row's trailing pads are not read as tokens.
    batch = model.run_with_hooks(tokens)
    for i, text in enumerate(texts):
        alone = model.to_tokens(text)
        assert _rel(batch[i], model.run_with_hooks(alone)[0]) <= _tol(model)


def test_cache_helpers_stack_and_sum_the_cached_sites(tiny_sensor):
    sensor = tiny_sensor
    rows = _rows(sensor, (12, 7))
    _, cache = sensor.run_with_cache(rows, positions=[-1, 3])
    n = sensor.n_layers
    pre = torch.stack([cache[f"blocks.{l}.hook_resid_pre"] for l in range(n)])
    final = cache[f"blocks.{n - 1}.hook_resid_post"]
    assert torch.equal(cache.stack_activation("resid_pre"), pre)
    assert torch.equal(cache.accumulated_resid(), torch.cat([pre, final[None]]))
    assert torch.equal(cache.accumulated_resid(layer=2), pre[:3])  # up to and including resid_pre of layer 2
    parts = cache.decompose_resid()
    assert parts.shape == (2 * n + 1, 2, 2, sensor.d_model)  # embed, then attn_out and mlp_out of each layer
    assert torch.equal(parts[0], cache["hook_embed"])
    assert torch.equal(parts[1::2], cache.stack_activation("attn_out"))
    # Residual stream identity: the pieces sum to the final residual (pre-norm blocks add their outputs).
    assert _rel(parts.sum(0), final) <= _tol(sensor)


def test_patch_takes_a_batch_and_equals_each_pair_alone(tiny_sensor):
    from patching.patch import PatchResult, patch

    sensor = tiny_sensor
    base = _rows(sensor, (30,))[0]
    sources = [base, base[:22] + _rows(sensor, (6,))[0]]
    targets = [base[:12] + base[20:], _rows(sensor, (17,))[0]]  # a deletion (shares 12 tokens), an unrelated run
    sites = ["blocks.1.hook_resid_pre", ["blocks.3.hook_attn_out", "blocks.5.hook_mlp_out"]]
    results = patch(sensor, sources, targets, sites, positions=2)
    assert isinstance(results, list) and len(results) == 2
    for result, src, tgt in zip(results, sources, targets):
        alone = patch(sensor, src, tgt, sites, positions=2)
        assert isinstance(alone, PatchResult) and result.sites == alone.sites
        assert _rel(result.logits, alone.logits) <= _tol(sensor)
        assert abs(result.target - alone.target) <= 1e-4 and abs(result.source - alone.source) <= 1e-4
    assert results[0].target != results[1].target  # the rows are different pairs
    shared = patch(sensor, [sources[0]], targets, sites, positions=2)  # one source for every target
    assert _rel(shared[0].logits, results[0].logits) <= _tol(sensor)
    with pytest.raises(ValueError, match=r"row 1"):
        patch(sensor, sources, [targets[0], targets[1][:2]], sites, positions=2)
