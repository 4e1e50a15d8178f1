"""The gate on the tiny model: trained from a real ``interp drsr`` run (CLI train then eval), its features never
read the next output, and ``drsr_gate`` renders, extracts and patches like the other conditions with its edits
logged; bad inputs are refused by name before anything is written."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from interp.pipelines.cli import app, main

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "data" / "demo" / "trajectories.jsonl"
TINY = "tiny-qwen3.5"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from interp.data.trajectory import load_trajectories
    from patching.harm import default_boundaries

    root = tmp_path_factory.mktemp("gate")
    trajs = sorted(load_trajectories(DEMO), key=lambda t: t.n_steps)
    keys = ",".join(default_boundaries(trajs)[:4])
    run = CliRunner().invoke(app, ["drsr", "--trajectories", str(DEMO), "--out", str(root / "drsr"), "--model", TINY,
                                   "--boundaries", keys, "--max-k", "2", "--budget", "2", "--n-boot", "10"])
    # the demo's units (whole steps drawn besides DRSR's block kinds): the gate's pool must leave the steps out
    assert run.exit_code == 0, run.output
    run = CliRunner().invoke(app, ["gate", "train", "--drsr", str(root / "drsr"), "--out", str(root / "gate"),
                                   "--members", "3"])
    assert run.exit_code == 0, run.output
    return root


def test_train_then_eval_writes_the_scorer_gate_json_figures_and_section(trained, tiny_sensor):
    from interp.reporting.figures import FIGURES, load_result
    from interp.reporting.figures.gate import gate_section

    scorer = trained / "gate" / "gate_scorer.json"
    run = CliRunner().invoke(app, ["gate", "eval", "--drsr", str(trained / "drsr"), "--scorer", str(scorer),
                                   "--out", str(trained / "gate"), "--n-boot", "20"])
    assert run.exit_code == 0, run.output
    doc = load_result(trained / "gate" / "gate.json")  # checked against patching.gate_eval.FIELDS
    load_result(scorer)  # and the scorer file against patching.gate.SCORER_FIELDS
    split = doc["split"]
    assert sorted(split["train"]["tasks"] + split["validation"]["tasks"] + split["test"]["tasks"]) == sorted(
        {b["task_id"] for b in json.loads((trained / "drsr" / "drsr.json").read_text())["boundaries"]})
    assert doc["prediction"]["n_sets"] == split["test"]["n_sets"] > 0
    # gate.json counts the online pool: the sets SetGate's own forward enumerates (K = 3, the largest of K_GRID),
    # n_sets of them measured by DRSR's stage, though the records also hold whole-step sets
    from interp.data.trajectory import load_trajectories
    from patching.gate import K_GRID, GateModel, GateSetting, SetGate, grow_sets, pool_members
    from patching.drsr import drsr_records

    model = GateModel.load(scorer)
    online = SetGate(model, tiny_sensor)
    trajs = {t.task_id: t for t in load_trajectories(DEMO)}
    records = [r for r in drsr_records(trained / "drsr")[0] if r["task_id"] in split["test"]["tasks"]]
    n_pool = n_measured = 0
    for rec in records:
        view = online.view(trajs[rec["task_id"]], rec["after_step"])
        sets, _, capped = grow_sets(view, pool_members(view, GateSetting(k=max(K_GRID))), GateSetting(k=max(K_GRID)))
        units = [{tuple(view["candidates"][m]["unit"]) for m in st} for st in sets]
        assert not capped and not any(u[0] == "step" for st in units for u in st)
        n_pool += len(sets)
        n_measured += sum({tuple(m) for m in s["members"]} in units for s in rec["sets"])
    assert any(m[0] == "step" for r in records for s in r["sets"] for m in s["members"])
    assert (split["test"]["n_pool"], split["test"]["n_sets"]) == (n_pool, n_measured)
    assert {r["method"] for r in doc["pair_ordering"]} == {"scorer", "sum", "mean", "max", "min", "surface"}
    assert any("no bootstrap CIs" in n for n in doc["notes"])  # one test trajectory: said, not hidden
    for spec in FIGURES:
        if spec.source == "gate/gate.json":
            spec.build(doc)
    lines = gate_section(doc)
    assert any("on this scorer's scale (reference: K 3, beta 0.0)" in line for line in lines)
    assert any("DRSR's tau 0.0741 on its own scale" in line for line in lines)  # never beside ours


def test_features_never_read_the_next_output(tiny_sensor, mini_trajectory):
    from interp.data.trajectory import Action
    from patching.drsr import boundary_record
    from patching.gate import online_view

    b = 2
    steps = list(mini_trajectory.steps)
    steps[b] = replace(steps[b], reasoning="Something else entirely, to be scored as the next output.",
                       action=Action(text="a different reply"))
    other = replace(mini_trajectory, steps=tuple(steps))
    kinds = ("reasoning", "observation", "tool_exchange")
    a = boundary_record(tiny_sensor, mini_trajectory, b, max_k=2, budget=2, units=kinds)
    c = boundary_record(tiny_sensor, other, b, max_k=2, budget=2, units=kinds)
    va, vc = online_view(a), online_view(c)
    assert [x["unit"] for x in va["candidates"]] == [x["unit"] for x in vc["candidates"]]
    assert va["prompt_tokens"] == vc["prompt_tokens"]
    for key in ("rep", "attention"):  # the same prompt: equal up to float32 round-off of longer forwards
        assert np.allclose([x[key] for x in va["candidates"]], [x[key] for x in vc["candidates"]], atol=1e-4)
    assert np.allclose(va["state"], vc["state"], atol=1e-4)
    assert not np.allclose([s["harm"] for s in a["sets"]], [s["harm"] for s in c["sets"]], atol=1e-4)


def test_the_gate_that_is_trained_is_the_gate_that_runs(trained, tiny_sensor):
    """For random pool sets at the DRSR run's boundaries: the online view (SetGate's own forward) equals the
    record's, the offline feature vector equals the online one bit for bit (float64, so float32 too), the unsafe
    scores are identical, and the online choice is the offline evaluation's."""
    from interp.data.trajectory import load_trajectories
    from patching.gate import (GateModel, SetGate, Scored, candidate_features, decide_view, decisions,
                               feature_matrix, pool_members, set_matrix, supervision)
    from patching.drsr import drsr_records

    records, _ = drsr_records(trained / "drsr")
    model = GateModel.load(trained / "gate" / "gate_scorer.json")
    gate = SetGate(model, tiny_sensor)
    trajs = {t.task_id: t for t in load_trajectories(DEMO)}
    sup = supervision(records)
    rng = np.random.default_rng(0)
    spec = model.spec
    n_rows = 0
    for bi, rec in enumerate(records):
        traj, b = trajs[rec["task_id"]], rec["after_step"]
        online = gate.view(traj, b)
        offline = sup.views[bi]
        pool = pool_members(online, model.setting, model.unit_kinds)
        units = [tuple(online["candidates"][m]["unit"]) for m in pool]
        assert units == [tuple(offline["candidates"][m]["unit"]) for m in sup.pools[bi]]  # one pool
        assert online["prompt_tokens"] == offline["prompt_tokens"] and online["shapes"] == offline["shapes"]
        li, ai = [offline["layers"].index(x) for x in spec.layers], [offline["attention_layers"].index(x)
                                                                     for x in spec.attention_layers]
        assert online["state"] == [offline["state"][i] for i in li]  # the same forward: equal, not close
        for m_on, m_off in zip(pool, sup.pools[bi]):
            c_on, c_off = online["candidates"][m_on], offline["candidates"][m_off]
            assert c_on["rep"] == [c_off["rep"][i] for i in li] and c_on["n_tokens"] == c_off["n_tokens"]
            assert c_on["attention"] == [c_off["attention"][i] for i in ai]
        rows = np.flatnonzero(sup.boundary == bi)
        rows = rng.choice(rows, min(len(rows), 12), replace=False)
        on_index = {u: j for j, u in zip(pool, units)}
        sets = [tuple(sorted(on_index[tuple(offline["candidates"][m]["unit"])] for m in sup.members[r])) for r in rows]
        x_off = feature_matrix(sup, rows, spec)
        x_on = set_matrix(online, candidate_features(online, spec), pool, sets, spec)
        assert x_off.dtype == x_on.dtype == np.float64 and np.array_equal(x_off, x_on)
        assert np.array_equal(x_off.astype(np.float32), x_on.astype(np.float32))
        r_off, u_off = model.scorer.predict_risk(x_off)
        r_on, u_on = model.scorer.predict_risk(x_on)
        assert np.array_equal(r_off, r_on) and np.array_equal(u_off, u_on)
        n_rows += len(rows)
        mine = np.flatnonzero(sup.boundary == bi)  # the online choice is the offline evaluation's
        risk, unc = model.scorer.predict_risk(feature_matrix(sup, mine, spec))
        for tau in (float(np.median(risk)), 1.01):
            setting = replace(model.setting, k=3, tau=tau)
            row = decisions(sup, Scored(mine, risk, unc, np.array([bi]), sup.boundary[mine]), setting)[bi]
            d = decide_view(replace(model, setting=setting), online)
            assert (None if d.members is None else [units[list(pool).index(m)] for m in d.members]) == (
                None if row is None else [tuple(offline["candidates"][m]["unit"]) for m in sup.members[row]])
    assert n_rows >= 20


def _made(scorer: Path) -> dict:
    """The record of the training run a scorer file carries (an edited copy keeps it)."""
    doc = json.loads(scorer.read_text())
    return {"config": doc["config"], "provenance": doc["provenance"]}


@pytest.fixture(scope="module")
def open_gate(trained):
    """The trained scorer with tau above every score: it deletes (an edit to log), whatever it learned."""
    from patching.gate import GateModel

    model = GateModel.load(trained / "gate" / "gate_scorer.json")
    model.setting = replace(model.setting, tau=1.01)
    return model.save(trained / "open_scorer.json", _made(trained / "gate" / "gate_scorer.json"))


def test_drsr_gate_renders_and_logs_the_online_gate_s_edits(open_gate, tiny_sensor, mini_trajectory):
    from interp.data.conditions import apply_condition
    from interp.data.deletions import delete_units
    from interp.data.render import render
    from patching.gate import GateModel, SetGate

    gate = SetGate(GateModel.load(open_gate), tiny_sensor)
    b = mini_trajectory.n_steps
    edited, log = apply_condition("drsr_gate", mini_trajectory, b, gate=gate)
    pruned = mini_trajectory  # replayed by hand: each step's decision on the history pruned before it
    for t in range(1, b + 1):
        decision = gate.decide(pruned, t)
        assert all(u[1] < t for u in decision.units)
        assert log.params["units"][str(t)] == sorted([list(u) for u in decision.units], key=str)
        if decision.units:
            cut, b2, _ = delete_units(pruned, t, decision.units)
            assert b2 == t and decision.n_feasible >= 1
            assert render(pruned, t, tiny_sensor.tokenizer).n_tokens - render(cut, t, tiny_sensor.tokenizer).n_tokens \
                == decision.tokens_removed > 0
            pruned = cut
    assert edited == pruned and log.edits and edited != mini_trajectory
    closed = GateModel.load(open_gate)
    closed.setting = replace(closed.setting, tau=None)
    same, log = apply_condition("drsr_gate", mini_trajectory, b, gate=SetGate(closed, tiny_sensor))
    assert same == mini_trajectory and not log.edits and "abstained" in log.notes[0]


def test_tokens_accounts_the_gate_with_memory(open_gate, tmp_path):
    mini = ROOT / "tests" / "data" / "mini.jsonl"
    run = CliRunner().invoke(app, ["tokens", "--trajectories", str(mini), "--out", str(tmp_path), "--tokenizer", TINY,
                                   "--policies", "full,drsr_gate", "--gate-scorer", str(open_gate)])
    assert run.exit_code == 0, run.output
    doc = json.loads((tmp_path / "tokens.json").read_text())
    assert doc["policies"] == ["full", "drsr_gate"] and not doc["skipped"]
    gated = [r for r in doc["requests"] if r["policy"] == "drsr_gate"]
    assert gated and sum(r["direct_removal_tokens"] for r in gated) > 0
    refused = CliRunner().invoke(app, ["tokens", "--trajectories", str(mini), "--out", str(tmp_path / "x"),
                                       "--tokenizer", TINY, "--policies", "drsr_gate"])
    assert refused.exit_code != 0 and "--gate-scorer" in refused.output + str(refused.exception)


def test_drsr_gate_extracts_and_patches(open_gate, tmp_path):
    from interp.extraction.store import Store

    mini = ROOT / "tests" / "data" / "mini.jsonl"
    run = CliRunner().invoke(app, ["extract", "--trajectories", str(mini), "--store", str(tmp_path / "store"),
                                   "--model", TINY, "--layers", "0,3", "--conditions", "full,drsr_gate",
                                   "--gate-scorer", str(open_gate), "--boundaries", "2,3"])
    assert run.exit_code == 0, run.output
    frame = Store(tmp_path / "store").manifest()
    gated = frame[frame["condition"] == "drsr_gate"]
    assert len(gated) == 2 and (gated["chars_removed"] > 0).all()
    from patching.gate import GateModel

    model = GateModel.load(open_gate)
    model.setting = replace(model.setting, tau=1.02)
    other = model.save(tmp_path / "other_scorer.json", _made(open_gate))
    again = CliRunner().invoke(app, ["extract", "--trajectories", str(mini), "--store", str(tmp_path / "store"),
                                     "--model", TINY, "--layers", "0,3", "--conditions", "drsr_gate",
                                     "--gate-scorer", str(other), "--boundaries", "2,3"])
    assert again.exit_code != 0 and "another scorer" in str(again.exception)  # units of two gates never mix
    run = CliRunner().invoke(app, ["patch", "--trajectories", str(mini), "--out", str(tmp_path / "patch"),
                                   "--model", TINY, "--layers", "0,3", "--condition", "drsr_gate",
                                   "--gate-scorer", str(open_gate)])
    assert run.exit_code == 0, run.output
    doc = json.loads((tmp_path / "patch" / "kl_repair.json").read_text())
    assert doc["condition"] == "drsr_gate" and doc["n_samples"] > 0


@pytest.mark.parametrize("args, named", [
    (["extract", "--conditions", "drsr_gate", "--store", "{tmp}/s"], "--gate-scorer"),
    (["extract", "--conditions", "drsr_gate", "--store", "{tmp}/s", "--gate-scorer", "{tmp}/none.json"], "none.json"),
    (["gate", "train", "--drsr", "{tmp}", "--out", "{tmp}/g"], "drsr.json"),
    (["gate", "eval", "--drsr", "{tmp}", "--scorer", "{tmp}/none.json", "--out", "{tmp}/g"], "none.json"),
])
def test_bad_inputs_are_refused_by_name(monkeypatch, capsys, tmp_path, args, named):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if args[0] == "extract":
        args += ["--trajectories", str(DEMO), "--model", TINY]
    monkeypatch.setattr(sys, "argv", ["interp", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "Traceback" not in err and named in err, err
    assert not (tmp_path / "s").exists() and not (tmp_path / "g" / "gate.json").exists()


def test_drsr_with_the_scorer_splits_the_attention_density_by_the_gate(trained):
    """``interp drsr --gate-scorer``: the parts are reused and figure 11's split is the gate's own choice."""
    from patching.gate import GateModel, decide_view, online_view
    from patching.drsr import drsr_records

    scorer = trained / "gate" / "gate_scorer.json"
    doc = json.loads((trained / "drsr" / "drsr.json").read_text())
    keys = ",".join(f"{b['task_id']}@{b['after_step']}" for b in doc["boundaries"])
    run = CliRunner().invoke(app, ["drsr", "--trajectories", str(DEMO), "--out", str(trained / "drsr"), "--model",
                                   TINY, "--boundaries", keys, "--max-k", "2", "--budget", "2", "--n-boot", "10",
                                   "--gate-scorer", str(scorer)])
    assert run.exit_code == 0, run.output
    dens = json.loads((trained / "drsr" / "drsr.json").read_text())["attention_density"]
    assert dens["split"] == "gate" and dens["scorer"] == str(scorer)
    model = GateModel.load(scorer)
    want = set()
    for rec in drsr_records(trained / "drsr")[0]:
        view = online_view(rec)
        d = decide_view(model, view)
        want |= {(rec["task_id"], tuple(view["candidates"][m]["unit"])) for m in d.members or ()}
    assert {(c["task_id"], tuple(c["unit"])) for c in dens["candidates"] if c["selected"]} == want
    assert all(c["unit"][0] != "step" for c in dens["candidates"])
