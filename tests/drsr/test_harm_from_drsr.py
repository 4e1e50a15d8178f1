"""Set-level harm summarised from a DRSR run's parts (the demo's one set of harm forwards) equals harm run on its
own forwards; harm's pair-ordering accuracy carries a task-bootstrap CI that matches one written out here."""

from __future__ import annotations

import numpy as np
import pytest

from interp.data.deletions import UNIT_KINDS
from interp.data.trajectory import load_trajectories
from interp.pipelines import stages
from patching.config import DrsrConfig, HarmConfig
from patching.harm import default_boundaries, pooled_ratio_ci, summarize_harm

from tests.drsr.test_drsr_cli import DEMO, TINY

pytestmark = pytest.mark.e2e


def test_harm_from_drsr_parts_equals_harm_on_its_own_forwards(tmp_path):
    trajs = sorted(load_trajectories(DEMO), key=lambda t: t.n_steps)
    keys = default_boundaries(trajs)[:3]
    sensor = stages.sensor(TINY)
    doc = stages.drsr(sensor, trajs, tmp_path / "drsr", DrsrConfig(boundaries=keys, max_k=2, budget=1, n_boot=20))
    parts = tmp_path / "drsr" / doc["parts"]  # drsr.json names its parts folder
    assert parts.is_dir() and len(list(parts.glob("*.json"))) == 3
    reused = stages.harm_from_parts(tmp_path / "drsr", tmp_path / "reused", model=sensor.describe())
    own = stages.harm(sensor, trajs, tmp_path / "own", HarmConfig(boundaries=keys, max_k=2, budget=1,
                                                                  units=list(UNIT_KINDS)))
    assert reused["source"] == str(parts) and own["source"] is None
    assert (tmp_path / "reused" / "harm.json").is_file()
    for a, b in zip(reused["boundaries"], own["boundaries"]):
        assert set(a) == set(b)  # representations stripped: the harm record only
        assert [s["members"] for s in a["sets"]] == [s["members"] for s in b["sets"]]
        harm_a, harm_b = np.array([s["harm"] for s in a["sets"]]), np.array([s["harm"] for s in b["sets"]])
        np.testing.assert_allclose(harm_a, harm_b, rtol=0, atol=1e-4 * max(1.0, float(np.abs(harm_b).max())))
    assert [r["pair_accuracy"] for r in reused["aggregates"]] == pytest.approx(
        [r["pair_accuracy"] for r in own["aggregates"]], abs=0.02)


def test_harm_from_parts_names_a_missing_boundary(tmp_path):
    from interp.io import atomic_write_json

    trajs = sorted(load_trajectories(DEMO), key=lambda t: t.n_steps)
    key = default_boundaries(trajs)[0]
    task_id, _, b = key.rpartition("@")
    (tmp_path / "drsr" / "parts" / "p").mkdir(parents=True)
    atomic_write_json(tmp_path / "drsr" / "drsr.json", {"boundaries": [{"task_id": task_id, "after_step": int(b)}],
                                                       "parts": "parts/p"})
    with pytest.raises(FileNotFoundError, match=f"no part for boundary {key}"):
        stages.harm_from_parts(tmp_path / "drsr", tmp_path / "out")
    assert not (tmp_path / "out" / "harm.json").exists()


def _bootstrap_by_hand(per_task, n_boot, seed):
    """The pooled ratio over tasks drawn with replacement, written out with the same generator calls."""
    scores = np.array([v[0] for v in per_task.values()])
    counts = np.array([v[1] for v in per_task.values()])
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(n_boot):
        pick = rng.integers(len(scores), size=len(scores))
        draws.append(scores[pick].sum() / counts[pick].sum())
    return np.percentile(draws, [2.5, 97.5])


def test_pooled_ratio_ci_matches_a_hand_bootstrap_and_needs_three_tasks():
    per_task = {"a": [3.0, 4], "b": [1.0, 4], "c": [5.5, 6], "d": [0.5, 2]}
    np.testing.assert_allclose(pooled_ratio_ci(per_task, 400, 3), _bootstrap_by_hand(per_task, 400, 3))
    lo, hi = pooled_ratio_ci(per_task, 400, 3)
    assert lo < sum(v[0] for v in per_task.values()) / sum(v[1] for v in per_task.values()) < hi
    assert pooled_ratio_ci({"a": [1.0, 2], "b": [1.0, 2], "c": [0.0, 0]}, 1000) is None  # two counted tasks
    assert pooled_ratio_ci(per_task, 0) is None  # no draws, no interval (it used to fail on an empty percentile)


def test_harm_aggregates_have_a_ci_that_narrows_with_more_tasks():
    def records(n_tasks):
        rng = np.random.default_rng(0)
        out = []
        for t in range(n_tasks):
            single = rng.uniform(0, 0.3, 4)
            sets = [{"members": [["reasoning", i + 1, 0]], "tokens_removed": 5, "nll": 1 + h, "harm": float(h),
                     "interaction": None} for i, h in enumerate(single)]
            for i, j in ((0, 1), (1, 2), (2, 3), (0, 3)):
                joint = float(single[i] + single[j] + rng.normal(0, 0.15))
                sets.append({"members": [["reasoning", i + 1, 0], ["reasoning", j + 1, 0]], "tokens_removed": 10,
                             "nll": 1 + joint, "harm": joint, "interaction": joint - single[i] - single[j]})
            out.append({"task_id": f"t{t}", "after_step": 4, "units": ["reasoning"], "target": "y",
                        "target_tokens": 3, "nll_full": 1.0, "sets": sets})
        return out

    few, many = summarize_harm(records(4), n_boot=1000), summarize_harm(records(40), n_boot=1000)
    row = lambda doc: next(r for r in doc["aggregates"] if r["aggregator"] == "sum" and r["cardinality"] == "2")
    assert row(few)["n_tasks"] == 4 and row(many)["n_tasks"] == 40
    (lo1, hi1), (lo2, hi2) = row(few)["ci"], row(many)["ci"]
    assert lo1 <= row(few)["pair_accuracy"] <= hi1 and lo2 <= row(many)["pair_accuracy"] <= hi2
    assert 0 < hi2 - lo2 < hi1 - lo1
    assert summarize_harm(records(2), n_boot=1000)["aggregates"][0]["ci"] is None
