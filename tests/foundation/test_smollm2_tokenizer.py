"""The rendering, condition and deletion tests that take a tokenizer, rerun with real SmolLM2's (slow tier).

Their home modules (unit tier) run them with the tiny-qwen3.5 tokenizer. Here
the ``tokenizer`` fixture is SmolLM2's (no reasoning field in its template:
the fallback convention), which needs the real model package fetched once, so
``-m unit`` and ``-m "parity and not slow"`` never select these. The checks
are the same: exact spans against the tokenizer's offsets, token fractions
counted by the tokenizer.
"""

from __future__ import annotations

import pytest

from interp.data.render import render

from ._support import parse_tool_call
from .test_conditions import (test_hide_observation_changes_only_that_observation, test_random_is_seeded,
                              test_random_removes_fraction_r_of_each_steps_tokens,
                              test_reasoning_conditions_touch_only_reasoning)
from .test_deletions import test_every_deleted_history_of_the_demo_set_is_valid_and_renders
from .test_render import (cases, gen_prompt, test_boundary_out_of_range_raises,
                          test_empty_observation_and_unicode_pieces, test_odd_whitespace_reasoning_renders_verbatim,
                          test_random_token_removal_renders_exactly, test_render_full_history_at_every_boundary,
                          test_render_is_exact_under_conditions_that_empty_steps,
                          test_render_is_exact_under_conditions_that_keep_every_step_reasoning,
                          test_unedited_history_renders_recorded_reasoning_verbatim)

pytestmark = [pytest.mark.parity, pytest.mark.slow]

__all__ = ["cases", "gen_prompt", "test_hide_observation_changes_only_that_observation", "test_random_is_seeded",
           "test_random_removes_fraction_r_of_each_steps_tokens", "test_reasoning_conditions_touch_only_reasoning",
           "test_every_deleted_history_of_the_demo_set_is_valid_and_renders", "test_boundary_out_of_range_raises",
           "test_empty_observation_and_unicode_pieces", "test_odd_whitespace_reasoning_renders_verbatim",
           "test_random_token_removal_renders_exactly", "test_render_full_history_at_every_boundary",
           "test_render_is_exact_under_conditions_that_empty_steps",
           "test_render_is_exact_under_conditions_that_keep_every_step_reasoning",
           "test_unedited_history_renders_recorded_reasoning_verbatim"]


@pytest.fixture(scope="module")
def tokenizer():
    """Real SmolLM2's tokenizer, fetched once (``interp fetch smollm2-135m``)."""
    from interp.sensor.models import SPECS, load_tokenizer

    SPECS["smollm2-135m"].fetch()
    return load_tokenizer("smollm2-135m")


@pytest.fixture(scope="module")
def counter(tokenizer):
    """Token counter of SmolLM2's tokenizer (shadows the session one of tests/foundation/conftest.py)."""
    import functools

    from ._support import token_counter

    return functools.lru_cache(maxsize=None)(token_counter(tokenizer))


def test_fallback_tool_calls_read_back_as_json(corpus, tokenizer):
    """SmolLM2 (no tool support): each call is <tool_call> JSON that json.loads reads back."""
    tok = tokenizer
    _, trajs = corpus
    n_calls = 0
    for traj in trajs:
        r = render(traj, traj.n_steps, tok)
        assert r.mode == "fallback"
        for t, step in enumerate(traj.steps, start=1):
            spans = [s for s in r.spans("action", step=t)]
            if step.action.is_text:
                continue
            assert [s.block for s in spans] == list(range(len(step.action.calls)))
            for s, call in zip(spans, step.action.calls):
                obj = parse_tool_call(r.text[s.char_start:s.char_end])
                assert obj == {"name": call.tool, "arguments": dict(call.arguments)}
                n_calls += 1
        # The tool definitions are in the system turn, and observations are <tool_response> user turns.
        if traj.tools:
            (tools,) = r.spans("tools")
            assert tools.char_start < r.spans("task")[0].char_start
        for s in r.spans("observation"):
            assert r.text[:s.char_start].endswith("<tool_response>\n")
            assert r.text[s.char_end:].startswith("\n</tool_response>")
    assert n_calls > 0
