"""A unit's greedy turn and its samples share one prompt prefill: same tokens as a prefill each, one prefill run."""

from __future__ import annotations

import pytest

from interp.continuations import generation
from interp.continuations.run import RunSettings, continue_states
from interp.data.render import render

from .test_ext_interventions import mini_states

pytestmark = pytest.mark.parity

__all__ = ["mini_states"]


@pytest.mark.parametrize("which", ["tiny_sensor_fp64", "llama_sensor"])
def test_generation_from_the_prompt_snapshot_equals_a_fresh_prefill(request, which, mini_trajectory):
    """Hybrid (Gated-DeltaNet states, copied per generation) and plain-attention caches; greedy and sampled."""
    sensor = request.getfixturevalue(which)
    ids = render(mini_trajectory, 2, sensor.tokenizer).input_ids
    prompt = generation.prompt_snapshot(sensor, ids)
    embed = sensor.hf_model.get_input_embeddings()
    for seed in (None, 7, None):  # the snapshot serves several generations unchanged
        fresh = generation.generate_turn(sensor, ids, 16, seed=seed)
        lengths: list[int] = []
        handle = embed.register_forward_hook(lambda _m, args, _out: lengths.append(args[0].shape[-1]))
        try:
            shared = generation.generate_turn(sensor, ids, 16, seed=seed, prompt=prompt)
        finally:
            handle.remove()
        assert shared == fresh
        assert fresh["n_new_tokens"] > 1
        assert max(lengths) == 1  # continued from the snapshot: no prefill
    assert prompt.length == len(ids) - 1


def test_a_unit_with_samples_runs_its_prompt_once(tmp_path, tiny_sensor, mini_trajectory, mini_states):
    """Counted at the embedding: multi-token forwards (prefills) sum to each prompt once, minus its last token."""
    embed = tiny_sensor.hf_model.get_input_embeddings()
    lengths: list[int] = []
    handle = embed.register_forward_hook(lambda _m, args, _out: lengths.append(args[0].shape[-1]))
    try:
        settings = RunSettings(conditions=("full",), samples=2, max_new_tokens=6, seed=0)
        doc = continue_states(tiny_sensor, mini_states[:1], [mini_trajectory], tmp_path, settings, progress=False)
    finally:
        handle.remove()
    n_prompt = doc["rows"][0]["n_prompt_tokens"]
    assert len(doc["rows"]) == 3
    assert sum(n for n in lengths if n > 1) == n_prompt - 1  # not 3 x n_prompt
