"""Over-long contexts are skipped and recorded (with their length), never truncated; the rest is unaffected.

Reference: the same extraction without the limit. Boundaries under the limit
must give the same features (tolerances as in ``test_prefix_sharing``: the
restricted run's shared forward is shorter, so its cut points differ).
"""

from __future__ import annotations

import pytest
import torch

import interp.extraction.extract as extract_mod
from interp.extraction.extract import ExtractConfig, extract_trajectory
from interp.data.render import render

pytestmark = pytest.mark.parity

REL = {"tiny-qwen3.5": 1e-3, "smollm2-135m": 1e-5}


def _config(sensor, max_tokens: int) -> ExtractConfig:
    return ExtractConfig(layers=[0, sensor.n_layers - 1], poolings=["last", "mean_latest_step"],
                         attention_layers=sensor.full_attention_layers[-1:], max_tokens=max_tokens)


@pytest.mark.parametrize("condition", ["full", "delete_latest_reasoning"])
def test_long_boundaries_skipped_others_unchanged(sensor, mini_trajectory, condition):
    boundaries = [1, 2, 3, 4] if sensor.spec == "tiny-qwen3.5" else [1, 2]
    lengths = {b: render(mini_trajectory, b, sensor.tokenizer).n_tokens for b in boundaries}
    # A limit between the lengths of the first and the later renders (conditions only shorten them).
    limit = (lengths[1] + lengths[2]) // 2 if sensor.spec != "tiny-qwen3.5" else (lengths[2] + lengths[3]) // 2
    free = extract_trajectory(sensor, mini_trajectory, condition, _config(sensor, 10**6), boundaries)
    capped = extract_trajectory(sensor, mini_trajectory, condition, _config(sensor, limit), boundaries)
    assert [r.after_step for r in capped] == boundaries
    n_skipped = 0
    for f, c in zip(free, capped):
        assert f.n_tokens == c.n_tokens
        if f.n_tokens > limit:
            n_skipped += 1
            assert c.status == "skipped" and c.features == {} and c.attention == {}
            assert str(c.n_tokens) in c.reason and str(limit) in c.reason, c.reason
            assert c.boundary_entropy_bits is None and c.segments, "a skipped boundary still records its render"
            continue
        assert c.status == "ok" and c.reason == ""
        assert c.pool_counts == f.pool_counts
        for key, ref in f.features.items():
            diff = float((c.features[key] - ref).abs().max()) / float(ref.abs().max())
            assert diff <= REL[sensor.spec], (c.after_step, key, diff)
        for layer in f.attention:
            torch.testing.assert_close(c.attention[layer]["per_segment"], f.attention[layer]["per_segment"],
                                       rtol=0, atol=5e-5)
    assert 0 < n_skipped < len(boundaries), "the limit must split the boundaries"


def test_limit_is_inclusive(tiny_sensor, mini_trajectory):
    n = render(mini_trajectory, 1, tiny_sensor.tokenizer).n_tokens
    (at,) = extract_trajectory(tiny_sensor, mini_trajectory, "full", _config(tiny_sensor, n), [1])
    (below,) = extract_trajectory(tiny_sensor, mini_trajectory, "full", _config(tiny_sensor, n - 1), [1])
    assert at.status == "ok" and below.status == "skipped"


def test_all_skipped_runs_no_forward(tiny_sensor, mini_trajectory, monkeypatch):
    def no_forward(*args, **kwargs):
        raise AssertionError("a forward ran although every boundary is over the limit")

    monkeypatch.setattr(extract_mod, "run_branches", no_forward)
    rows = extract_trajectory(tiny_sensor, mini_trajectory, "full", _config(tiny_sensor, 50))
    assert [r.status for r in rows] == ["skipped"] * mini_trajectory.n_steps
    assert all("exceeds the limit of 50" in r.reason for r in rows)
