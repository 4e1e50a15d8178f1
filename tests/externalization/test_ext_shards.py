"""Controlled continuations in shards: each shard generates its units only, the merged part folders give the
unsharded run's document without generating anything again.

Reference: one unsharded ``continue_states`` run with the same scripted model.
"""

from __future__ import annotations

import json

import pytest

from interp.continuations.run import RunSettings, continue_states
from interp.continuations.states import load_states
from interp.data.render import fallback_tool_call_text
from interp.io import merge_result_folders

pytestmark = pytest.mark.unit

STATES = [{"task_id": "mini-code-1", "after_step": 1, "rubric": {"next_tool": "read_file"}},
          {"task_id": "mini-code-1", "after_step": 3, "rubric": {"writes_code": False}}]


def test_shards_merge_to_the_unsharded_document(tmp_path, tiny_sensor, mini_trajectory, monkeypatch):
    path = tmp_path / "states.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in STATES))
    states = load_states(path, [mini_trajectory])
    calls = []

    def scripted(sensor, input_ids, max_new_tokens, seed=None, temperature=0.7, top_p=1.0, prompt=None):
        calls.append(len(input_ids))
        text = "<think>\nok\n</think>\n\n" + fallback_tool_call_text("read_file", {"path": f"f{len(input_ids)}.py"})
        return {"text": text, "n_new_tokens": 5, "stopped": True}

    monkeypatch.setattr("interp.continuations.run.generate_turn", scripted)
    settings = RunSettings(conditions=("full", "delete_all_reasoning", "hide_observation"), samples=1,
                           max_new_tokens=8, seed=3)
    reference = continue_states(tiny_sensor, states, [mini_trajectory], tmp_path / "ref", settings, progress=False)
    n_units = len(calls) // 2  # greedy + 1 sample per unit
    calls.clear()
    parts = [continue_states(tiny_sensor, states, [mini_trajectory], tmp_path / f"s{i}", settings, progress=False,
                             shard=(i, 2)) for i in range(2)]
    assert len(calls) // 2 == n_units  # every unit generated once, in one shard
    assert 0 < len(parts[0]["rows"]) < len(reference["rows"])
    with pytest.raises(ValueError, match="incomplete set of shards"):
        merge_result_folders(tmp_path / "m", [tmp_path / "s0"])
    assert all(not m for m in merge_result_folders(tmp_path / "m", [tmp_path / "s0", tmp_path / "s1"]).values())
    calls.clear()
    merged = continue_states(tiny_sensor, states, [mini_trajectory], tmp_path / "m", settings, progress=False)
    assert calls == [] and merged == reference
