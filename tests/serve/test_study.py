"""`interp study` end to end: a scripted agent runs 5 tasks through the proxy under 3 policies against a scripted
upstream; the table's rewards, token kinds, cost and amplification (with CIs) recomputed from the run logs by
hand; a rerun reuses completed runs; bad configs and inputs are refused before anything runs."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from interp.io import safe_stem
from interp.params import ConfigError
from interp.pipelines.cli import main
from interp.schema import check
from interp.serve.runlog import read_requests
from interp.serve.study import STUDY_FIELDS, StudyConfig, read_tasks

from ._support import Stub, scripted_turns

pytestmark = pytest.mark.e2e

N_BOOT = 300
SEED = 3
POLICIES = ("full", "delete_all_reasoning", "observation_masking:m=1")
PRICES = {"uncached_input": 3.0, "cache_read": 0.3, "cache_write": 3.75, "output": 15.0}


def _tasks(path):
    rows = [{"task_id": f"t{i}", "prompt": f"Find the answer in the files of folder {i}." + " Be careful." * i,
             "target": "42" if i < 3 else "7", "observations": [f"total {i}\nfile_{i}.txt\n" * (1 + i)]}
            for i in range(5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _study(tmp_path, monkeypatch, capsys, url, *extra):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prices.json").write_text(json.dumps(PRICES))
    monkeypatch.setattr(sys, "argv", [
        "interp", "study", "--upstream", url, "--out", str(tmp_path / "study"), "--agent",
        "python:interp.serve.study:chat_agent", "--tasks", str(_tasks(tmp_path / "tasks.jsonl")), "--policies",
        ",".join(POLICIES), "--seed", str(SEED), "--n-boot", str(N_BOOT), "--prices", str(tmp_path / "prices.json"),
        "--tokenizer", "tiny-qwen3.5", *extra])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return exc.value.code, out.out + out.err


def _percentile_ci(stat, n, seed):
    """The task bootstrap written out: n tasks drawn with replacement per resample, 2.5/97.5 percentiles."""
    rng = np.random.default_rng(seed)
    draws = [stat(rng.integers(n, size=n)) for _ in range(N_BOOT)]
    return list(np.percentile(draws, [2.5, 97.5]))


def _steps(body: dict) -> list[dict]:
    """Task i (its folder number in the prompt) takes i + 1 tool steps: tasks differ in length."""
    i = int(body["messages"][1]["content"].split("folder ")[1][0])
    return scripted_turns(i + 1)


def test_three_policies_by_five_tasks_make_the_table_with_cis(serving, tmp_path, monkeypatch, capsys):
    stub = Stub((), script=_steps)
    requests = sum(i + 2 for i in range(5))  # per policy: i + 1 steps and the final answer per task
    code, text = _study(tmp_path, monkeypatch, capsys, serving(stub.build()))
    assert code == 0, text
    doc = check(json.loads((tmp_path / "study" / "study.json").read_text()), STUDY_FIELDS, "study.json")
    tasks = [f"t{i}" for i in range(5)]
    assert doc["tasks"] == tasks and doc["policies"] == list(POLICIES) and len(stub.received) == 3 * requests
    reward = np.array([1.0, 1.0, 1.0, 0.0, 0.0])
    logs = {p: read_requests(tmp_path / "study" / "runs" / safe_stem(p) / "log") for p in POLICIES}
    assert all({r["session"] for r in rows} == set(tasks) for rows in logs.values())  # a task is a session
    by = {r["policy"]: r for r in doc["table"]}
    for p, rows in logs.items():
        row = by[p]
        assert row["reward"] == pytest.approx(reward.mean())
        assert row["reward_ci"] == pytest.approx(_percentile_ci(lambda i: reward[i].mean(), 5, SEED))
        cached = sum(r["cached_tokens"] for r in rows)
        prompt = sum(r["prompt_tokens"] for r in rows)
        output = sum(r["completion_tokens"] for r in rows)
        assert (row["uncached_input_tokens"], row["cache_read_tokens"], row["output_tokens"]) == \
            (prompt - cached, cached, output)
        assert row["cost_usd"] == pytest.approx(((prompt - cached) * 3.0 + cached * 0.3 + output * 15.0) / 1e6)
        if p == "full":
            assert row["amplification"] is None and row["reward_change_ci"] is None
            continue
        assert row["reward_change"] == 0 and row["reward_change_ci"] == [0.0, 0.0]
        # the decomposition by hand from the two logs: T = prompt + completion per task, D = removed tokens
        total = np.array([sum(r["prompt_tokens"] + r["completion_tokens"] for r in rows if r["session"] == t)
                          - sum(r["prompt_tokens"] + r["completion_tokens"] for r in logs["full"]
                                if r["session"] == t) for t in tasks], dtype=float)
        removed = np.array([sum(r["removed_tokens"] for r in rows if r["session"] == t) for t in tasks], dtype=float)
        assert removed.sum() > 0 and row["refused"] is None
        assert row["total_change"] == pytest.approx(total.sum())
        assert row["direct_change"] == pytest.approx(-removed.sum())
        assert row["amplification"] == pytest.approx(abs(total.sum()) / removed.sum())
        assert row["amplification_ci"] == pytest.approx(
            _percentile_ci(lambda i: abs(total[i].sum()) / removed[i].sum(), 5, SEED))
        lo, hi = row["amplification_ci"]
        assert lo < hi  # the tasks differ: a real interval
        assert f"{p}: reward 0.600" in text
    assert doc["config"]["policies"] == list(POLICIES) and doc["provenance"]["inputs"]["tasks"]

    # a rerun reuses the completed runs: nothing reaches the upstream, the same table
    before = len(stub.received)
    code, _ = _study(tmp_path, monkeypatch, capsys, serving(stub.build()))
    again = json.loads((tmp_path / "study" / "study.json").read_text())
    assert code == 0 and len(stub.received) == before and again["table"] == doc["table"]
    # an interrupted run (no rewards.json) is run again from scratch
    (tmp_path / "study" / "runs" / safe_stem("delete_all_reasoning") / "rewards.json").unlink()
    code, _ = _study(tmp_path, monkeypatch, capsys, serving(stub.build()))
    assert code == 0 and len(stub.received) == before + requests
    assert len(read_requests(tmp_path / "study" / "runs" / safe_stem("delete_all_reasoning") / "log")) == requests


@pytest.mark.parametrize("kwargs, field", [
    ({"agent": "python:x:y", "policies": ("delete_all_reasoning",)}, "policies"),
    ({"agent": "python:nomodule"}, "agent"),
    ({"agent": "shell:ls"}, "agent"),
    ({"agent": "python:x:y", "policies": ("full", "no_such_policy")}, "policies"),
])
def test_a_bad_study_config_names_its_field(kwargs, field):
    with pytest.raises(ConfigError) as exc:
        StudyConfig(**kwargs)
    assert exc.value.field == field


def test_full_is_run_first():
    assert StudyConfig(agent="inspect:t.py@t", policies=("iclr", "full")).policies == ("full", "iclr")
    assert StudyConfig(policies=("interleaved", "drsr_gate", "full")).policies == ("full", "interleaved", "drsr_gate")


@pytest.mark.parametrize("extra, message", [
    (["--policies", "full,drsr_gate", "--model", "tiny-qwen3.5"], "--gate-scorer: given exactly when --policies "
     "holds drsr_gate"),
    (["--policies", "full,interleaved", "--gate-scorer", "g.json"], "--gate-scorer: given exactly when"),
    (["--policies", "full,drsr_gate", "--gate-scorer", "g.json"], "--model: an iclr or drsr_gate policy needs"),
    (["--policies", "full,drsr_gate", "--model", "tiny-qwen3.5", "--gate-scorer", "no/such.json"], "no/such.json"),
])
def test_a_gate_study_needs_its_scorer_and_sensor(tmp_path, monkeypatch, capsys, extra, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["interp", "study", "--upstream", "http://127.0.0.1:9/v1", "--out",
                                      str(tmp_path / "s"), "--tasks", str(_tasks(tmp_path / "tasks.jsonl")), *extra])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("lines, message", [
    (['{"task_id": "a"}', '{"task_id": "a"}'], "tasks.jsonl:2: task_id: 'a' repeated"),
    (['{"task_id": "a"}', '{"prompt": "x"}'], "tasks.jsonl:2: task_id: expected a non-blank string"),
    (['{oops'], "tasks.jsonl:1: not JSON"),
])
def test_a_bad_tasks_file_names_line_and_field(tmp_path, lines, message):
    (tmp_path / "tasks.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=message):
        read_tasks(tmp_path / "tasks.jsonl")


def test_a_python_agent_without_tasks_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["interp", "study", "--upstream", "http://127.0.0.1:9/v1", "--out",
                                      str(tmp_path / "s"), "--agent", "python:interp.serve.study:chat_agent"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code != 0 and "--tasks" in capsys.readouterr().err and not (tmp_path / "s").exists()
