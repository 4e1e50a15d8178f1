"""Every ``interp`` command on the tiny random Qwen3.5 and a few trajectories: what it writes, and an error path.

Commands run in-process through typer's ``CliRunner`` on ``interp.pipelines.cli.app``
(no interpreter start-up); error paths run through ``cli.main`` (the console
entry point, which turns known input errors into one ``error: ...`` line and exit
code 2). The demo runs as ``python -m interp demo`` in a subprocess (slow).

``validate``, ``render`` and ``models`` (and model-spec errors) are covered by
tests/foundation/test_cli.py, as a user runs them; they are not repeated here.

Inputs: ``tests/data/mini.jsonl`` (one trajectory, 4 steps) for the per-boundary
model commands, and 8 demo trajectories (``SUBSET``) where a command needs several
tasks (probes, labels, risk, sweep). Outputs of one command feed the next where
the real workflow does so (shards -> merge -> probe -> risk -> figures).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from interp.data.trajectory import load_trajectories
from interp.extraction.store import Store
from interp.pipelines.cli import app, main

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "data" / "demo" / "trajectories.jsonl"
STATES = ROOT / "data" / "demo" / "states.jsonl"
MINI = ROOT / "tests" / "data" / "mini.jsonl"
TINY = "tiny-qwen3.5"
SUBSET = (0, 2, 4, 6, 8, 12, 16, 21)  # lines of the demo set: code, office, security and web tasks
STATE_IDS = ("code-001@1", "code-003@5")  # states of two subset tasks
LAYERS = "3,7"  # the tiny model's full-attention layers
POOLINGS = ["last", "mean_latest_step"]

RUNNER = CliRunner()


def cli(*args) -> object:
    """``interp ARGS`` in-process; fails the test with the output and traceback unless the exit code is 0."""
    args = [str(a) for a in args]
    result = RUNNER.invoke(app, args)
    if result.exit_code != 0:
        detail = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else ""
        pytest.fail(f"interp {' '.join(args)} -> exit {result.exit_code}\n{result.output}\n{detail}", pytrace=False)
    return result


def _refuse_constant(name: str):
    raise ValueError(f"non-standard JSON constant {name}")


def strict_json(path: Path):
    """Parse a result file as strict JSON: NaN / Infinity literals are an error."""
    return json.loads(Path(path).read_text(encoding="utf-8"), parse_constant=_refuse_constant)


def squash(text: str) -> str:
    return "".join(text.split())


@pytest.fixture
def interp_main(monkeypatch, capsys):
    """``interp_main(*args) -> (exit code, stdout, stderr)`` through the console entry point ``cli.main``."""
    def run(*args):
        monkeypatch.setattr(sys, "argv", ["interp", *map(str, args)])
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main()
        out, err = capsys.readouterr()
        return exc.value.code, out, err
    return run


def one_error_line(code, err: str) -> str:
    """The single message line of a refused command (exit 2, no traceback); progress bars aside."""
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines()
             if line.strip() and "Loading weights" not in line and "%|" not in line]
    assert len(lines) == 1, err
    return lines[0]


def usage_error(*args) -> str:
    """A bad option value caught by click itself: exit 2, no traceback; returns the output."""
    result = RUNNER.invoke(app, [str(a) for a in args])
    assert result.exit_code == 2, result.output
    assert result.exc_info is None or result.exc_info[0] is SystemExit
    assert "Traceback" not in result.output
    return result.output


# ---------------------------------------------------------------------------------------------
# inputs and the chain of outputs (module-scoped: each command runs once)


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    lines = DEMO.read_text(encoding="utf-8").splitlines()
    traj = root / "subset.jsonl"
    traj.write_text("".join(lines[i] + "\n" for i in SUBSET), encoding="utf-8")
    states = root / "states.jsonl"
    states.write_text("".join(line + "\n" for line in STATES.read_text().splitlines()
                              if json.loads(line)["state_id"] in STATE_IDS))
    trajs = load_trajectories(traj)
    mini = load_trajectories(MINI)[0]
    return SimpleNamespace(root=root, traj=traj, trajs=trajs, states=states, mini=mini,
                           n_boundaries=sum(t.n_steps for t in trajs), ids=[t.task_id for t in trajs])


@pytest.fixture(scope="module")
def shards(ws):
    out = []
    for i in range(2):
        store = ws.root / f"shard{i}"
        result = cli("extract", "--trajectories", ws.traj, "--store", store, "--model", TINY, "--layers", LAYERS,
                     "--pooling", ",".join(POOLINGS), "--shard", f"{i}/2")
        out.append(SimpleNamespace(store=store, output=result.output))
    return out


@pytest.fixture(scope="module")
def merged(ws, shards):
    target = ws.root / "merged"
    result = cli("merge", target, *[s.store for s in shards])
    return SimpleNamespace(store=target, output=result.output)


@pytest.fixture(scope="module")
def probe_dir(ws, merged):
    out = ws.root / "probe"
    result = cli("probe", "--store", merged.store, "--out", out, "--n-perm", 5, "--n-boot", 50, "--n-jobs", 1)
    return SimpleNamespace(dir=out, output=result.output)


@pytest.fixture(scope="module")
def patch_dir(ws):
    out = ws.root / "patching"
    result = cli("patch", "--trajectories", MINI, "--out", out, "--model", TINY, "--layers", LAYERS)
    return SimpleNamespace(dir=out, output=result.output)


@pytest.fixture(scope="module")
def harm_dir(ws):
    out = ws.root / "harm"
    result = cli("harm", "--trajectories", MINI, "--out", out, "--model", TINY, "--max-k", 2, "--budget", 2,
                 "--units", "reasoning")  # DRSR's default kinds are tested in tests/e2e/test_harm_units.py
    return SimpleNamespace(dir=out, output=result.output)


@pytest.fixture(scope="module")
def entropy_csv(ws):
    out = ws.root / "iclr" / "iclr_blocks.csv"
    result = cli("entropy", "--trajectories", MINI, "--out", out, "--model", TINY)
    return SimpleNamespace(path=out, output=result.output)


@pytest.fixture(scope="module")
def ext_dir(ws, probe_dir):
    out = ws.root / "externalization"
    labelled = cli("externalize", "label", "--trajectories", ws.traj, "--out", out)
    risk = cli("externalize", "risk", "--out", out, "--labels", out / "externalization_labels.csv",
               "--probe-results", probe_dir.dir, "--trajectories", ws.traj, "--n-boot", 50)
    return SimpleNamespace(dir=out, label_output=labelled.output, risk_output=risk.output)


@pytest.fixture(scope="module")
def int_dir(ws):
    out = ws.root / "interventions"
    result = cli("intervene", "--states", ws.states, "--trajectories", ws.traj, "--out", out, "--model", TINY,
                 "--conditions", "full,delete_all_reasoning", "--samples", 1, "--max-new-tokens", 8)
    return SimpleNamespace(dir=out, output=result.output)


# ---------------------------------------------------------------------------------------------
# fetch


def test_fetch_builds_tiny_qwen_identically_in_an_empty_cache(tmp_path, monkeypatch):
    from interp.sensor.models import SPECS

    user = Path(SPECS[TINY].fetch())  # the session's cache (built on first use)
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "cache"))
    result = cli("fetch", TINY)
    built = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    assert len(built) == 1 and built[0].name == user.name
    assert squash(f"{TINY}: available at {built[0]}") in squash(result.output)
    for name in ("model.safetensors", "tokenizer.json"):
        assert (built[0] / name).read_bytes() == (user / name).read_bytes(), f"{name}: not the seeded build"
    configs = [json.loads((d / "config.json").read_text()) for d in (built[0], user)]
    for config in configs:  # the writer's version stamp: a cache built under another transformers release
        config.pop("transformers_version", None)
    assert configs[0] == configs[1], "config.json: not the seeded build"
    stamp = (built[0] / "model.safetensors").stat().st_mtime_ns
    cli("fetch", TINY)  # already there: nothing rebuilt
    assert (built[0] / "model.safetensors").stat().st_mtime_ns == stamp


def test_fetch_refuses_a_spec_it_cannot_fetch(interp_main):
    line = one_error_line(*interp_main("fetch", "qwen3.5-9b")[::2])
    assert "qwen3.5-9b" in line and TINY in line and line.startswith("error: ")
    line = one_error_line(*interp_main("fetch", "no-such-spec")[::2])
    assert line.startswith("error: cannot fetch 'no-such-spec'") and not line.endswith(" ")


# ---------------------------------------------------------------------------------------------
# extract and merge


def test_extract_shards_split_the_trajectories(ws, shards):
    tasks = []
    for shard in shards:
        store = Store(shard.store)
        settings = store.settings()
        assert settings["layers"] == [3, 7] and settings["poolings"] == POOLINGS
        assert settings["attention_layers"] == [3, 7]
        frame = store.manifest()
        assert set(frame["status"]) == {"ok"} and set(frame["condition"]) == {"full"}
        for task_id, rows in frame.groupby("task_id"):
            n = next(t.n_steps for t in ws.trajs if t.task_id == task_id)
            assert sorted(rows["after_step"]) == list(range(1, n + 1)), task_id
        assert f"'samples': {len(frame)}" in shard.output
        tasks.append(set(frame["task_id"]))
    assert tasks[0] and tasks[1] and not tasks[0] & tasks[1]
    assert tasks[0] | tasks[1] == set(ws.ids)


def test_merge_joins_the_shards_row_for_row(ws, shards, merged):
    frame, features = Store(merged.store).load_features("resid_pre", condition="full")
    assert len(frame) == ws.n_boundaries == frame["sample_id"].nunique()
    assert f"{len(frame)} rows from 2 shard(s)" in merged.output
    assert len(pd.read_csv(merged.store / "manifest.csv")) == len(frame)
    assert set(features) == {(layer, p) for layer in (3, 7) for p in POOLINGS}
    index = {sid: i for i, sid in enumerate(frame["sample_id"])}
    for shard in shards:
        part, part_features = Store(shard.store).load_features("resid_pre", condition="full")
        rows = [index[sid] for sid in part["sample_id"]]
        for key, x in part_features.items():
            assert x.shape == (len(part), 64)
            np.testing.assert_array_equal(features[key][rows], x)
    for x in features.values():
        assert np.isfinite(x).all() and x.std(axis=0).max() > 0


def test_merge_refuses_a_store_with_other_settings(ws, shards, interp_main, tmp_path):
    other = tmp_path / "other"
    cli("extract", "--trajectories", MINI, "--store", other, "--model", TINY, "--layers", "3",
        "--pooling", ",".join(POOLINGS))
    line = one_error_line(*interp_main("merge", tmp_path / "target", shards[0].store, other)[::2])
    assert "layers" in line


def test_extract_refuses_bad_options(ws, interp_main, tmp_path):
    line = one_error_line(*interp_main("extract", "--trajectories", MINI, "--store", tmp_path / "s", "--model", TINY,
                                       "--attention", "0")[::2])
    assert "--attention" in line and "linear-attention" in line
    assert not (tmp_path / "s").exists() or not list((tmp_path / "s").rglob("*.safetensors"))
    out = usage_error("extract", "--trajectories", MINI, "--store", tmp_path / "s", "--max-tokens", "many")
    assert "--max-tokens" in out


# ---------------------------------------------------------------------------------------------
# entropy, patch, harm (per-boundary model commands, on the mini trajectory)


def test_entropy_scores_every_block_and_drops_by_rho(ws, entropy_csv):
    table = pd.read_csv(entropy_csv.path)
    blocks = [(t, k) for t, step in enumerate(ws.mini.steps, start=1) for k in range(len(step.blocks))]
    assert list(zip(table["step"], table["block"])) == blocks
    assert set(table["task_id"]) == {ws.mini.task_id}
    assert table["scored"].all()
    bits = table["mean_entropy_bits"].to_numpy()
    assert np.isfinite(bits).all() and (bits > 0).all() and (bits < 20).all()
    for step, rows in table.groupby("step"):
        n = len(rows)
        assert rows["dropped"].sum() == (math.floor(0.8 * n) if n > 1 else 0), step
        if rows["dropped"].any():  # the lowest-entropy blocks are the dropped ones
            assert rows.loc[rows["dropped"], "mean_entropy_bits"].max() <= rows.loc[~rows["dropped"],
                                                                                   "mean_entropy_bits"].min()
    assert f"{len(table)} blocks, {int(table['dropped'].sum())} dropped at rho=0.8" in entropy_csv.output


def test_model_commands_log_device_dtype_and_kernels(ws, entropy_csv):
    """The run log names where the model runs (dtype auto: fp32 on CPU) and the kernels it calls (no fla here)."""
    assert squash(f"{TINY}: cpu, float32; kernels: Gated-DeltaNet: torch; conv: torch") in squash(entropy_csv.output)


def test_entropy_refuses_an_unknown_dtype(ws, interp_main, tmp_path):
    line = one_error_line(*interp_main("entropy", "--trajectories", MINI, "--out", tmp_path / "e.csv",
                                       "--model", TINY, "--dtype", "fp8")[::2])
    assert "fp8" in line and "fp32" in line
    assert not (tmp_path / "e.csv").exists()


def test_patch_writes_kl_repair_per_layer(ws, patch_dir):
    doc = strict_json(patch_dir.dir / "kl_repair.json")
    assert doc["sites"] == ["resid_pre.3", "resid_pre.7"] and doc["layers"] == [3, 7]
    assert doc["condition"] == "delete_all_reasoning" and doc["method"] == "fast"
    assert doc["n_samples"] + doc["n_excluded"] == ws.mini.n_steps == len(doc["per_sample"])
    assert doc["n_samples"] > 0
    assert len(doc["repair_mean"]) == 2 and all(math.isfinite(v) for v in doc["repair_mean"])
    kept = [s for s in doc["per_sample"] if not s["excluded"]]
    for i in range(2):
        assert doc["repair_mean"][i] == pytest.approx(np.mean([s["repair"][i] for s in kept]), abs=1e-6)
    assert all(s["d"] > 0 for s in kept), "a deletion that changes the prompt moves the next-token distribution"
    assert f"{doc['n_samples']} samples, {doc['n_excluded']} excluded" in patch_dir.output


def test_patch_refuses_an_unknown_method(ws, interp_main, tmp_path):
    line = one_error_line(*interp_main("patch", "--trajectories", MINI, "--out", tmp_path, "--model", TINY,
                                       "--method", "bogus")[::2])
    assert "bogus" in line and "fast" in line and "reference" in line
    assert not (tmp_path / "kl_repair.json").exists()


def test_harm_writes_set_harms_of_the_middle_boundary(ws, harm_dir):
    doc = strict_json(harm_dir.dir / "harm.json")
    (record,) = doc["boundaries"]
    b = ws.mini.n_steps // 2
    assert (record["task_id"], record["after_step"]) == (ws.mini.task_id, b)
    n_blocks = sum(len(step.blocks) for step in ws.mini.steps[:b])
    singles = [s for s in record["sets"] if len(s["members"]) == 1]
    assert len(singles) == n_blocks
    assert {len(s["members"]) for s in record["sets"]} <= {1, 2}
    single_harm = {tuple(s["members"][0]): s["harm"] for s in singles}
    for s in record["sets"]:
        assert math.isfinite(s["nll"]) and s["tokens_removed"] > 0
        assert s["harm"] == pytest.approx(s["nll"] - record["nll_full"], abs=1e-9)
        if len(s["members"]) == 2:
            additive = sum(single_harm[tuple(m)] for m in s["members"])
            assert s["interaction"] == pytest.approx(s["harm"] - additive, abs=1e-9)
    assert "2" in doc["per_cardinality"]
    assert "1 boundaries" in harm_dir.output


def test_harm_refuses_an_unknown_task(ws, interp_main, tmp_path):
    line = one_error_line(*interp_main("harm", "--trajectories", MINI, "--out", tmp_path, "--model", TINY,
                                       "--boundaries", "no-such-task@2")[::2])
    assert "no-such-task" in line
    n = next(t.n_steps for t in load_trajectories(MINI) if t.task_id == "mini-code-1")
    line = one_error_line(*interp_main("harm", "--trajectories", MINI, "--out", tmp_path / "late", "--model", TINY,
                                       "--boundaries", "mini-code-1@99")[::2])
    assert "mini-code-1@99" in line and f"1..{n - 1}" in line
    assert not (tmp_path / "late").exists()  # refused before any part was written


def test_patch_refuses_unknown_task_ids(ws, interp_main, tmp_path):
    line = one_error_line(*interp_main("patch", "--trajectories", MINI, "--out", tmp_path / "p", "--model", TINY,
                                       "--task-ids", "nope,also-nope")[::2])
    assert "nope, also-nope" in line and "trajectory file" in line


# ---------------------------------------------------------------------------------------------
# label and probe


def test_label_writes_future_necessity_targets(ws, tmp_path):
    result = cli("label", "--trajectories", ws.traj, "--out", tmp_path)
    doc = strict_json(tmp_path / "future_necessity_labels.json")
    table = pd.read_csv(tmp_path / "future_necessity_labels.csv")
    assert list(table.columns) == ["task_id", "after_step", "future_necessity"]
    assert set(table["task_id"]) == set(ws.ids)
    steps = {t.task_id: t.n_steps for t in ws.trajs}
    assert all(1 <= b <= steps[t] for t, b in zip(table["task_id"], table["after_step"]))
    assert not table.duplicated(["task_id", "after_step"]).any()
    assert set(table["future_necessity"]) <= {0, 1}
    assert "agreement" in doc
    assert squash(f"{len(table)} boundaries, {int(table['future_necessity'].sum())} positive") in squash(result.output)


def test_label_refuses_a_reference_csv_without_the_label_column(ws, interp_main, tmp_path):
    bad = tmp_path / "ref.csv"
    bad.write_text("task_id,after_step,label\ncode-001,1,1\n")
    code, _, err = interp_main("label", "--trajectories", ws.traj, "--out", tmp_path / "out", "--labels", bad)
    assert code == 2 and "Traceback" not in err
    assert str(bad) in squash(err) or bad.name in err
    assert "future_necessity" in err
    assert not (tmp_path / "out" / "future_necessity_labels.json").exists()


def test_probe_writes_results_and_out_of_fold_scores(ws, merged, probe_dir):
    doc = strict_json(probe_dir.dir / "probe_results.json")
    manifest = Store(merged.store).manifest()
    assert doc["n_samples"] + doc["n_excluded"] == len(manifest) == ws.n_boundaries
    assert doc["n_tasks"] == len(ws.ids)
    assert 0 <= doc["auroc"] <= 1 and 0 <= doc["ap"] <= 1 and 0 <= doc["balanced_accuracy"] <= 1
    lo, hi = doc["auroc_ci"]
    assert 0 <= lo <= hi <= 1
    assert 0 < doc["permutation_p"] <= 1 and len(doc["permutation_null"]) == 5
    assert sorted(map(tuple, doc["candidates"])) == sorted((layer, p) for layer in (3, 7) for p in POOLINGS)
    oof = pd.read_csv(probe_dir.dir / "oof_predictions.csv")
    assert len(oof) == doc["n_samples"] and set(oof["sample_id"]) <= set(manifest["sample_id"])
    assert np.isfinite(oof["score"]).all() and set(oof["y"]) <= {0, 1}
    assert set(oof["task_id"]) == set(ws.ids)
    assert squash(f"AUROC {doc['auroc']:.3f}") in squash(probe_dir.output)


def test_probe_names_a_missing_store_and_an_absent_condition(ws, merged, interp_main, tmp_path):
    line = one_error_line(*interp_main("probe", "--store", tmp_path / "none", "--out", tmp_path / "o")[::2])
    assert "not an activation store" in line and "none" in line
    line = one_error_line(*interp_main("probe", "--store", merged.store, "--out", tmp_path / "o2",
                                       "--condition", "delete_latest_reasoning")[::2])
    assert "no extracted samples for condition 'delete_latest_reasoning'" in line and "full" in line


def test_probe_refuses_an_unknown_outer_scheme(ws, merged, interp_main, tmp_path):
    line = one_error_line(*interp_main("probe", "--store", merged.store, "--out", tmp_path, "--outer", "bogus",
                                       "--n-jobs", 1)[::2])
    assert "bogus" in line and "kfold" in line and "loto" in line
    assert not (tmp_path / "probe_results.json").exists()


# ---------------------------------------------------------------------------------------------
# externalize label / risk


def test_externalize_label_writes_labels_and_evidence(ws, ext_dir):
    doc = strict_json(ext_dir.dir / "externalization_labels.json")
    table = pd.read_csv(ext_dir.dir / "externalization_labels.csv")
    assert doc["n_boundaries"] == len(table) == len(doc["boundaries"]) == ws.n_boundaries
    assert set(table["externalization_gap"]) <= {0, 1}
    assert doc["rule_positive_rate"] == pytest.approx(table["externalization_gap"].mean(), abs=1e-4)
    evidence = pd.read_csv(ext_dir.dir / "externalization_evidence.csv")
    assert len(evidence) == sum(len(b["items"]) for b in doc["boundaries"]) > 0
    assert set(evidence["task_id"]) <= set(ws.ids)
    assert squash(f"{doc['n_boundaries']} boundaries") in squash(ext_dir.label_output)


def test_externalize_risk_writes_risk_by_gap(ws, ext_dir):
    doc = strict_json(ext_dir.dir / "externalization.json")
    g1, g0 = doc["p_y_given_g1"], doc["p_y_given_g0"]
    assert g1["n"] + g0["n"] > 0
    for stat in (g1, g0):
        assert stat["estimate"] is None or 0 <= stat["estimate"] <= 1
    assert doc["hidden_score_gap"] is not None, "probe scores were given"
    assert "externalization.json" in ext_dir.risk_output


def test_externalize_errors_are_one_line(ws, interp_main, tmp_path):
    line = one_error_line(*interp_main("externalize", "label", "--trajectories", ws.traj, "--out", tmp_path,
                                       "--scope", "bogus")[::2])
    assert "bogus" in line and "latest" in line
    line = one_error_line(*interp_main("externalize", "risk", "--out", tmp_path)[::2])
    assert "--labels" in line and "--trajectories" in line
    assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------------------------------------
# intervene


def test_intervene_continues_each_state_under_each_condition(ws, int_dir):
    doc = strict_json(int_dir.dir / "interventions.json")
    conditions = ["full", "delete_all_reasoning"]
    assert doc["n_states"] == len(STATE_IDS) and list(doc["summary"]) == conditions
    rows = doc["rows"]
    assert len(rows) == len(STATE_IDS) * len(conditions) * 2  # greedy + 1 sample
    assert {(r["state_id"], r["condition"]) for r in rows} == {(s, c) for s in STATE_IDS for c in conditions}
    for r in rows:
        assert 0 <= r["n_new_tokens"] <= 8
        assert r["score"] is None or 0 <= r["score"] <= 1
    for name, row in doc["summary"].items():
        assert row["n_states"] == len(STATE_IDS) and row["n_generations"] == 4
        assert row["mean_score"] is None or 0 <= row["mean_score"] <= 1
        assert f"{name}: score" in int_dir.output
    assert (int_dir.dir / "interventions.md").read_text().strip()


def test_intervene_refuses_an_unknown_condition(ws, interp_main, tmp_path):
    line = one_error_line(*interp_main("intervene", "--states", ws.states, "--trajectories", ws.traj, "--out",
                                       tmp_path, "--model", TINY, "--conditions", "full,bogus")[::2])
    assert "bogus" in line and "delete_all_reasoning" in line


# ---------------------------------------------------------------------------------------------
# sweep

def test_sweep_runs_the_grid(ws, tmp_path, sweep_config):
    config = sweep_config(tmp_path / "sweep.toml", ws.traj, tmp_path / "out")
    result = cli("sweep", config)
    summary = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert len(summary) == 1
    row = summary.iloc[0]
    # final boundaries have no label (nothing follows): one fewer sample per task
    assert row["n_samples"] == ws.n_boundaries - len(ws.ids) and row["n_tasks"] == len(ws.ids)
    assert -1 <= row["gain_auroc"] <= 1 and 0 < row["permutation_p_position"] <= 1
    assert 0 <= row["auroc"] <= 1
    assert (tmp_path / "out" / "summary.md").read_text().count("\n") == 3
    cell = tmp_path / "out" / "cells" / row["folder"]
    assert strict_json(cell / "probe" / "probe_results.json")["auroc"] == pytest.approx(row["auroc"])
    assert row["cell"] in result.output


def test_sweep_names_an_unknown_key(ws, interp_main, tmp_path, sweep_config):
    config = sweep_config(tmp_path / "sweep.toml", ws.traj, tmp_path / "out")
    config.write_text(config.read_text() + "\n[extract]\ndevices = 'cpu'\n")
    line = one_error_line(*interp_main("sweep", config)[::2])
    assert str(config) in line and "devices" in line
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# figures (from the outputs of the commands above) and the demo


def test_figures_from_the_commands_outputs(ws, probe_dir, patch_dir, harm_dir, entropy_csv, ext_dir, int_dir):
    from interp.reporting.figures import FIGURES

    results = ws.root / "results"
    for name, src in (("probe", probe_dir.dir), ("patching", patch_dir.dir), ("harm", harm_dir.dir),
                      ("iclr", entropy_csv.path.parent), ("externalization", ext_dir.dir),
                      ("interventions", int_dir.dir)):
        shutil.copytree(src, results / name, ignore=shutil.ignore_patterns("parts", "units"))
    result = cli("figures", results, "--no-png")
    not_run = ("attention", "drsr", "gate", "tokens", "attribution", "anchors", "sae")  # none of those commands runs here
    expected = {spec.name for spec in FIGURES if spec.source.split("/")[0] not in not_run}
    written = {p.stem for p in (results / "figures").glob("*.html")}
    assert written == expected
    for name in expected:
        html = (results / "figures" / f"{name}.html").read_text(encoding="utf-8")
        assert len(html) > 2_000 and "<script src=\"http" not in html and "plotly.min.js" in html, name
    assert (results / "figures" / "plotly.min.js").stat().st_size > 1_000_000  # the one shared copy
    assert not list((results / "figures").glob("*.png"))
    assert "fig5_attention" in result.output and "FAILED" not in result.output
    tables = list((results / "tables").glob("*.md"))
    assert tables and all(t.read_text().strip() for t in tables)


def test_figures_refuses_a_missing_directory(interp_main, tmp_path):
    line = one_error_line(*interp_main("figures", tmp_path / "nowhere")[::2])
    assert "nowhere" in line and "not a directory" in line


def test_demo_refuses_an_unknown_dtype(interp_main, tmp_path):
    line = one_error_line(*interp_main("demo", "--model", TINY, "--out", tmp_path / "demo", "--dtype", "fp8",
                                       "--no-png")[::2])
    assert "fp8" in line
    assert not (tmp_path / "demo" / "report.md").exists()


# one torch thread: the demo runs beside the suite's xdist workers on a 2-core machine
DEMO_ENV = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1", "OMP_NUM_THREADS": "1"}


def _numbers(doc) -> int:
    """Numbers (not booleans) anywhere in a JSON document."""
    if isinstance(doc, dict):
        return sum(_numbers(v) for v in doc.values())
    if isinstance(doc, list):
        return sum(_numbers(v) for v in doc)
    return int(isinstance(doc, (int, float)) and not isinstance(doc, bool))


def _value(v) -> bool:
    """A drawable coordinate: a category label or a finite number."""
    return isinstance(v, str) or (isinstance(v, (int, float, np.number)) and bool(np.isfinite(v)))


def _drawn(trace) -> bool:
    """Whether a trace puts anything on its panel: a finite z (heatmap), a point with both coordinates finite,
    or a finite value of its one data axis (box, histogram)."""
    flat = {k: np.asarray(v, dtype=object).ravel() for k in ("x", "y", "z")
            if (v := getattr(trace, k, None)) is not None}
    if "z" in flat:
        return any(_value(v) for v in flat["z"])
    if "x" in flat and "y" in flat:
        return any(_value(a) and _value(b) for a, b in zip(flat["x"], flat["y"]))
    return any(_value(v) for values in flat.values() for v in values)


def empty_panels(fig) -> list[str]:
    """The x axes of a figure (one per panel) on which no trace draws anything: empty panels."""
    axes = ["x" + k.removeprefix("xaxis") for k in fig.layout.to_plotly_json() if k.startswith("xaxis")] or ["x"]
    drawn = {trace.xaxis or "x" for trace in fig.data if _drawn(trace)}
    return [axis for axis in axes if axis not in drawn]


def test_empty_panels_finds_a_panel_without_data():
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=3)
    fig.add_trace(go.Bar(x=["a", "b"], y=[1.0, 2.0]), row=1, col=1)
    fig.add_trace(go.Scatter(x=[1, 2], y=[float("nan")] * 2), row=1, col=2)  # drawn, but nothing to see
    fig.add_trace(go.Heatmap(z=[[0.5]]), row=1, col=3)
    assert empty_panels(fig) == ["x2"]
    assert empty_panels(go.Figure(go.Box(y=[1.0]))) == [] and empty_panels(go.Figure()) == ["x"]


def _check_report_size(out: Path) -> None:
    """What a reader downloads (the folder without the store) stays under 10 MB, and the files that grow with the
    model's width cost at most their numbers' text: the gate's float64 weights <= 22 bytes a number (shortest repr
    and a comma), DRSR parts' 6-decimal representations <= 11 (indented, they took 28 and 21: #40)."""
    files = [p for p in out.rglob("*") if p.is_file() and "store" not in p.relative_to(out).parts]
    assert sum(p.stat().st_size for p in files) < 10 * 2 ** 20
    capped = [(p, 22) for p in out.rglob("gate_scorer.json")] + [(p, 11) for p in (out / "drsr").rglob("parts/**/*.json")
                                                                if p.name != "run.json"]
    assert capped
    for path, per_number in capped:
        assert path.stat().st_size <= per_number * _numbers(json.loads(path.read_text())) + 4096, path


@pytest.mark.slow
def test_demo_on_tiny_qwen_writes_every_result_as_strict_json(tmp_path):
    from interp.reporting.figures import FIGURES, load_result

    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "interp", "demo", "--model", TINY, "--out", str(out), "--no-png"],
                          capture_output=True, text=True, cwd=ROOT, timeout=1800,  # ~70 s alone; generous
                          env=DEMO_ENV)  # under a loaded machine (xdist workers beside it)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    report = (out / "report.md").read_text(encoding="utf-8")
    assert report.strip() and TINY in report
    from interp.pipelines.stages import STEPS

    # analyses the demo has no step for: attribution refuses the tiny model's Gated-DeltaNet layers, anchors and the
    # SAE probe need real weights (and the SAE a trained dictionary) to mean anything; their commands run them
    made = {step.done.split("/")[0] for step in STEPS}
    assert {spec.source.split("/")[0] for spec in FIGURES} - made == {"attribution", "anchors", "sae"}
    for spec in (s for s in FIGURES if s.source.split("/")[0] in made):  # each figure's input file, the figure,
        assert (out / spec.source).is_file(), spec.source  # and data in every panel of it
        assert (out / "figures" / f"{spec.name}.html").is_file(), spec.name
        assert not empty_panels(spec.build(load_result(out / spec.source))), spec.name
    results = sorted(out.rglob("*.json"))
    assert len(results) > len(FIGURES)
    for path in results:
        strict_json(path)  # no NaN / Infinity literals anywhere
    _check_report_size(out)
    rerun = subprocess.run([sys.executable, "-m", "interp", "demo", "--model", TINY, "--out", str(out), "--no-png"],
                           capture_output=True, text=True, cwd=ROOT, timeout=600, env=DEMO_ENV)
    assert rerun.returncode == 0 and "reusing" in rerun.stdout  # stages with results are skipped
