"""The departures from DRSR, on planted records with known truth: sets holding a whole step stay out of the rows
compared with DRSR (reported apart), and the attention density (Fig 10) is split by the gate's selection when a
scorer is given, by exact harm (labelled the toolkit's) otherwise."""

from __future__ import annotations

import numpy as np
import pytest

from interp.io import atomic_write_json
from interp.record import record
from interp.reporting.drsr import drsr_section
from interp.reporting.figures import load_result
from interp.reporting.figures.drsr import attention_density_figure
from interp.reporting.figures.harm import additivity_test, harm_figure
from patching.config import DrsrConfig, GateConfig, HarmConfig
from patching.drsr import gate_selection, summarize_drsr
from patching.gate import FeatureSpec, GateModel, GateSetting
from patching.harm import summarize_harm
from patching.interaction import attention_density

pytestmark = pytest.mark.unit

A, B, C, S = ["reasoning", 1, 0], ["reasoning", 1, 1], ["observation", 1, 0], ["step", 2, None]


def _set(members: list[list], harm: float, single: dict[str, float] | None = None) -> dict:
    inter = None if single is None else harm - sum(single[str(m)] for m in members)
    return {"members": members, "tokens_removed": 3, "nll": 1.0 + harm, "harm": harm, "interaction": inter}


def planted_boundary(task: str) -> dict:
    """Singletons a 0.02, b 0.08, c 0.18, step 0.00; block pairs exactly additive (ab 0.10, ac 0.20, bc 0.26: sum
    orders all 3 pairs), step pairs against the sum (aS 0.50 predicted 0.02, bS 0.05 predicted 0.08)."""
    single = {str(A): 0.02, str(B): 0.08, str(C): 0.18, str(S): 0.0}
    sets = [_set([u], single[str(u)]) for u in (A, B, C, S)]
    sets += [_set(m, h, single) for m, h in (([A, B], 0.10), ([A, C], 0.20), ([B, C], 0.26), ([A, S], 0.50),
                                              ([B, S], 0.05))]
    return {"task_id": task, "after_step": 2, "units": ["reasoning", "observation", "step"], "target": "y",
            "target_tokens": 4, "nll_full": 1.0, "sets": sets}


def test_step_sets_stay_out_of_the_rows_compared_with_drsr(tmp_path):
    doc = {**summarize_harm([planted_boundary(f"t{i}") for i in range(3)], n_boot=50),
           **record(HarmConfig())}  # as the stage writes it
    atomic_write_json(tmp_path / "harm" / "harm.json", doc)
    assert load_result(tmp_path / "harm" / "harm.json")["step_sets"] == doc["step_sets"]  # its declared schema
    row = {(r["aggregator"], r["cardinality"]): r for r in doc["aggregates"]}
    # by hand: the 3 block pairs differ by >= 0.06 and the sum orders each; per boundary 3 pairs, 3 boundaries
    assert row[("sum", "all")]["pair_accuracy"] == 1.0 and row[("sum", "all")]["n_pairs"] == 9
    assert row[("sum", "2")]["n_sets"] == 9
    assert doc["per_cardinality"]["2"]["mean_interaction"] == pytest.approx(0.0, abs=1e-12)
    # with the step sets: 10 pairs per boundary; aS is misordered against all 4 others, the other 6 are ordered
    apart = doc["step_sets"]
    assert apart["n_sets"] == 6
    every = {(r["aggregator"], r["cardinality"]): r for r in apart["aggregates"]}
    assert every[("sum", "all")]["n_pairs"] == 30 and every[("sum", "all")]["pair_accuracy"] == pytest.approx(0.6)
    assert apart["per_cardinality"]["2"]["mean_interaction"] == pytest.approx((0.48 - 0.03) / 5)
    # figure 7 plots the compared sets and counts the step sets apart
    fig = harm_figure(doc)
    scatter = next(t for t in fig.data if t.name == "k = 2 units")
    assert len(scatter.x) == 9 and "6 sets holding a whole step" in fig.layout.title.subtitle.text
    assert additivity_test(doc)["n_sets"] == 9 and additivity_test(doc)["mean"] == pytest.approx(0.0, abs=1e-12)
    # no step unit drawn: nothing apart
    blocks = planted_boundary("t")
    blocks["sets"] = [s for s in blocks["sets"] if all(m[0] != "step" for m in s["members"])]
    alone = {**summarize_harm([blocks], n_boot=0), **record(HarmConfig())}
    assert alone["step_sets"] is None
    atomic_write_json(tmp_path / "blocks" / "harm.json", alone)
    assert load_result(tmp_path / "blocks" / "harm.json")["step_sets"] is None


# ------------------------------------------------------------------ attention density, two splits


def density_record() -> dict:
    """b = 3; candidates (tokens): r(1,0) 30, r(1,1) 20, o(1,0) 10, r(2,0) 25, o(2,0) 5, r(3,0) 40 (latest step,
    protected), the whole step 2 (30; no gate kind); singleton harms 0.05, 0.01, 0.03, 0.00, 0.02, 0.04, 0.10."""
    units = [["reasoning", 1, 0], ["reasoning", 1, 1], ["observation", 1, 0], ["reasoning", 2, 0],
             ["observation", 2, 0], ["reasoning", 3, 0], ["step", 2, None]]
    tokens = [30, 20, 10, 25, 5, 40, 30]
    harms = [0.05, 0.01, 0.03, 0.00, 0.02, 0.04, 0.10]
    rng = np.random.default_rng(0)
    cands = [{"unit": u, "n_tokens": n, "rep": rng.normal(size=(2, 4)).round(4).tolist(),
              "attention": [[0.1 * (j + 1), 0.3 * (j + 1)]]} for j, (u, n) in enumerate(zip(units, tokens))]
    return {"task_id": "t0", "after_step": 3, "units": ["reasoning", "observation", "step"], "target": "y",
            "target_tokens": 4, "nll_full": 1.0, "sets": [_set([u], h) for u, h in zip(units, harms)],
            "layers": [0, 1], "attention_layers": [1], "prompt_tokens": 1000,
            "state": rng.normal(size=(2, 4)).round(4).tolist(), "candidates": cands,
            "shapes": [[2, 0, 1, 1], [1, 0, 1, 1], [1, 0, 0, 1]]}


class RiskOfFirstBlock:
    """A stand-in scorer with a known answer: unsafe score 1 for a set holding candidate 0 (r(1,0)), else 0."""

    unsafe = 0.02

    def risk_sets(self, view: dict, cand: np.ndarray, pool: np.ndarray, sets: list, spec: FeatureSpec
                  ) -> tuple[np.ndarray, np.ndarray]:
        risk = np.array([1.0 if 0 in s else 0.0 for s in sets])
        return risk, np.zeros(len(sets))


def stand_in_gate(proj_dim: int | None = None) -> GateModel:
    rec = density_record()
    return GateModel(FeatureSpec.for_view(rec), RiskOfFirstBlock(), GateSetting(k=2, tau=0.5),
                     {"train": ["t0"], "validation": [], "test": []}, {"proj_dim": proj_dim})


def test_density_split_by_exact_harm_is_the_toolkits():
    dens = attention_density([density_record()], unsafe=0.02)
    by = {tuple(r["unit"]): r["selected"] for r in dens["candidates"]}
    # harm <= 0.02 selects r(1,1), r(2,0), o(2,0); every block candidate is split, none of the gate's rules apply
    assert by == {("reasoning", 1, 0): False, ("reasoning", 1, 1): True, ("observation", 1, 0): False,
                  ("reasoning", 2, 0): True, ("observation", 2, 0): True, ("reasoning", 3, 0): False,
                  ("step", 2, None): False}
    assert dens["split"] == "harm" and dens["scorer"] is None
    # density = mean over heads / tokens: candidate j has heads 0.1 (j+1), 0.3 (j+1)
    expect = {j: 0.2 * (j + 1) / n for j, n in enumerate([30, 20, 10, 25, 5, 40, 30])}
    layer = dens["layers"][0]
    assert layer["selected"]["mean"] == pytest.approx(np.mean([expect[1], expect[3], expect[4]]))
    assert layer["retained"]["n"] == 4


def test_density_split_by_the_gates_selection():
    rec = density_record()
    chosen, pool = gate_selection([rec], stand_in_gate())[("t0", 3)]
    # by hand: the pool is steps 1-2's blocks (the latest step protected, a step no gate kind); the safe sets of at
    # most 2 avoid r(1,0); the largest saving is r(1,1) + r(2,0) = 45 tokens
    assert sorted(pool) == sorted([("reasoning", 1, 0), ("reasoning", 1, 1), ("observation", 1, 0),
                                   ("reasoning", 2, 0), ("observation", 2, 0)])
    assert sorted(chosen) == [("reasoning", 1, 1), ("reasoning", 2, 0)]
    dens = attention_density([rec], 0.02, {("t0", 3): (chosen, pool)}, "scorer.json", {"train": ["t0"]})
    by = {tuple(r["unit"]): r["selected"] for r in dens["candidates"]}
    assert by == {("reasoning", 1, 0): False, ("reasoning", 1, 1): True, ("observation", 1, 0): False,
                  ("reasoning", 2, 0): True, ("observation", 2, 0): False}
    assert dens["split"] == "gate" and dens["scorer"] == "scorer.json"
    assert {r["part"] for r in dens["candidates"]} == {"train"}
    expect = {j: 0.2 * (j + 1) / n for j, n in enumerate([30, 20, 10, 25, 5])}
    assert dens["layers"][0]["selected"]["mean"] == pytest.approx((expect[1] + expect[3]) / 2)
    assert dens["layers"][0]["retained"]["mean"] == pytest.approx((expect[0] + expect[2] + expect[4]) / 3)


def test_drsr_summary_labels_its_split_and_leaves_step_sets_to_granularity():
    rec = density_record()
    model = {"d_model": 4}
    made = record(DrsrConfig(proj_dim=0, n_boot=10), model=model)  # the record the stage adds
    plain = {**summarize_drsr([rec], model, proj_dim=0, n_boot=10), **made}
    gated = {**summarize_drsr([rec], model, proj_dim=0, n_boot=10, gate=stand_in_gate(), scorer="gate_scorer.json"),
             **made}
    assert plain["attention_density"]["split"] == "harm"
    assert ["step", 2, None] not in [c["unit"] for c in plain["attention_density"]["candidates"]]
    assert gated["attention_density"]["split"] == "gate"
    assert sum(c["selected"] for c in gated["attention_density"]["candidates"]) == 2
    assert plain["granularity"]["steps"][0]["step"] == 2  # the step unit still enters granularity
    titles = {}
    for name, doc in (("harm", plain), ("gate", gated)):
        title = attention_density_figure(doc).layout.title
        titles[name] = f"{title.text} {title.subtitle.text}"
    harm_title, gate_title = titles["harm"], titles["gate"]
    assert "exact harm" in harm_title and "toolkit's split" in harm_title
    assert "gate's selection" in gate_title and "DRSR's split" in gate_title
    assert any("deleted by the gate" in line for line in drsr_section(gated))
    assert any("toolkit's split" in line for line in drsr_section(plain))
    with pytest.raises(ValueError, match="projected to 64 dims"):
        summarize_drsr([rec], model, proj_dim=0, gate=stand_in_gate(64), scorer="gate_scorer.json", n_boot=10)


def test_the_unsafe_cut_is_an_option_of_the_gate():
    assert GateConfig().unsafe == 0.020
    assert GateConfig(unsafe=0.05).unsafe == 0.05
    with pytest.raises(ValueError, match="unsafe"):
        GateConfig(unsafe=-0.01)


def test_gate_train_carries_the_unsafe_option_into_the_scorer_file(tmp_path, monkeypatch):
    import json

    from interp.pipelines import stages
    from tests.gate.synthetic import records

    recs = records(12, planted=True, seed=3)
    monkeypatch.setattr("patching.drsr.drsr_records", lambda drsr_dir, parts=None: (recs, {"model": None}))
    stages.gate_train(tmp_path / "drsr", tmp_path, GateConfig(unsafe=0.035, n_members=2))
    doc = json.loads((tmp_path / "gate_scorer.json").read_text())
    assert doc["scorer"]["params"]["unsafe"] == 0.035
    assert GateModel.load(tmp_path / "gate_scorer.json").scorer.unsafe == 0.035
