"""Steps without reasoning: any trajectory where some steps have empty reasoning renders, extracts and patches.

The template rule (``interp.data.render``): a step without reasoning renders
with no think section in every mode; the template decides only in native
field mode (the tiny template writes nothing; a template that always opens a
think section writes an empty one, as glue). References, independent of the
library: the tokenizer's chat template applied to messages built by hand (the
empty step's turn has no ``reasoning_content``); the same trajectory with the
empty steps' reasoning written as whitespace only (the same render, so the
same features); and, under a template that always writes a think section, the
features before the empty step (unchanged: causal prefix) and after it
(changed: the template says so).
"""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interp.data.conditions import CONDITIONS, apply_condition
from interp.data.render import render
from interp.data.trajectory import Trajectory
from interp.extraction.entropy import entropy_table
from interp.extraction.extract import ExtractConfig, extract_trajectory
from patching.harm import boundary_harm, candidate_sets
from patching.config import PatchConfig
from patching.kl_repair import default_sites, kl_repair_trajectory
from probes.targets import label_target
from interp.externalization.labeler import GapLabelerConfig, label_gap

RULE = PatchConfig().noise_rule  # the study's KL noise rule: PatchConfig's defaults

pytestmark = pytest.mark.parity

ALWAYS_THINK = ("{% if message.reasoning_content %}<think>\n{{ message.reasoning_content }}\n</think>"
                "{{ '\\n\\n' }}{% endif %}")
ALWAYS_THINK_NEW = "<think>\n{{ message.reasoning_content or '' }}\n</think>{{ '\\n\\n' }}"
BLANKS = ("", "   ", "\n\n", " \t\n\n  \n")


def _emptied(raw: dict, empty: set[int], blank: str = "") -> Trajectory:
    """The record with steps ``empty`` (0-based) given reasoning ``blank`` (no block)."""
    raw = copy.deepcopy(raw)
    for i in empty:
        raw["steps"][i]["reasoning"] = blank
    return Trajectory.from_json(raw)


def _reference_text(traj: Trajectory, b: int, tokenizer) -> str:
    """The native prompt rebuilt by hand: reasoning_content only for steps with blocks (template applied)."""
    msgs = [{"role": "system", "content": traj.system_prompt}, {"role": "user", "content": traj.task}]
    for step in traj.steps[:b]:
        msg = {"role": "assistant", "content": step.action.text or "" if step.action.is_text else ""}
        if not step.action.is_text:
            msg["tool_calls"] = [{"type": "function", "function": {"name": c.tool, "arguments": dict(c.arguments)}}
                                 for c in step.action.calls]
        if step.blocks:
            msg["reasoning_content"] = step.reasoning
        msgs.append(msg)
        msgs += [{"role": "user" if step.action.is_text else "tool", "content": o} for o in step.observations]
    tools = [{"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                               "parameters": t.get("parameters", {})}} for t in traj.tools]
    return tokenizer.apply_chat_template(msgs, tools=tools or None, tokenize=False, add_generation_prompt=True)


def _config(sensor) -> ExtractConfig:
    return ExtractConfig(layers=[0, sensor.n_layers - 1], poolings=["last", "mean_reasoning", "mean_latest_step"],
                         attention_layers=sensor.full_attention_layers[-1:])


def _check_rows(traj: Trajectory, rows, renders) -> None:
    for row in rows:
        assert row.status == "ok", row.reason
        r = renders[row.after_step]
        n_reasoning = sum(s.n_tokens for s in r.spans("reasoning_block"))
        assert row.pool_counts["mean_reasoning"] == n_reasoning
        assert row.position["reasoning_tokens"] == n_reasoning
        for key, value in row.features.items():
            assert torch.isfinite(value).all(), key
            if key.endswith(".mean_reasoning") and n_reasoning == 0:
                assert torch.count_nonzero(value) == 0  # the documented value of an empty scope
        assert np.isfinite(row.boundary_entropy_bits)


def test_any_steps_without_reasoning_render_extract_and_patch(tiny_sensor, mini_trajectory):
    """Property (hypothesis): a random subset of steps emptied (empty or blank reasoning)."""
    raw = mini_trajectory.to_json()
    n = mini_trajectory.n_steps
    tok = tiny_sensor.tokenizer
    sites = default_sites(tiny_sensor.n_layers, layers=[0, tiny_sensor.n_layers - 1])

    @settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(st.sets(st.integers(0, n - 1), min_size=1, max_size=n), st.sampled_from(BLANKS))
    def check(empty, blank):
        traj = _emptied(raw, empty, blank)
        plain = _emptied(raw, empty, "")
        renders = {}
        for b in range(1, n + 1):
            r = render(traj, b, tok)
            renders[b] = r
            # the template rule: no think section, exactly the hand-built prompt; no span for the empty steps
            assert r.text == _reference_text(plain, b, tok) == render(plain, b, tok).text
            assert {s.step for s in r.spans("reasoning_block")} == {t for t in range(1, b + 1) if t - 1 not in empty}
            assert [(s.start, s.end) for s in r.segments] == [(s.start, s.end) for s in render(plain, b, tok).segments]
        for condition in ("full", "delete_all_reasoning"):
            rows = extract_trajectory(tiny_sensor, traj, condition, _config(tiny_sensor))
            edited = {b: render(apply_condition(condition, traj, b)[0], b, tok) for b in range(1, n + 1)}
            _check_rows(traj, rows, edited)
            if condition == "full":
                same = extract_trajectory(tiny_sensor, plain, condition, _config(tiny_sensor))
                for a, c in zip(rows, same):  # blank and empty reasoning: the same render, the same features
                    for key in a.features:
                        torch.testing.assert_close(a.features[key], c.features[key], rtol=0, atol=0)
        repairs = kl_repair_trajectory(tiny_sensor, traj, "delete_all_reasoning", sites, rule=RULE)
        for row in repairs:
            assert np.isfinite(row.d) and row.skipped == ""
            if all(t - 1 in empty for t in range(1, row.after_step + 1)):
                assert row.excluded and abs(row.d) < 1e-5  # nothing to delete: P_del == P_full (up to round-off)
            else:
                assert all(np.isfinite(row.kl_patch))

    check()


def test_empty_think_section_changes_later_boundaries_only_where_the_template_writes_it(tiny_sensor,
                                                                                         mini_trajectory):
    """Under a template that always opens a think section, the empty step gets ``<think>\\n\\n</think>`` (glue):
    boundaries before it keep their features exactly, boundaries after it change; with the tiny template they do not."""
    tok = copy.deepcopy(tiny_sensor.tokenizer)
    assert ALWAYS_THINK in tok.chat_template
    tok.chat_template = tok.chat_template.replace(ALWAYS_THINK, ALWAYS_THINK_NEW)
    always = dataclasses.replace(tiny_sensor, tokenizer=tok, chat_template=tok.chat_template)
    traj = _emptied(mini_trajectory.to_json(), {1})  # step 2 without reasoning
    for b in range(1, traj.n_steps + 1):
        r = render(traj, b, tok)
        assert r.mode == "native" and r.reasoning_mode == "field"
        assert r.text == _reference_text(traj, b, tok)  # the template's own output, exact spans checked by render
        assert r.text.count("<think>\n\n</think>") == (b >= 2) and not r.spans("reasoning_block", step=2)
        assert render(traj, b, tiny_sensor.tokenizer).text.count("<think>") == b - (b >= 2)
    config = ExtractConfig(layers=[tiny_sensor.n_layers - 1], poolings=["last"])
    with_think = extract_trajectory(always, traj, "full", config)
    without = extract_trajectory(tiny_sensor, traj, "full", config)
    key = f"resid_pre.{tiny_sensor.n_layers - 1}.last"
    for a, c in zip(with_think, without):
        if a.after_step < 2:  # before the empty step: the same tokens, the same features
            assert a.n_tokens == c.n_tokens
            torch.testing.assert_close(a.features[key], c.features[key], rtol=0, atol=1e-6)
        else:  # the always-think template adds the empty section: more tokens, other features
            assert a.n_tokens > c.n_tokens
            assert not torch.allclose(a.features[key], c.features[key], atol=1e-4)


def test_every_analysis_accepts_steps_without_reasoning(tiny_sensor, mini_trajectory, tmp_path):
    """Conditions (ICLR N = 0, random r with zero tokens), ICLR tables, y and G labels, harm candidates."""
    tok = tiny_sensor.tokenizer
    n = mini_trajectory.n_steps
    traj = _emptied(mini_trajectory.to_json(), {0, 2})  # steps 1 and 3 without reasoning
    for b in range(1, n + 1):
        for name in CONDITIONS:
            params = ({"scorer": lambda h, t: [1.0] * len(h.steps[t - 1].blocks)} if name.startswith("iclr")
                      else {"tokenizer": tok} if name == "random"
                      else {"gate": lambda h, t: [("reasoning", 2, 0)] if t >= 2 else None} if name == "drsr_gate"
                      else {})
            edited, log = apply_condition(name, traj, b, **params)
            render(edited, b, tok)
            assert all(e.step not in (1, 3) for e in log.edits if e.what.startswith("reasoning")), (name, log)
            if name == "random":
                assert log.per_step[1] == {"units": 0, "removed": 0, "fraction": 0.0}
    table = entropy_table(tiny_sensor, [traj], full=True)
    assert set(table["step"]) == {2, 4} and table["mean_entropy_bits"].notna().all()
    assert label_target(traj, 1).y in (0, 1) and label_target(traj, 2).y in (0, 1)
    latest = label_gap(traj, 1, GapLabelerConfig(scope="latest"))
    assert latest.externalization_gap == 0 and latest.items == []
    assert all(s[0][1] not in (1, 3) for s in candidate_sets(traj, 3, max_k=2, budget=3, units=("reasoning",)))
    assert candidate_sets(traj, 1, units=("reasoning",)) == []
    empty_history = boundary_harm(tiny_sensor, traj, 1, max_k=2, budget=2, units=("reasoning",))
    assert empty_history["sets"] == [] and np.isfinite(empty_history["nll_full"])
    after_empty = boundary_harm(tiny_sensor, traj, 3, max_k=2, budget=2, units=("reasoning",))
    assert after_empty["sets"] and all(np.isfinite(s["harm"]) for s in after_empty["sets"])
    json.dumps(after_empty, allow_nan=False)


@pytest.mark.slow  # fetches real SmolLM2 (its tokenizer)
def test_fallback_template_writes_no_think_section_for_a_step_without_reasoning(mini_trajectory):
    """SmolLM2 (fallback convention): the empty step's turn is its action alone; blank = empty, byte for byte."""
    from interp.sensor.models import SPECS, load_tokenizer

    SPECS["smollm2-135m"].fetch()
    tok = load_tokenizer("smollm2-135m")
    raw = mini_trajectory.to_json()
    for blank in BLANKS:
        traj = _emptied(raw, {1}, blank)
        for b in range(1, traj.n_steps + 1):
            r = render(traj, b, tok)
            assert r.mode == "fallback"
            assert r.text.count("<think>\n") == b - (b >= 2)  # every step with reasoning, not step 2
            assert r.text == render(_emptied(raw, {1}), b, tok).text
            if b >= 2:
                (action,) = r.spans("action", step=2)
                assert r.text[:action.char_start].endswith("<|im_start|>assistant\n")  # no think before it
