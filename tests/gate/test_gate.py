"""DRSR's set-risk gate on synthetic DRSR records where the truth is known both ways: a harm planted in the
members' relation to the boundary state is learned (far above the surface baseline) and the gate meets its
constraint on held-out trajectories; a harm independent of every feature is not learned and the gate abstains.
Also: the split keeps trajectories whole, features never read the next output, the scorer is a scikit-learn
estimator, and the scorer file round-trips and refuses bad input by name."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.base import clone

from patching.gate import (MAX_UNSAFE_RATE, FeatureSpec, GateModel, SetRiskScorer, choose, decisions,
                           feature_matrix, gate_metrics, online_view, predict_rows, restrict, score_split, split_tasks,
                           supervision)
from interp.record import record
from patching.config import GateConfig
from patching.drsr import drsr_records
from patching.gate_eval import evaluate, train

from .synthetic import records

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def planted():
    recs = records(80, planted=True, seed=1)
    gate, _ = train(recs, fractions=(0.5, 0.25, 0.25), n_members=4)
    return recs, gate, evaluate(recs, gate, n_boot=50)


def _accuracy(doc, method):
    return next(r["pair_accuracy"] for r in doc["pair_ordering"] if r["method"] == method)


def test_a_planted_relation_is_learned_and_the_gate_meets_its_constraint(planted):
    _, _, doc = planted
    assert doc["prediction"]["spearman"] > 0.9
    assert _accuracy(doc, "scorer") > 0.9 and _accuracy(doc, "scorer") > _accuracy(doc, "surface") + 0.2
    g = doc["gate"]
    assert g["coverage"] >= 0.8 and g["unsafe_rate"] <= MAX_UNSAFE_RATE and g["removal"] > 0
    assert [r["name"] for r in doc["ablations"]] == ["full", "no_retained_context", "no_pair_pooling", "no_abstention"]
    forced = doc["ablations"][-1]
    assert forced["coverage"] == 1.0  # without abstention every test boundary deletes
    assert [r["beta"] for r in doc["beta_sweep"]] == [0.0, 0.25, 0.5, 1.0, 2.0]
    # the operating curve is monotone in tau: a higher threshold admits every set a lower one does
    cov = [c["coverage"] for c in doc["operating_curve"]]
    assert cov == sorted(cov) and cov[-1] == 1.0


def test_a_harm_no_feature_predicts_is_at_chance_and_the_gate_abstains():
    recs = records(240, planted=False, seed=2)
    gate, info = train(recs, fractions=(0.34, 0.33, 0.33), n_members=4)
    sup = supervision(recs)
    test = restrict(sup, score_split(sup, gate.split["test"], gate.scorer, gate.spec), gate.setting.k)
    m = gate_metrics(sup, decisions(sup, test, gate.setting))
    assert m["coverage"] <= 0.05, (gate.setting, info, m)  # abstains (nearly) everywhere
    rows = sup.rows_of(gate.split["test"])
    pred = gate.scorer.predict(feature_matrix(sup, rows, gate.spec))
    from scipy.stats import spearmanr
    assert abs(spearmanr(pred, sup.harm[rows])[0]) < 0.1
    base = sup.unsafe[rows].mean()
    assert base > 2 * MAX_UNSAFE_RATE  # deleting blindly would break the constraint


def test_no_trajectory_is_in_two_parts():
    tasks = [f"t{i}" for i in range(23)] * 3
    for seed in range(5):
        split = split_tasks(tasks, seed)
        parts = [set(v) for v in split.values()]
        assert sum(map(len, parts)) == 23 and set().union(*parts) == set(tasks)
        assert all(len(p) >= 1 for p in parts) and not any(a & b for i, a in enumerate(parts) for b in parts[i + 1:])
    assert split_tasks(tasks, 0) == split_tasks(tasks, 0) != split_tasks(tasks, 1)
    assert [len(v) for v in split_tasks(["a", "b", "c"], 0).values()] == [1, 1, 1]
    with pytest.raises(ValueError, match="at least 3 trajectories"):
        split_tasks(["a", "b", "a"])


def test_the_next_output_is_a_label_never_a_feature():
    rec = records(1, seed=3)[0]
    changed = json.loads(json.dumps(rec))
    changed.update(target="a different next output", target_tokens=99, nll_full=7.0)
    for s in changed["sets"]:
        s["harm"], s["nll"] = -s["harm"] + 0.5, 9.0
    assert online_view(changed) == online_view(rec)
    a, b = supervision([rec]), supervision([changed])
    spec = FeatureSpec.for_view(a.views[0])
    rows = np.arange(len(a.harm))
    assert np.array_equal(feature_matrix(a, rows, spec), feature_matrix(b, rows, spec))
    assert not np.array_equal(a.harm, b.harm) and not np.array_equal(a.unsafe, b.unsafe)


def test_the_gate_picks_the_largest_saving_under_tau_and_abstains_otherwise():
    score, saving = np.array([0.05, 0.2, 0.01, 0.04]), np.array([10.0, 90.0, 5.0, 10.0])
    assert choose(score, saving, 0.1) == 3  # 10 tokens twice: the lower score
    assert choose(score, saving, 0.5) == 1
    assert choose(score, saving, 0.01) is None and choose(score, saving, None) is None
    assert choose(score, saving, 0.01, abstain=False) == 2  # forced: the lowest score


def test_the_scorer_is_a_scikit_learn_regressor():
    from sklearn.utils.estimator_checks import check_estimator

    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 5))
    y = 0.02 * x[:, 0] + rng.normal(0, 0.002, 60)
    est = SetRiskScorer(n_members=5, seed=3)
    twin = clone(est)
    assert twin.get_params() == est.get_params() and not hasattr(twin, "coef_")
    fitted = est.fit(x, y)
    from sklearn.linear_model import RidgeCV
    ridge = RidgeCV().fit(x, y)
    assert np.corrcoef(fitted.predict(x), ridge.predict(x))[0, 1] > 0.99  # an ensemble of ridges
    assert fitted.score(x, y) > 0.9  # RegressorMixin's R^2
    p, unc = fitted.predict_risk(x)
    assert ((0 <= p) & (p <= 1)).all() and (unc >= 0).all()
    from scipy.stats import spearmanr
    assert spearmanr(p, fitted.predict(x))[0] > 0.9  # more harm, more risk
    failed = [r["check_name"] for r in check_estimator(SetRiskScorer(n_members=3), on_fail=None)
              if r["status"] == "failed"]
    assert not failed  # scikit-learn's own estimator checks
    with pytest.raises(ValueError, match="features"):
        fitted.predict(x[:, :3])


def test_the_scorer_file_round_trips_and_bad_files_are_named(planted, tmp_path):
    recs, gate, _ = planted
    path = gate.save(tmp_path / "gate_scorer.json", record(GateConfig()))
    again = GateModel.load(path)
    sup = supervision(recs)
    rows = np.arange(40)
    x = feature_matrix(sup, rows, gate.spec)
    assert np.array_equal(again.scorer.predict(x), gate.scorer.predict(x)) and again.setting == gate.setting
    assert again.split == gate.split and again.spec == gate.spec
    with pytest.raises(FileNotFoundError, match="missing.json"):
        GateModel.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        GateModel.load(tmp_path / "bad.json")
    doc = json.loads(path.read_text())
    doc["scorer"]["coef"] = doc["scorer"]["coef"][:1]
    (tmp_path / "corrupt.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="corrupt.json: corrupt gate scorer file"):
        GateModel.load(tmp_path / "corrupt.json")
    (tmp_path / "other.json").write_text(json.dumps({"format": "x"}))
    with pytest.raises(ValueError, match="other.json: not a gate scorer file"):
        GateModel.load(tmp_path / "other.json")


def test_a_drsr_folder_without_parts_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="drsr.json"):
        drsr_records(tmp_path)
    (tmp_path / "drsr.json").write_text(json.dumps({"boundaries": [{"task_id": "t", "after_step": 2}]}))
    with pytest.raises(FileNotFoundError, match="parts"):
        drsr_records(tmp_path)


@pytest.fixture(scope="module")
def planted_mlp():
    recs = records(60, planted=True, seed=1)  # every set measured: the bound counts an unmeasured deletion unsafe
    gate, _ = train(recs, fractions=(0.6, 0.2, 0.2), n_members=2, scorer="set-mlp",
                    calibration=GateConfig(folds=2).calibration())
    return recs, gate, evaluate(recs, gate, n_boot=0)


@pytest.mark.slow  # torch fits: about a minute each on a loaded 2-core machine
def test_drsr_s_set_model_learns_the_planted_relation_and_the_gate_meets_its_constraint(planted_mlp, planted):
    recs, gate, doc = planted_mlp
    assert doc["scorer"]["kind"] == "set-mlp" and doc["prediction"]["spearman"] > 0.9
    assert _accuracy(doc, "scorer") > 0.85 and _accuracy(doc, "scorer") > _accuracy(doc, "surface") + 0.2
    g = doc["gate"]
    assert g["coverage"] >= 0.8 and g["unsafe_rate"] <= MAX_UNSAFE_RATE and g["removal"] > 0
    print("ridge", planted[2]["prediction"], planted[2]["gate"])  # both reported side by side (-s)
    print("set-mlp", doc["prediction"], doc["gate"])


@pytest.mark.slow
def test_the_set_model_file_round_trips_bit_for_bit_without_pickle(planted_mlp, tmp_path):
    recs, gate, _ = planted_mlp
    path = gate.save(tmp_path / "gate_scorer.json", record(GateConfig()))
    doc = json.loads(path.read_text())
    assert doc["kind"] == "set-mlp" and len(doc["scorer"]["members"]) == 2
    again = GateModel.load(path)
    sup = supervision(recs)
    rows = np.arange(60)
    assert np.array_equal(predict_rows(again.scorer, sup, rows, again.spec),
                          predict_rows(gate.scorer, sup, rows, gate.spec))
    one = predict_rows(gate.scorer, sup, rows[:7], gate.spec)  # a set's prediction does not depend on the batch
    assert np.array_equal(one, predict_rows(gate.scorer, sup, rows, gate.spec)[:7])
    doc["scorer"]["members"][0]["w1"] = doc["scorer"]["members"][0]["w1"][:3]
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="bad.json: corrupt gate scorer file"):
        GateModel.load(tmp_path / "bad.json")
