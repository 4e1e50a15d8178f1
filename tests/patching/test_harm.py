"""Set-level deletion harm: exact zero for the empty set, prefix reuse equals recomputation, NLL by hand."""

from __future__ import annotations

import itertools

import pytest

from interp.data.deletions import UNIT_KINDS
from patching.harm import SetHarm, candidate_sets, pair_ordering_accuracy, set_harms

pytestmark = pytest.mark.parity


@pytest.mark.parametrize("units", [("reasoning",), UNIT_KINDS, ("tool_exchange", "observation"), ("step",)])
def test_empty_set_is_zero_and_prefix_reuse_equals_recomputation(tiny_sensor, mini_trajectory, units):
    sets = [()] + candidate_sets(mini_trajectory, 3, max_k=3, budget=2, seed=0, units=units)
    assert {m[0] for s in sets for m in s} == set(units)
    nll, shared = set_harms(tiny_sensor, mini_trajectory, 3, sets)
    nll2, scratch = set_harms(tiny_sensor, mini_trajectory, 3, sets, share_prefix=False)
    assert shared[0].members == () and shared[0].harm == 0.0
    assert nll == pytest.approx(nll2, abs=1e-4)
    for a, b in zip(shared, scratch, strict=True):
        assert a.members == b.members
        assert a.harm == pytest.approx(b.harm, abs=1e-4)
        assert a.tokens_removed == b.tokens_removed > 0 or a.members == ()


def test_interaction_is_joint_minus_singletons(tiny_sensor, mini_trajectory):
    sets = candidate_sets(mini_trajectory, 2, max_k=2, budget=3, seed=1, units=("reasoning",))
    _, rows = set_harms(tiny_sensor, mini_trajectory, 2, sets)
    single = {r.members[0]: r.harm for r in rows if len(r.members) == 1}
    assert all(m[0] == "reasoning" for m in single)
    n_blocks = sum(len(mini_trajectory.steps[t].blocks) for t in range(2))
    assert len(single) == n_blocks
    for r in rows:
        if len(r.members) == 2:
            assert r.interaction == pytest.approx(r.harm - sum(single[m] for m in r.members), abs=1e-12)


def test_last_boundary_has_no_next_output(tiny_sensor, mini_trajectory):
    with pytest.raises(ValueError, match="recorded next step"):
        set_harms(tiny_sensor, mini_trajectory, mini_trajectory.n_steps, [])


def test_pair_ordering_accuracy_by_hand():
    a, b, c = ("reasoning", 1, 0), ("reasoning", 1, 1), ("tool_exchange", 2, 0)
    single = {a: 1.0, b: 2.0, c: 0.5}
    sets = [SetHarm((a, b), 0, 0.0, 3.5), SetHarm((a, c), 0, 0.0, 1.0), SetHarm((b, c), 0, 0.0, 4.0)]
    # additive predictions 3.0, 1.5, 2.5; true 3.5, 1.0, 4.0 -> pairs (0,1) agree, (0,2) disagree, (1,2) agree
    assert pair_ordering_accuracy(sets, single) == (2.0, 3)
    # margin 0.6: the pair (0,2) (true harms 3.5 vs 4.0) is not counted
    assert pair_ordering_accuracy(sets, single, margin=0.6) == (2.0, 2)
    # max: predictions 2.0, 1.0, 2.0 -> (0,1) agree, (0,2) tie (half), (1,2) agree
    assert pair_ordering_accuracy(sets, single, "max") == (2.5, 3)


def test_nll_of_a_tool_exchange_deletion_by_hand(tiny_sensor, mini_trajectory):
    """A plain HF forward of the deleted render, log_softmax at y's tokens, equals the tool's NLL."""
    import torch

    from interp.data.deletions import delete_units
    from interp.data.render import render

    traj, b, unit = mini_trajectory, 2, ("tool_exchange", 1, 0)
    nll_full, (row,) = set_harms(tiny_sensor, traj, b, [(unit,)])
    tok = tiny_sensor.tokenizer
    by_hand = {}
    for name, (edited, b2, _) in {"full": (traj, b, None), "deleted": delete_units(traj, b, [unit])}.items():
        prompt, nxt = render(edited, b2, tok), render(edited, b2 + 1, tok)
        y0, y1 = prompt.n_tokens, max(s.end for s in nxt.spans("action", step=b2 + 1))
        with torch.no_grad():
            logits = tiny_sensor.hf_model(input_ids=torch.tensor([nxt.input_ids[:y1]])).logits[0].double()
        logp = torch.log_softmax(logits, -1)
        by_hand[name] = -sum(logp[p - 1, nxt.input_ids[p]].item() for p in range(y0, y1)) / (y1 - y0)
        if name == "deleted":  # step 1's call and its result are gone, its reasoning stays
            assert b2 == b and not nxt.spans("action", step=1) and not nxt.spans("observation", step=1)
            assert len(nxt.spans("reasoning_block", step=1)) == len(traj.steps[0].blocks)
            assert nxt.spans("action", step=2) and nxt.spans("observation", step=2)
    assert nll_full == pytest.approx(by_hand["full"], abs=1e-4)
    assert row.nll == pytest.approx(by_hand["deleted"], abs=1e-4)
    assert row.harm == pytest.approx(by_hand["deleted"] - by_hand["full"], abs=2e-4)
    assert row.harm != 0.0 and row.tokens_removed > 0


def test_boundary_harm_record_matches_set_harms(tiny_sensor, mini_trajectory):
    from patching.harm import boundary_harm

    record = boundary_harm(tiny_sensor, mini_trajectory, 2, max_k=2, budget=1, seed=0, units=("reasoning",))
    nll, rows = set_harms(tiny_sensor, mini_trajectory, 2, candidate_sets(mini_trajectory, 2, 2, 1, 0, ("reasoning",)))
    assert record["nll_full"] == pytest.approx(nll, abs=1e-9)
    assert [tuple(map(tuple, s["members"])) for s in record["sets"]] == [r.members for r in rows]
    assert [s["harm"] for s in record["sets"]] == pytest.approx([r.harm for r in rows], abs=1e-9)
    assert record["units"] == ["reasoning"] and record["target_tokens"] > 0
    assert record["target"] and record["target"] in mini_trajectory_render(tiny_sensor, mini_trajectory, 3)
    full_ids = tiny_sensor.tokenizer(record["target"], add_special_tokens=False)["input_ids"]
    assert abs(len(full_ids) - record["target_tokens"]) <= 2  # the target's own tokenization, up to edge merges


def mini_trajectory_render(sensor, traj, b):
    from interp.data.render import render

    return render(traj, b, sensor.tokenizer).text


def test_default_boundaries_is_the_middle_boundary_of_trajectories_with_a_next_step():
    from types import SimpleNamespace

    from patching.harm import default_boundaries

    trajs = [SimpleNamespace(task_id="a", n_steps=1), SimpleNamespace(task_id="b", n_steps=2),
             SimpleNamespace(task_id="c", n_steps=7)]
    assert default_boundaries(trajs) == ["b@1", "c@3"]


def test_summarize_harm_writes_its_declared_fields(tmp_path):
    import json

    from interp.io import atomic_write_json
    from interp.record import RECORD_FIELDS, record
    from interp.schema import check, schema_dict
    from patching.config import HarmConfig
    from patching.harm import FIELDS, summarize_harm

    a, b = ["reasoning", 1, 0], ["step", 1, None]
    sets = [{"members": [a], "tokens_removed": 5, "nll": 1.1, "harm": 0.1, "interaction": None},
            {"members": [b], "tokens_removed": 5, "nll": 1.2, "harm": 0.2, "interaction": None},
            {"members": [a, b], "tokens_removed": 10, "nll": 1.25, "harm": 0.25, "interaction": -0.05}]
    doc = summarize_harm([{"task_id": "t", "after_step": 1, "units": ["reasoning", "step"], "target": "y",
                           "target_tokens": 1, "nll_full": 1.0, "sets": sets}], model={"spec": "toy"}, n_boot=1000)
    # the pair holds a whole step: reported apart (step_sets), never in the rows compared with DRSR
    assert "2" not in doc["per_cardinality"] and doc["model"] == {"spec": "toy"}
    assert doc["step_sets"]["per_cardinality"]["2"]["mean_interaction"] == pytest.approx(-0.05)
    assert doc["units"] == ["reasoning", "step"] and doc["cardinalities"] == [1, 2] and doc["margin"] == 0.02
    assert {(r["aggregator"], r["cardinality"]) for r in doc["step_sets"]["aggregates"]} == {
        (g, k) for g in ("sum", "mean", "max", "min") for k in ("2", "all")}
    row = next(r for r in doc["step_sets"]["aggregates"] if (r["aggregator"], r["cardinality"]) == ("max", "2"))
    assert row["mae"] == pytest.approx(0.05) and row["n_sets"] == 1 and row["pair_accuracy"] is None
    # every field but the record of the run, which the stage adds (interp.record)
    assert doc["schema"] == schema_dict(FIELDS) and list(doc) == [f.name for f in FIELDS if f not in RECORD_FIELDS]
    doc = {**doc, **record(HarmConfig(), model=doc["model"])}
    atomic_write_json(tmp_path / "harm.json", doc)
    check(json.loads((tmp_path / "harm.json").read_text()), FIELDS, "harm.json")
    assert summarize_harm([], n_boot=1000)["model"] is None


def test_every_unit_kind_on_the_tiny_model_and_aggregates_equal_numpy(tiny_sensor, mini_trajectory):
    from patching.harm import boundary_harm, summarize_harm

    from .test_harm_aggregates import check_against_numpy

    record = boundary_harm(tiny_sensor, mini_trajectory, 3, max_k=3, budget=3, seed=0, units=UNIT_KINDS)
    kinds = {m[0] for s in record["sets"] for m in s["members"]}
    assert kinds == set(UNIT_KINDS)
    singles = [s for s in record["sets"] if len(s["members"]) == 1]
    assert all(s["tokens_removed"] > 0 for s in singles)
    triples = [s for s in record["sets"] if len(s["members"]) == 3]
    pairs = {frozenset(map(tuple, s["members"])) for s in record["sets"] if len(s["members"]) == 2}
    assert triples and all({frozenset(p) for p in itertools.combinations(map(tuple, s["members"]), 2)} <= pairs
                           for s in triples)
    doc = summarize_harm([record], margin=0.0, n_boot=1000)
    check_against_numpy(doc)
    assert doc["per_cardinality"]["3"]["n_pairwise"] == len(triples)


def test_the_default_units_and_sizes_are_drsrs(mini_trajectory):
    """By default the candidates are DRSR's: reasoning, observation and tool-exchange units, sets up to 4."""
    sets = candidate_sets(mini_trajectory, 3, budget=2, seed=0)
    kinds = {m[0] for s in sets for m in s}
    assert kinds == {"reasoning", "observation", "tool_exchange"}
    assert max(len(s) for s in sets) == 4
    # the same as naming them (hand-listed, not read from the module)
    assert sets == candidate_sets(mini_trajectory, 3, 4, 2, 0, ("reasoning", "observation", "tool_exchange"))
