"""DRSR appendix analyses on synthetic harm tables with known truth: planted relations, hand-computed granularity
and interaction structure."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from patching.drsr import FIELDS, summarize_drsr
from patching.granularity import granularity
from patching.interaction import attention_density, set_structure
from patching.relations import relations_by_layer

pytestmark = pytest.mark.unit


def _records(planted: bool, n_tasks: int = 40, dim: int = 8, seed: int = 0) -> list[dict]:
    """One boundary per task, 8 reasoning candidates, layers 0 and 1; harm of a set = 0.05 * sum over members of
    rep . state at layer 1 when ``planted`` (a decision-conditioned relation), else noise of the same scale."""
    rng = np.random.default_rng(seed)
    units = [["reasoning", t, k] for t in range(1, 5) for k in range(2)]
    records = []
    for i in range(n_tasks):
        reps = rng.standard_normal((len(units), 2, dim))
        state = rng.standard_normal((2, dim))
        value = 0.05 * reps[:, 1] @ state[1] if planted else rng.normal(0, 0.05 * np.sqrt(dim), len(units))
        sets = [{"members": [units[j]], "harm": float(value[j]), "interaction": None} for j in range(len(units))]
        for a, b in itertools.combinations(range(len(units)), 2):
            noise = 0.0 if planted else rng.normal(0, 0.2)
            harm = float(value[a] + value[b] + noise)
            sets.append({"members": [units[a], units[b]], "harm": harm,
                         "interaction": harm - float(value[a] + value[b])})
        records.append({"task_id": f"t{i:02d}", "after_step": 4, "layers": [0, 1], "attention_layers": [1],
                        "target_tokens": 5, "nll_full": 1.0, "state": state.tolist(), "sets": sets,
                        "candidates": [{"unit": u, "n_tokens": 10, "rep": reps[j].tolist(),
                                        "attention": [[0.1, 0.01]]} for j, u in enumerate(units)]})
    return records


def _acc(result: dict, family: str, layer: int | None) -> float:
    return next(r["pair_accuracy"] for r in result["families"][family] if r["layer"] == layer)


def test_a_planted_relation_orders_the_sets_and_the_mismatched_state_does_not():
    result = relations_by_layer(_records(planted=True), margin=0.02, relation_layer=1, n_boot=100)
    assert _acc(result, "relation", 1) > 0.85
    assert abs(_acc(result, "mismatched", 1) - 0.5) < 0.08
    assert abs(_acc(result, "block", 1) - 0.5) < 0.08
    assert abs(_acc(result, "relation", 0) - 0.5) < 0.08  # the relation is planted at layer 1 only
    assert _acc(result, "state", 1) == 0.5  # constant within a boundary: every counted pair ties
    assert abs(_acc(result, "surface", None) - 0.5) < 0.08
    row = next(r for r in result["families"]["relation"] if r["layer"] == 1)
    assert row["ci"][0] > 0.75 and row["n_pairs"] > 1000
    curve = result["margin_curve"]
    assert curve["layer"] == 1 and len(curve["margins"]) == len(curve["accuracy"]["relation"]) == 11
    assert curve["accuracy"]["sum"][0] == 1.0  # planted harm is exactly additive: the sum aggregator orders every pair


def test_without_the_relation_every_family_is_at_chance():
    result = relations_by_layer(_records(planted=False), margin=0.02, relation_layer=1, n_boot=100)
    for family in ("relation", "mismatched", "block"):
        for layer in (0, 1):
            assert abs(_acc(result, family, layer) - 0.5) < 0.08, (family, layer)


def _single(kind: str, t: int, k: int | None, harm: float) -> dict:
    return {"members": [[kind, t, k]], "harm": harm, "interaction": None}


def test_granularity_by_hand():
    a = {"task_id": "a", "after_step": 2, "sets": [
        _single("step", 1, None, 0.10), _single("reasoning", 1, 0, 0.01), _single("observation", 1, 0, 0.05),
        _single("step", 2, None, 0.03), _single("reasoning", 2, 0, 0.04), _single("tool_exchange", 2, 0, 0.025)]}
    b = {"task_id": "b", "after_step": 1, "sets": [_single("step", 1, None, 0.0), _single("reasoning", 1, 0, 0.5)]}
    c = {"task_id": "c", "after_step": 3, "sets": [
        _single("step", 1, None, 0.2), _single("step", 2, None, 0.01), _single("step", 3, None, 0.05),
        _single("reasoning", 1, 0, 0.3), _single("reasoning", 3, 0, 0.0)]}
    g = granularity([a, b, c], unsafe=0.02, n_boot=50)
    # step ranges: a 0.10 - 0.03, c 0.2 - 0.01 (b has one step); block ranges: a 0.05 - 0.01, c 0.3 - 0.0
    assert g["step_range"]["median"] == pytest.approx((0.07 + 0.19) / 2) and g["step_range"]["n_states"] == 2
    assert g["block_range"]["median"] == pytest.approx((0.04 + 0.30) / 2) and g["block_range"]["n_states"] == 2
    assert g["step_range"]["ci"] is None  # two tasks: no bootstrap CI
    # unsafe parents with a block: a1 (safe child 0.01), a2 (children 0.04, 0.025: none safe), c1 (0.3), c3 (0.0)
    assert (g["n_unsafe_parents"], g["n_unsafe_parents_with_safe_child"]) == (4, 2)
    assert g["unsafe_parent_safe_child_fraction"] == 0.5
    steps = {(s["task_id"], s["step"]): s for s in g["steps"]}
    assert steps[("a", 1)]["position"] == 0.5 and steps[("a", 1)]["min_child_harm"] == 0.01
    assert steps[("c", 2)]["n_children"] == 0 and steps[("c", 2)]["safe_child"] is None
    assert not steps[("b", 1)]["unsafe"]


def test_interaction_structure_and_attention_density_by_hand():
    u, v, w = ["reasoning", 1, 0], ["observation", 3, 0], ["reasoning", 2, 1]
    rec = {"task_id": "t", "after_step": 3, "attention_layers": [3, 7], "sets": [
        {"members": [u], "harm": 0.01, "interaction": None}, {"members": [v], "harm": 0.05, "interaction": None},
        {"members": [w], "harm": 0.0, "interaction": None},
        {"members": [u, v], "harm": 0.1, "interaction": 0.04}, {"members": [u, v, w], "harm": 0.2, "interaction": 0.14}],
        "candidates": [
            {"unit": u, "n_tokens": 4, "rep": [[1.0, 0.0]], "attention": [[0.2, 0.01], [0.1, 0.3]]},
            {"unit": v, "n_tokens": 2, "rep": [[1.0, 1.0]], "attention": [[0.06, 0.2], [0.0, 0.4]]},
            {"unit": w, "n_tokens": 1, "rep": [[0.0, 1.0]], "attention": [[0.0, 0.0], [0.0, 0.0]]}]}
    rows = set_structure(rec, 0, head_threshold=0.05)
    pair, triple = rows
    assert pair["composition"] == "reasoning+observation" and pair["span"] == 2 and pair["size"] == 2
    assert pair["semantic"] == pytest.approx(1 / np.sqrt(2))
    assert pair["heads"] == 2  # heads (layer 3, head 0) and (layer 7, head 1) attend to both above 0.05
    assert triple["semantic"] == pytest.approx((1 / np.sqrt(2) + 0 + 1 / np.sqrt(2)) / 3)
    assert triple["heads"] == pytest.approx(2 / 3) and triple["span"] == 2
    dens = attention_density([rec], unsafe=0.02)
    by = {tuple(r["unit"]): r for r in dens["candidates"]}
    assert by[tuple(u)]["density"] == pytest.approx([(0.2 + 0.01) / 2 / 4, (0.1 + 0.3) / 2 / 4])
    assert by[tuple(u)]["selected"] and not by[tuple(v)]["selected"]
    assert dens["layers"][0]["selected"]["n"] == 2 and dens["layers"][0]["retained"]["mean"] == pytest.approx(0.13 / 2)


def test_summary_writes_its_declared_fields(tmp_path):
    import json

    from interp.io import atomic_write_json
    from interp.record import RECORD_FIELDS, record
    from interp.schema import check
    from patching.config import DrsrConfig

    doc = summarize_drsr(_records(planted=True, n_tasks=6), model={"d_model": 8}, relation_layer=1, n_boot=20)
    # the summary is every field but the record of the run, which the stage adds (interp.record)
    assert list(doc) == [f.name for f in FIELDS if f not in RECORD_FIELDS] and doc["proj_dim"] is None
    assert doc["relation_layer"] == 1
    doc = {**doc, **record(DrsrConfig(relation_layer=1, n_boot=20), model={"d_model": 8})}
    atomic_write_json(tmp_path / "drsr.json", doc)
    check(json.loads((tmp_path / "drsr.json").read_text()), FIELDS, "drsr.json")
    with pytest.raises(ValueError, match="relation layer 5"):
        summarize_drsr(_records(planted=True, n_tasks=3), relation_layer=5, n_boot=10)
