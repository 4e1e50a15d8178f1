"""Shards: the one assignment rule (tokens, longest first, least-loaded shard), sharded ``run_units`` folders,
their merge (refusing incomplete or mismatched sets), and failed units recorded after their retries.

References: hand-worked assignments, and the balance bound of the greedy rule (after longest-first
greedy assignment, two shards' loads differ by at most the largest unit's cost).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from interp.io import UnitRun, Work, balanced_shards, merge_unit_dirs, run_units, safe_stem, shard_keys

pytestmark = pytest.mark.unit


def test_longest_first_to_the_least_loaded_shard_by_hand():
    costs = {"a": 2, "b": 7, "c": 5, "d": 4, "e": 3}
    # b(7)->0; c(5)->1; d(4)->1 (5<7); e(3)->0 (7<9); a(2)->1 (9<10); each shard keeps input order
    assert balanced_shards(costs, 2) == [["b", "e"], ["a", "c", "d"]]
    assert shard_keys(costs, (1, 2)) == ["a", "c", "d"]
    assert shard_keys(costs, (0, 1)) == list(costs)


def test_alternating_conditions_do_not_all_land_on_one_shard():
    """The round-robin failure: units alternate full (long) / deleted (short); by index all long ones went to shard 0."""
    costs = {f"t{i}__{c}": (1000 + 37 * i if c == "full" else 300 + 11 * i)
             for i in range(10) for c in ("full", "delete_all_reasoning")}
    round_robin = [sum(v for k, v in enumerate(costs.values()) if k % 2 == j) for j in range(2)]
    shards = balanced_shards(costs, 2)
    loads = [sum(costs[k] for k in s) for s in shards]
    assert round_robin[0] - round_robin[1] > 5000  # what the old split did
    assert abs(loads[0] - loads[1]) <= max(costs.values())
    assert all(any(k.endswith("__full") for k in s) for s in shards)


@pytest.mark.parametrize("seed", range(5))
def test_partition_and_balance_bound(seed):
    rng = random.Random(seed)
    costs = {f"u{i}": rng.randint(1, 50_000) for i in range(rng.randint(5, 60))}
    n = rng.randint(2, 6)
    shards = balanced_shards(costs, n)
    assert sorted(k for s in shards for k in s) == sorted(costs)  # every key exactly once
    order = list(costs)
    assert all(s == sorted(s, key=order.index) for s in shards)
    loads = [sum(costs[k] for k in s) for s in shards]
    assert max(loads) - min(loads) <= max(costs.values())


def _shard_runs(tmp_path: Path, n: int, record: dict | None = None) -> list[Path]:
    keys = [f"k{i}" for i in range(7)]
    costs = {k: 10 * (i + 1) for i, k in enumerate(keys)}
    outs = []
    for i in range(n):
        out = tmp_path / f"s{i}"
        got = run_units(keys, lambda k: {"v": k.upper()}, out, "demo", progress=False, shard=(i, n), costs=costs,
                        record=record or {"settings": "x"})
        assert list(got) == shard_keys(costs, (i, n))
        outs.append(out)
    return outs


def test_sharded_run_units_record_and_merge(tmp_path):
    outs = _shard_runs(tmp_path, 3)
    run = json.loads((outs[1] / "run.json").read_text())
    assert run["shard"] == {"index": 1, "count": 3} and run["all_units"] == [f"k{i}" for i in range(7)]
    missing = merge_unit_dirs(tmp_path / "all", outs)
    assert missing == []
    merged = run_units([f"k{i}" for i in range(7)], lambda k: pytest.fail("recomputed"), tmp_path / "all", "demo",
                       progress=False)
    assert merged == {f"k{i}": {"v": f"K{i}"} for i in range(7)}


def test_merge_refuses_an_incomplete_set_and_lists_what_is_missing(tmp_path):
    outs = _shard_runs(tmp_path, 3)
    with pytest.raises(ValueError, match=r"incomplete set of shards: .* \(shards 2/3 not given\)") as info:
        merge_unit_dirs(tmp_path / "all", outs[:2])
    lost = json.loads((outs[2] / "run.json").read_text())["units"]
    assert lost and all(k in str(info.value) for k in lost)
    assert not (tmp_path / "all").exists()
    assert merge_unit_dirs(tmp_path / "all", outs[:2], allow_partial=True) == lost


def test_merge_refuses_shards_of_other_settings(tmp_path):
    a = _shard_runs(tmp_path / "a", 2, {"settings": "x"})
    b = _shard_runs(tmp_path / "b", 2, {"settings": "y"})
    with pytest.raises(ValueError, match="record differs"):
        merge_unit_dirs(tmp_path / "all", [a[0], b[1]])


def test_a_folder_of_another_shard_is_refused(tmp_path):
    _shard_runs(tmp_path, 2)
    with pytest.raises(ValueError, match="written by another run"):
        run_units(["k0"], lambda k: {}, tmp_path / "s0", "demo", progress=False, shard=(1, 2))


class _FailingExecutor:
    """An executor whose unit ``bad`` failed after its retries (what the Ray executor reports)."""

    def run(self, work: Work, progress: bool = True) -> dict[str, UnitRun]:
        records = {}
        for key in work.keys:
            if key == "bad":
                records[key] = UnitRun(key, attempts=3, error="RayActorError: the actor died\nworker killed")
            else:
                work.compute(None, key)
                records[key] = UnitRun(key)
        return records


def test_failed_units_are_recorded_and_raised(tmp_path):
    with pytest.raises(RuntimeError, match="1 unit\\(s\\) failed .* bad: worker killed"):
        run_units(["ok", "bad"], lambda k: {"k": k}, tmp_path, "demo", progress=False, executor=_FailingExecutor())
    failed = json.loads((tmp_path / "failed.json").read_text())
    assert failed == {"bad": {"error": "RayActorError: the actor died\nworker killed", "attempts": 3}}
    assert (tmp_path / f"{safe_stem('ok')}.json").exists() and not (tmp_path / f"{safe_stem('bad')}.json").exists()
    run_units(["ok"], lambda k: {"k": k}, tmp_path, "demo", progress=False)  # a clean run clears it
    assert not (tmp_path / "failed.json").exists()
