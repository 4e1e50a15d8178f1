"""Set-level deletion harm: exact zero for the empty set, prefix reuse equals recomputation."""

from __future__ import annotations

import pytest

from patching.harm import SetHarm, candidate_sets, pair_ordering_accuracy, set_harms

pytestmark = pytest.mark.parity


def test_empty_set_is_zero_and_prefix_reuse_equals_recomputation(tiny_sensor, mini_trajectory):
    sets = [()] + candidate_sets(mini_trajectory, 3, max_k=3, budget=2, seed=0)
    nll, shared = set_harms(tiny_sensor, mini_trajectory, 3, sets)
    nll2, scratch = set_harms(tiny_sensor, mini_trajectory, 3, sets, share_prefix=False)
    assert shared[0].members == () and shared[0].harm == 0.0
    assert nll == pytest.approx(nll2, abs=1e-4)
    for a, b in zip(shared, scratch, strict=True):
        assert a.members == b.members
        assert a.harm == pytest.approx(b.harm, abs=1e-4)
        assert a.tokens_removed == b.tokens_removed > 0 or a.members == ()


def test_interaction_is_joint_minus_singletons(tiny_sensor, mini_trajectory):
    sets = candidate_sets(mini_trajectory, 2, max_k=2, budget=3, seed=1)
    _, rows = set_harms(tiny_sensor, mini_trajectory, 2, sets)
    single = {r.members[0]: r.harm for r in rows if len(r.members) == 1}
    n_blocks = sum(len(mini_trajectory.steps[t].blocks) for t in range(2))
    assert len(single) == n_blocks
    for r in rows:
        if len(r.members) == 2:
            assert r.interaction == pytest.approx(r.harm - sum(single[m] for m in r.members), abs=1e-12)


def test_last_boundary_has_no_next_output(tiny_sensor, mini_trajectory):
    with pytest.raises(ValueError, match="recorded next step"):
        set_harms(tiny_sensor, mini_trajectory, mini_trajectory.n_steps, [])


def test_pair_ordering_accuracy_by_hand():
    single = {(1, 0): 1.0, (1, 1): 2.0, (2, 0): 0.5}
    sets = [SetHarm(((1, 0), (1, 1)), 0, 0.0, 3.5), SetHarm(((1, 0), (2, 0)), 0, 0.0, 1.0),
            SetHarm(((1, 1), (2, 0)), 0, 0.0, 4.0)]
    # additive predictions 3.0, 1.5, 2.5; true 3.5, 1.0, 4.0 -> pairs (0,1) agree, (0,2) disagree, (1,2) agree
    assert pair_ordering_accuracy(sets, single) == pytest.approx(2 / 3)


def test_boundary_harm_record_matches_set_harms(tiny_sensor, mini_trajectory):
    from patching.harm import boundary_harm

    record = boundary_harm(tiny_sensor, mini_trajectory, 2, max_k=2, budget=1, seed=0)
    nll, rows = set_harms(tiny_sensor, mini_trajectory, 2, candidate_sets(mini_trajectory, 2, 2, 1, 0))
    assert record["nll_full"] == pytest.approx(nll, abs=1e-9)
    assert [tuple(map(tuple, s["members"])) for s in record["sets"]] == [r.members for r in rows]
    assert [s["harm"] for s in record["sets"]] == pytest.approx([r.harm for r in rows], abs=1e-9)


def test_default_boundaries_is_the_middle_boundary_of_trajectories_with_a_next_step():
    from types import SimpleNamespace

    from patching.harm import default_boundaries

    trajs = [SimpleNamespace(task_id="a", n_steps=1), SimpleNamespace(task_id="b", n_steps=2),
             SimpleNamespace(task_id="c", n_steps=7)]
    assert default_boundaries(trajs) == ["b@1", "c@3"]


def test_summarize_harm_writes_its_declared_fields(tmp_path):
    import json

    from interp.io import atomic_write_json
    from interp.schema import check, schema_dict
    from patching.harm import FIELDS, summarize_harm

    sets = [{"members": [[1, 0]], "tokens_removed": 5, "nll": 1.1, "harm": 0.1, "interaction": None},
            {"members": [[1, 1]], "tokens_removed": 5, "nll": 1.2, "harm": 0.2, "interaction": None},
            {"members": [[1, 0], [1, 1]], "tokens_removed": 10, "nll": 1.25, "harm": 0.25, "interaction": -0.05}]
    doc = summarize_harm([{"task_id": "t", "after_step": 1, "nll_full": 1.0, "sets": sets}], model={"spec": "toy"})
    assert doc["per_cardinality"]["2"]["mean_interaction"] == pytest.approx(-0.05) and doc["model"] == {"spec": "toy"}
    assert doc["schema"] == schema_dict(FIELDS) and list(doc) == [f.name for f in FIELDS]
    atomic_write_json(tmp_path / "harm.json", doc)
    check(json.loads((tmp_path / "harm.json").read_text()), FIELDS, "harm.json")
    assert summarize_harm([])["model"] is None
