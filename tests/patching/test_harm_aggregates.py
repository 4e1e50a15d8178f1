"""harm.json aggregates (margin pair-ordering accuracy, MAE, pairwise reconstruction) against plain numpy."""

from __future__ import annotations

import json
from itertools import combinations

import numpy as np
import pytest

from interp.io import atomic_write_json
from patching.harm import summarize_harm

pytestmark = pytest.mark.unit

AGG = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}


def blocks_only(sets: list[dict], steps: bool) -> list[dict]:
    """The sets of DRSR's block kinds, or every set with ``steps``."""
    return [s for s in sets if steps or all(m[0] != "step" for m in s["members"])]


def numpy_aggregates(doc: dict, steps: bool = False) -> dict[tuple[str, str], tuple[float | None, int, float | None, int]]:
    """(aggregator, cardinality) -> (pair accuracy, counted pairs, MAE, sets) from the stored set harms, in numpy
    (sets holding a whole step only with ``steps``)."""
    margin = doc["margin"]
    pooled: dict[tuple[str, str], list[np.ndarray]] = {}
    for record in doc["boundaries"]:
        single = {tuple(s["members"][0]): s["harm"] for s in record["sets"] if len(s["members"]) == 1}
        multi = [s for s in blocks_only(record["sets"], steps) if len(s["members"]) > 1]
        for name in sorted({str(len(s["members"])) for s in multi}) + ["all"]:
            mine = [s for s in multi if name == "all" or len(s["members"]) == int(name)]
            true = np.array([s["harm"] for s in mine])
            for agg, fn in AGG.items():
                pred = np.array([fn([single[tuple(m)] for m in s["members"]]) for s in mine])
                i, j = np.triu_indices(len(mine), 1)
                dt, dp = true[i] - true[j], pred[i] - pred[j]
                keep = (np.abs(dt) >= margin) & (dt != 0)
                score = np.where(dp[keep] == 0, 0.5, (np.sign(dp[keep]) == np.sign(dt[keep])).astype(float))
                entry = pooled.setdefault((agg, name), [np.zeros(0), np.zeros(0)])
                entry[0] = np.concatenate([entry[0], score])
                entry[1] = np.concatenate([entry[1], np.abs(true - pred)])
    return {key: (float(sc.mean()) if sc.size else None, int(sc.size), float(err.mean()) if err.size else None,
                  int(err.size)) for key, (sc, err) in pooled.items()}


def numpy_pairwise_mae(doc: dict, steps: bool = False) -> tuple[float | None, int]:
    errors = []
    for record in doc["boundaries"]:
        sets = blocks_only(record["sets"], steps)
        harm = {frozenset(map(tuple, s["members"])): s["harm"] for s in sets}
        for s in sets:
            members = [tuple(m) for m in s["members"]]
            pairs = [frozenset(p) for p in combinations(members, 2)]
            if len(members) == 3 and all(p in harm for p in pairs):
                singles = np.array([harm[frozenset([m])] for m in members])
                inter = np.array([harm[p] - sum(harm[frozenset([m])] for m in p) for p in pairs])
                errors.append(abs(s["harm"] - singles.sum() - inter.sum()))
    return (float(np.mean(errors)) if errors else None), len(errors)


def synthetic_boundaries(seed: int, quantum: float = 0.01) -> list[dict]:
    """Harms on a 0.01 grid (ties and differences at exactly the margin), units of every kind."""
    rng = np.random.default_rng(seed)
    records = []
    for task in range(3):
        units = [["reasoning", 1, 0], ["reasoning", 1, 1], ["observation", 1, 0], ["tool_exchange", 2, 0],
                 ["step", 3, None]]
        single = {tuple(u): quantum * int(rng.integers(0, 8)) for u in units}
        sets = [{"members": [u], "tokens_removed": 3, "nll": 1 + single[tuple(u)], "harm": single[tuple(u)],
                 "interaction": None} for u in units]
        for k in (2, 3):
            for combo in combinations(units, k):
                if rng.random() < 0.7:
                    h = quantum * int(rng.integers(0, 20))
                    sets.append({"members": list(combo), "tokens_removed": 3 * k, "nll": 1 + h, "harm": h,
                                 "interaction": h - sum(single[tuple(u)] for u in combo)})
        records.append({"task_id": f"t{task}", "after_step": 3, "units": ["reasoning", "observation", "tool_exchange",
                        "step"], "target": "y", "target_tokens": 4, "nll_full": 1.0, "sets": sets})
    return records


def check_against_numpy(doc: dict, steps: bool = False) -> None:
    """Every stored aggregate equals the plain numpy computation on the stored set harms: ``aggregates`` over
    DRSR's block kinds, ``step_sets`` (``steps``) over every set."""
    part = doc["step_sets"] if steps else doc
    expected = numpy_aggregates(doc, steps)
    got = {(r["aggregator"], r["cardinality"]): r for r in part["aggregates"]}
    assert set(got) == set(expected)
    for key, (acc, n_pairs, mae, n_sets) in expected.items():
        row = got[key]
        assert (row["n_pairs"], row["n_sets"]) == (n_pairs, n_sets), key
        assert row["pair_accuracy"] == (None if acc is None else pytest.approx(acc, abs=1e-12)), key
        assert row["mae"] == (None if mae is None else pytest.approx(mae, abs=1e-12)), key
    mae, n = numpy_pairwise_mae(doc, steps)
    if "3" in part["per_cardinality"]:
        assert part["per_cardinality"]["3"]["n_pairwise"] == n
        assert part["per_cardinality"]["3"]["mae_pairwise"] == (None if mae is None else pytest.approx(mae, abs=1e-12))


@pytest.mark.parametrize("margin", [0.0, 0.02, 0.05])
@pytest.mark.parametrize("seed", [0, 1])
def test_stored_aggregates_equal_numpy(tmp_path, seed, margin):
    doc = summarize_harm(synthetic_boundaries(seed), margin=margin, n_boot=1000)
    atomic_write_json(tmp_path / "harm.json", doc)
    stored = json.loads((tmp_path / "harm.json").read_text())
    check_against_numpy(stored)
    check_against_numpy(stored, steps=True)
    n_step = sum(len(s["members"]) > 1 and any(m[0] == "step" for m in s["members"])
                 for r in stored["boundaries"] for s in r["sets"])
    assert n_step and stored["step_sets"]["n_sets"] == n_step
    assert stored["margin"] == margin and stored["cardinalities"] == [1, 2, 3]
    assert stored["units"] == ["reasoning", "observation", "tool_exchange", "step"]
    assert any(r["n_pairs"] for r in stored["aggregates"]) and stored["per_cardinality"]["3"]["n_pairwise"] > 0


def test_margin_excludes_close_pairs_by_hand():
    a, b, c = ["reasoning", 1, 0], ["reasoning", 1, 1], ["observation", 1, 0]
    sets = [{"members": [u], "tokens_removed": 1, "nll": 1.0, "harm": h, "interaction": None}
            for u, h in ((a, 0.01), (b, 0.02), (c, 0.04))]
    # joint harms 0.030, 0.045, 0.100; additive predictions 0.03, 0.05, 0.06 (ab, ac, bc)
    for members, h in (([a, b], 0.03), ([a, c], 0.045), ([b, c], 0.10)):
        sets.append({"members": members, "tokens_removed": 2, "nll": 1.0, "harm": h, "interaction": None})
    doc = summarize_harm([{"task_id": "t", "after_step": 1, "nll_full": 1.0, "sets": sets}], n_boot=1000)  # margin 0.020
    row = {(r["aggregator"], r["cardinality"]): r for r in doc["aggregates"]}
    # pairs: (ab, ac) differ by 0.015 < 0.020: not counted; (ab, bc) 0.07 and (ac, bc) 0.055: counted, both agree
    assert row[("sum", "2")]["n_pairs"] == 2 and row[("sum", "2")]["pair_accuracy"] == 1.0
    # max predicts 0.02, 0.04, 0.04: (ac, bc) tie -> half
    assert row[("max", "2")]["pair_accuracy"] == pytest.approx(0.75)
    assert row[("sum", "2")]["mae"] == pytest.approx((0.0 + 0.005 + 0.04) / 3)
    assert summarize_harm([{"task_id": "t", "after_step": 1, "nll_full": 1.0, "sets": sets}], margin=0.0, n_boot=1000)[
        "aggregates"][0]["n_pairs"] == 3
