"""The over-long rule per boundary in every command that runs the model: KL Repair, harm, continuations.

A boundary whose render exceeds ``max_tokens`` is not run and is recorded (with
its length) under ``skipped`` of the result file; the boundaries that fit are
unchanged. Reference: the same command without a limit.
"""

from __future__ import annotations

import pytest

from interp.continuations.run import RunSettings, continue_states
from interp.continuations.states import Rubric, State
from interp.data.conditions import apply_condition
from interp.data.render import render
from patching.harm import boundary_harm, summarize_harm
from patching.config import PatchConfig
from patching.kl_repair import default_sites, kl_repair_trajectory, summarize

RULE = PatchConfig().noise_rule  # the study's KL noise rule: PatchConfig's defaults

pytestmark = pytest.mark.parity

UNLIMITED = 10**6


def _split_limit(lengths: dict[int, int]) -> int:
    """A limit between the shortest and the longest of ``lengths`` (some boundaries fit, some do not)."""
    ordered = sorted(lengths.values())
    limit = (ordered[0] + ordered[-1]) // 2
    assert ordered[0] <= limit < ordered[-1]
    return limit


def test_kl_repair_skips_long_boundaries_and_keeps_the_others(tiny_sensor, mini_trajectory):
    traj, boundaries = mini_trajectory, [1, 2, 3, 4]
    sites = default_sites(tiny_sensor.n_layers, layers=[0, 3, 7])
    lengths = {b: max(render(traj, b, tiny_sensor.tokenizer).n_tokens,
                      render(apply_condition("delete_all_reasoning", traj, b)[0], b, tiny_sensor.tokenizer).n_tokens)
               for b in boundaries}
    limit = _split_limit(lengths)
    free = kl_repair_trajectory(tiny_sensor, traj, "delete_all_reasoning", sites, boundaries, max_tokens=UNLIMITED, rule=RULE)
    capped = kl_repair_trajectory(tiny_sensor, traj, "delete_all_reasoning", sites, boundaries, max_tokens=limit, rule=RULE)
    assert [r.after_step for r in capped] == boundaries
    for f, c in zip(free, capped):
        if lengths[c.after_step] > limit:
            assert c.skipped == f"context of {lengths[c.after_step]} tokens exceeds the limit of {limit}"
            assert c.repair == [] and c.kl_patch == []
            continue
        assert c.skipped == "" and c.d == pytest.approx(f.d, rel=1e-3, abs=1e-6)
        assert c.kl_patch == pytest.approx(f.kl_patch, rel=1e-3, abs=1e-6)
    doc = summarize(capped, sites, "delete_all_reasoning", tiny_sensor, "fast", 1, n_boot=50, rule=RULE)
    over = [b for b in boundaries if lengths[b] > limit]
    assert [(s["task_id"], s["after_step"]) for s in doc["skipped"]] == [(traj.task_id, b) for b in over]
    assert [s["n_tokens"] for s in doc["skipped"]] == [lengths[b] for b in over]
    assert {p["after_step"] for p in doc["per_sample"]} == set(boundaries) - set(over)
    assert doc["n_samples"] + doc["n_excluded"] == len(boundaries) - len(over)


def test_harm_skips_a_long_boundary(tiny_sensor, mini_trajectory):
    traj = mini_trajectory
    nxt = render(traj, 2, tiny_sensor.tokenizer)  # the teacher-forced render of boundary 1 reaches into step 2
    n = max(s.end for s in nxt.spans(step=2) if s.kind in ("reasoning_block", "action"))
    short = boundary_harm(tiny_sensor, traj, 1, max_k=1, max_tokens=n)
    skipped = boundary_harm(tiny_sensor, traj, 1, max_k=1, max_tokens=n - 1)
    assert short["target_tokens"] > 0 and "skipped" not in short
    assert skipped == {"task_id": traj.task_id, "after_step": 1, "n_tokens": n, "skipped": True,
                       "reason": f"context of {n} tokens exceeds the limit of {n - 1}"}
    doc = summarize_harm([short, skipped], n_boot=1000)
    assert doc["boundaries"] == [short]
    assert doc["skipped"] == [{"task_id": traj.task_id, "after_step": 1, "n_tokens": n,
                               "reason": f"context of {n} tokens exceeds the limit of {n - 1}"}]


def test_continuations_skip_long_prompts(tiny_sensor, mini_trajectory, tmp_path, monkeypatch):
    traj = mini_trajectory
    states = [State(f"s{b}", traj.task_id, b, Rubric(next_tool=("read_file",))) for b in (1, 3)]
    lengths = {b: render(traj, b, tiny_sensor.tokenizer).n_tokens for b in (1, 3)}
    limit = _split_limit(lengths)

    def scripted(sensor, input_ids, max_new_tokens, seed=None, temperature=0.7, top_p=1.0, prompt=None):
        return {"text": '<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}\n</tool_call>',
                "n_new_tokens": 9, "stopped": True, "truncated": False, "stop_reason": "action_end"}

    monkeypatch.setattr("interp.continuations.run.generate_turn", scripted)
    doc = continue_states(tiny_sensor, states, [traj], tmp_path / "run",
                          RunSettings(conditions=("full",), samples=0, max_new_tokens=64, max_tokens=limit),
                          progress=False)
    assert [(s["state_id"], s["after_step"], s["n_tokens"]) for s in doc["skipped"]] == [("s3", 3, lengths[3])]
    assert doc["skipped"][0]["reason"] == f"context of {lengths[3]} tokens exceeds the limit of {limit}"
    assert {r["state_id"] for r in doc["rows"]} == {"s1"}
