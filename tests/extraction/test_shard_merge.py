"""Extraction shards: units split by tokens, the shard recorded in ``store.json``, and ``merge_stores`` refusing
an incomplete set (listing what is missing) or shards of other settings or input.

Reference for the split: the units' own render lengths, counted here from ``render`` directly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interp.data.render import render
from interp.data.trajectory import load_trajectories
from interp.extraction.batch import extract_to_store
from interp.extraction.extract import ExtractConfig
from interp.extraction.store import StoreMismatch, merge_stores, unit_name
from interp.io import balanced_shards

from ._reference import DEMO, raw_lines, write_jsonl

pytestmark = pytest.mark.e2e

CONDITIONS = ["full", "delete_all_reasoning"]
TASKS = ["web-002", "web-003", "web-004"]


@pytest.fixture(scope="module")
def traj_file(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("trajs") / "t.jsonl", raw_lines(DEMO, TASKS))


def _extract(sensor, traj_file, root, shard=(0, 1), layers=(0, 3), input_sha256=None):
    return extract_to_store(sensor, load_trajectories(traj_file), CONDITIONS,
                            ExtractConfig(layers=list(layers), poolings=["last"]), root, shard=shard,
                            boundaries=[1, 2], progress=False, input_sha256=input_sha256)


@pytest.fixture(scope="module")
def shards(tiny_sensor, traj_file, tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("shards")
    out = [root / f"s{i}" for i in range(2)]
    for i, s in enumerate(out):
        _extract(tiny_sensor, traj_file, s, shard=(i, 2))
    return out


def test_units_are_split_by_tokens_and_recorded(tiny_sensor, traj_file, shards):
    trajs = load_trajectories(traj_file)
    from interp.data.conditions import apply_condition

    tokens = {}
    for t in trajs:
        for c in CONDITIONS:
            edited, _ = apply_condition(c, t, 2)
            tokens[unit_name(t.task_id, c)] = render(edited, 2, tiny_sensor.tokenizer).n_tokens
    runs = [json.loads((s / "store.json").read_text())["run"] for s in shards]
    assert [r["shard"] for r in runs] == [{"index": 0, "count": 2}, {"index": 1, "count": 2}]
    assert [sorted(r["units"]) for r in runs] == [sorted(s) for s in balanced_shards(tokens, 2)]
    assert runs[0]["all_units"] == sorted(tokens) and runs[0]["input_sha256"] == runs[1]["input_sha256"]
    loads = [sum(tokens[u] for u in r["units"]) for r in runs]
    assert abs(loads[0] - loads[1]) <= max(tokens.values())
    assert all(any(u.endswith("__full") for u in r["units"]) for r in runs)  # not one condition per shard


def test_merge_of_one_of_two_shards_is_refused_with_what_is_missing(shards, tmp_path):
    missing = json.loads((shards[1] / "store.json").read_text())["run"]["units"]
    with pytest.raises(ValueError, match=r"incomplete set of shards: 3 of 6 units missing \(shards 1/2 not given\)") \
            as info:
        merge_stores(tmp_path / "m", [shards[0]])
    assert all(u in str(info.value) for u in missing)
    assert not (tmp_path / "m").exists()
    frame = merge_stores(tmp_path / "m", [shards[0]], allow_partial=True)
    assert set(frame["unit"]) == set(json.loads((shards[0] / "store.json").read_text())["run"]["units"])


def test_merge_refuses_other_settings_and_other_input(tiny_sensor, traj_file, shards, tmp_path):
    other = tmp_path / "other"
    _extract(tiny_sensor, traj_file, other, shard=(1, 2), layers=(0, 7))
    with pytest.raises(StoreMismatch, match="other settings .*layers"):
        merge_stores(tmp_path / "m", [shards[0], other])
    changed = tmp_path / "changed"
    _extract(tiny_sensor, traj_file, changed, shard=(1, 2), input_sha256="0" * 64)
    with pytest.raises(StoreMismatch, match="another input"):
        merge_stores(tmp_path / "m", [shards[0], changed])
    assert not (tmp_path / "m").exists()


def test_a_store_refuses_another_shard_or_input(tiny_sensor, traj_file, shards):
    with pytest.raises(StoreMismatch, match="other run .*shard"):
        _extract(tiny_sensor, traj_file, shards[0], shard=(1, 2))
    with pytest.raises(StoreMismatch, match="other run .*input_sha256"):
        _extract(tiny_sensor, traj_file, shards[0], shard=(0, 2), input_sha256="0" * 64)
