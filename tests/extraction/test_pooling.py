"""Pooling rules: which positions each rule pools, checked by hand on rendered prompts.

The expected positions are found without ``interp.extraction.pooling`` or the render's
segment table: the selected tokens' text (from the tokenizer's offsets of the
whole prompt) must spell exactly the trajectory's own pieces, one contiguous
run of tokens per piece, and the generation-prompt rule must cover exactly the
text after the last piece of the history. Then the pooled features of
``extract_trajectory`` are checked against a mean of the plain HF hidden
states over those hand-found positions.
"""

from __future__ import annotations

import json

import pytest
import torch

from interp.data.conditions import apply_condition
from interp.extraction.extract import ExtractConfig, extract_trajectory
from interp.extraction.pooling import pooling_positions
from interp.data.render import render

from ._reference import POOLINGS, hf_forward, token_text

pytestmark = pytest.mark.parity


def _runs(positions: list[int]) -> list[list[int]]:
    """Maximal runs of consecutive positions."""
    runs: list[list[int]] = []
    for p in positions:
        if runs and p == runs[-1][-1] + 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    return runs


def _generation_prompt(tokenizer) -> str:
    msgs = [{"role": "user", "content": "x"}]
    with_gp = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    without = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=False)
    return with_gp[len(without):]


def _check_action(text: str, call) -> None:
    """A tool call as rendered: ``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``."""
    assert text.startswith("<tool_call>\n") and text.endswith("\n</tool_call>"), text
    obj = json.loads(text[len("<tool_call>\n"):-len("\n</tool_call>")])
    assert obj == {"name": call.tool, "arguments": dict(call.arguments)}, obj


def _check_step_pieces(rendered, positions, step) -> None:
    """The positions spell step's reasoning blocks, its action(s), then its observation(s), one run each."""
    texts = [token_text(rendered, run) for run in _runs(positions)]
    n_blocks, n_obs = len(step.blocks), len(step.observations)
    n_actions = 1 if step.action.is_text else len(step.action.calls)
    assert len(texts) == n_blocks + n_actions + n_obs, texts
    assert texts[:n_blocks] == list(step.blocks)
    actions = texts[n_blocks:n_blocks + n_actions]
    if step.action.is_text:
        assert actions == [step.action.text]
    else:
        for text, call in zip(actions, step.action.calls):
            _check_action(text, call)
    assert texts[n_blocks + n_actions:] == list(step.observations)


@pytest.fixture(scope="module", params=["tiny-qwen3.5", pytest.param("smollm2-135m", marks=pytest.mark.slow)])
def tok(request):
    from interp.sensor.models import SPECS, load_tokenizer

    SPECS[request.param].fetch()
    return load_tokenizer(request.param)


@pytest.mark.parametrize("condition", ["full", "delete_all_reasoning", "delete_latest_reasoning", "hide_observation"])
@pytest.mark.parametrize("b", [1, 2, 3, 4])
def test_rule_positions_by_hand(tok, mini_trajectory, condition, b):
    edited, _ = apply_condition(condition, mini_trajectory, b)
    r = render(edited, b, tok)
    n = r.n_tokens
    assert pooling_positions("last", r) == [n - 1]
    assert pooling_positions("mean_last:8", r) == list(range(n - 8, n))
    assert pooling_positions("mean_last:100000", r) == list(range(n))

    latest = pooling_positions("mean_latest_step", r)
    _check_step_pieces(r, latest, edited.steps[b - 1])
    assert token_text(r, latest) != "" and (condition != "delete_latest_reasoning" or not edited.steps[b - 1].blocks)

    reasoning = pooling_positions("mean_reasoning", r)
    expected_blocks = [blk for step in edited.steps[:b] for blk in step.blocks]
    assert [token_text(r, run) for run in _runs(reasoning)] == expected_blocks
    if condition == "delete_all_reasoning":
        assert reasoning == []

    gen = pooling_positions("mean_generation_prompt", r)
    assert gen == list(range(gen[0], n)), "the generation prompt rule is the trailing run of tokens"
    last_step = edited.steps[b - 1]
    last_piece = last_step.observations[-1] if last_step.observations else last_step.action.text
    tail = r.text[r.text.rindex(last_piece) + len(last_piece):]
    assert token_text(r, gen) == tail
    assert tail.endswith(_generation_prompt(tok))
    for rule in POOLINGS:
        pos = pooling_positions(rule, r)
        assert pos == sorted(set(pos)) and all(0 <= p < n for p in pos), rule


def test_bad_rules_are_refused(tok, mini_trajectory):
    r = render(mini_trajectory, 1, tok)
    with pytest.raises(ValueError, match="unknown pooling rule"):
        pooling_positions("mean_everything", r)
    with pytest.raises(ValueError, match="unknown pooling rule"):
        pooling_positions("mean_last:x", r)
    with pytest.raises(ValueError, match="N >= 1"):
        pooling_positions("mean_last:0", r)


@pytest.mark.parametrize("condition", ["full", "delete_all_reasoning"])
def test_pooled_features_equal_mean_of_hf_states_over_hand_positions(tiny_sensor, mini_trajectory, condition):
    """Each rule's feature = mean of the plain forward's hidden states over the hand-found positions."""
    b = 2
    layers = [0, 3, tiny_sensor.n_layers - 1]
    config = ExtractConfig(layers=layers, poolings=list(POOLINGS), share_prefix=False)
    (row,) = extract_trajectory(tiny_sensor, mini_trajectory, condition, config, [b])
    edited, _ = apply_condition(condition, mini_trajectory, b)
    r = render(edited, b, tiny_sensor.tokenizer)
    ref = hf_forward(tiny_sensor, r.input_ids, logits=False)
    n = r.n_tokens
    step = edited.steps[b - 1]
    step_text = [*step.blocks, step.observations[0]]
    hand = {
        "last": [n - 1],
        "mean_last:8": list(range(n - 8, n)),
        # tokens whose text lies inside one of the step's pieces (located in the prompt text by search)
        "mean_latest_step": sorted(p for p in range(n) if _inside_any(r, p, step_text)
                                   or _inside_tool_call(r, p, b, mini_trajectory.task)),
        "mean_reasoning": sorted(p for p in range(n) if _inside_any(r, p, [blk for s in edited.steps[:b]
                                                                              for blk in s.blocks])),
        "mean_generation_prompt": list(range(n - len(tiny_sensor.tokenizer(
            r.text[r.text.rindex(step.observations[0]) + len(step.observations[0]):],
            add_special_tokens=False)["input_ids"]), n)),
    }
    for rule, pos in hand.items():
        assert row.pool_counts[rule] == len(pos), (rule, row.pool_counts[rule], len(pos))
        for layer in layers:
            got = row.features[f"resid_pre.{layer}.{rule}"]
            if not pos:
                assert torch.equal(got, torch.zeros(tiny_sensor.d_model)), rule
                continue
            torch.testing.assert_close(got, ref.hidden[layer][pos].mean(0), rtol=1e-5, atol=1e-5,
                                       msg=lambda m, rule=rule, layer=layer: f"{rule} layer {layer}: {m}")
    if condition == "delete_all_reasoning":
        assert row.pool_counts["mean_reasoning"] == 0


def _inside_any(r, p: int, pieces: list[str]) -> bool:
    """Token p's characters lie inside an occurrence of one of ``pieces`` in the prompt text."""
    s, e = r.offsets[p]
    for piece in pieces:
        start = r.text.find(piece)
        while start >= 0:
            if start <= s and e <= start + len(piece):
                return True
            start = r.text.find(piece, start + 1)
    return False


def _inside_tool_call(r, p: int, b: int, task: str) -> bool:
    """Token p lies inside the b-th ``<tool_call>...</tool_call>`` region after the task (one call per step)."""
    after_task = r.text.index(task) + len(task)  # the system message quotes the tag format: skip it
    regions, start = [], r.text.find("<tool_call>\n{", after_task)
    while start >= 0:
        end = r.text.index("</tool_call>", start) + len("</tool_call>")
        regions.append((start, end))
        start = r.text.find("<tool_call>\n{", end)
    s, e = r.offsets[p]
    lo, hi = regions[b - 1]
    return lo <= s and e <= hi


def test_parse_pooling_is_the_one_parser(tiny_sensor, mini_trajectory):
    from interp.extraction.pooling import parse_pooling

    r = render(mini_trajectory, 2, tiny_sensor.tokenizer)
    for rule in ["last", "mean_last:3", "mean_latest_step", "mean_reasoning", "mean_generation_prompt"]:
        assert parse_pooling(rule)(r) == pooling_positions(rule, r)
    for rule in ["mean_reasonig", "mean_last", "mean_last:x", "last:1", ""]:
        with pytest.raises(ValueError, match="unknown pooling rule"):
            parse_pooling(rule)
