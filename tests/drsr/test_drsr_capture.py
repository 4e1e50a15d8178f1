"""The representations and attention the DRSR analyses read come from one forward of the prompt at b (the one the
online gate runs): equal to a plain HF forward's hidden states and to a separate boundary-row run; harm unchanged
by the capture."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interp.data.deletions import UNIT_KINDS
from interp.data.render import render
from interp.sensor.forward import Plan, run_plan
from patching.drsr import boundary_record
from patching.harm import boundary_harm
from patching.relations import unit_positions

pytestmark = pytest.mark.parity


def test_captured_states_and_spans_equal_a_plain_hf_forward(tiny_sensor, mini_trajectory):
    traj, b = mini_trajectory, 3
    rec = boundary_record(tiny_sensor, traj, b, max_k=2, budget=2, proj_dim=None)
    plain = boundary_harm(tiny_sensor, traj, b, 2, 2, 0, UNIT_KINDS)
    assert [s["members"] for s in rec["sets"]] == [s["members"] for s in plain["sets"]]
    assert np.allclose([s["harm"] for s in rec["sets"]], [s["harm"] for s in plain["sets"]], atol=1e-5)
    prompt = render(traj, b, tiny_sensor.tokenizer)
    with torch.no_grad():
        hidden = tiny_sensor.hf_model(input_ids=torch.tensor([prompt.input_ids]), output_hidden_states=True,
                                      use_cache=False).hidden_states
    assert rec["layers"] == list(range(tiny_sensor.n_layers))
    kinds = {c["unit"][0] for c in rec["candidates"]}
    assert kinds == set(UNIT_KINDS)
    for layer in rec["layers"]:
        h = hidden[layer][0].double().numpy()
        assert np.allclose(rec["state"][layer], h[prompt.n_tokens - 1], rtol=1e-4, atol=1e-3)  # float32 forwards, values up to ~50
        for c in rec["candidates"]:
            pos = unit_positions(prompt, c["unit"])
            assert len(pos) == c["n_tokens"] > 0
            assert np.allclose(c["rep"][layer], h[pos].mean(0), rtol=1e-4, atol=1e-3)  # float32 forwards, values up to ~50, (layer, c["unit"])
    # the boundary row of a separate prompt-only run: attention mass on each unit's span per layer and head
    layers = tiny_sensor.full_attention_layers
    out = run_plan(tiny_sensor, prompt.input_ids, Plan(rows={(layer, prompt.n_tokens - 1): "b" for layer in layers}))
    for c in rec["candidates"]:
        pos = unit_positions(prompt, c["unit"])
        for i, layer in enumerate(layers):
            assert np.allclose(c["attention"][i], out.rows["b"][layer][:, pos].sum(-1).numpy(), atol=1e-5)


def test_unit_spans_cover_the_right_segments(tiny_sensor, mini_trajectory):
    prompt = render(mini_trajectory, 3, tiny_sensor.tokenizer)
    step = set(unit_positions(prompt, ("step", 2, None)))
    exchange = set(unit_positions(prompt, ("tool_exchange", 2, 0)))
    obs = set(unit_positions(prompt, ("observation", 2, 0)))
    block = set(unit_positions(prompt, ("reasoning", 2, 0)))
    assert obs < exchange <= step and block <= step and not block & exchange
    assert exchange - obs == {p for s in prompt.spans("action", step=2) if s.block == 0 for p in range(s.start, s.end)}
