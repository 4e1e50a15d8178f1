"""Ray as the engine: a Ray run gives the local run's store and result files byte for byte, a worker killed
mid-unit loses only that unit (retried), a unit that keeps failing is recorded, a killed driver's re-run
resumes, and a second driver on one store is refused.

Reference: the in-process (local executor) run of the same request, compared file by file (bytes). One
local Ray per module (``ray.init(num_cpus=2)``, loopback), shut down after.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path

import pytest

from interp.data.trajectory import load_trajectories
from interp.extraction.batch import extract_to_store
from interp.extraction.extract import ExtractConfig
from interp.extraction.store import unit_name
from interp.io import HOLD_ENV, run_units
from interp.pipelines import stages
from interp.pipelines.executors import RayExecutor
from patching.config import HarmConfig, PatchConfig

ROOT = Path(__file__).resolve().parents[2]
MINI, DEMO = ROOT / "tests" / "data" / "mini.jsonl", ROOT / "data" / "demo" / "trajectories.jsonl"

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # a local Ray and model loads per worker: ~3 min on 2 CPUs

ray = pytest.importorskip("ray")

CONDITIONS = ["full", "delete_all_reasoning"]
CLI_ARGS = ["--model", "tiny-qwen3.5", "--layers", "0,3", "--pooling", "last,mean_reasoning", "--conditions",
            ",".join(CONDITIONS), "--attention", "full_attention", "--boundaries", "1,2"]


def _config() -> ExtractConfig:
    return ExtractConfig(layers=[0, 3], poolings=["last", "mean_reasoning"], attention_layers=[3, 7])


@pytest.fixture(scope="module")
def ray_cluster():
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # loopback only: the local cluster reports nothing outside
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # hooks defined here, sent by value
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def traj_file(tmp_path_factory) -> Path:
    lines = {json.loads(line)["task_id"]: line for path in (MINI, DEMO) for line in path.read_text().splitlines()
             if line.strip()}
    path = tmp_path_factory.mktemp("trajs") / "t.jsonl"
    path.write_text("".join(lines[t] + "\n" for t in ("mini-code-1", "web-002", "web-003")))
    return path


def _extract(sensor, traj_file: Path, root: Path, executor=None):
    return extract_to_store(sensor, load_trajectories(traj_file), CONDITIONS, _config(), root, boundaries=[1, 2],
                            progress=False, executor=executor,
                            load=partial(stages.sensor, "tiny-qwen3.5") if executor else None)


@pytest.fixture(scope="module")
def local_store(tiny_sensor, traj_file, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("local") / "store"
    _extract(tiny_sensor, traj_file, root)
    return root


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _assert_same_files(got: Path, ref: Path) -> None:
    a, b = _files(got), _files(ref)
    assert sorted(a) == sorted(b)
    assert [k for k in b if a[k] != b[k]] == []


def _kill_once(folder: str, target: str, key: str) -> None:
    """Before each unit (on the worker): log it; the first time ``target`` runs, publish this worker's PID
    (atomically: written, then renamed) and block until killed (no clock: it waits on an event never set)."""
    folder_path = Path(folder)
    with open(folder_path / "attempts.log", "a") as fh:
        fh.write(f"{key} {os.getpid()}\n")
    marker = folder_path / "killed-once"
    if key == target and not marker.exists():
        marker.touch()
        (folder_path / "pid.tmp").write_text(str(os.getpid()))
        os.replace(folder_path / "pid.tmp", folder_path / "pid")
        threading.Event().wait()


def test_ray_store_equals_local_and_a_killed_worker_loses_only_its_unit(ray_cluster, tiny_sensor, traj_file,
                                                                        local_store, tmp_path):
    target = unit_name("web-002", "full")
    hook = partial(_kill_once, str(tmp_path), target)
    killed: list[int] = []
    run_ended = threading.Event()

    def killer() -> None:
        """Kill the worker as soon as it publishes its PID, however long its start takes under load; give up only
        when the run itself has ended (then the assertion below says so)."""
        while not (tmp_path / "pid").exists():
            if run_ended.wait(0.05):
                return
        pid = int((tmp_path / "pid").read_text())
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    thread = threading.Thread(target=killer)
    thread.start()
    root = tmp_path / "store"
    try:
        counts = _extract(tiny_sensor, traj_file, root, RayExecutor(workers=2, retries=2, before_unit=hook))
    finally:
        run_ended.set()
        thread.join()
    assert killed, "the worker never published its PID before the run ended (the hook did not run on the target)"
    attempts = [line.split() for line in (tmp_path / "attempts.log").read_text().splitlines()]
    keys = [k for k, _ in attempts]
    assert keys.count(target) == 2 and all(keys.count(k) == 1 for k in set(keys) - {target})  # only it re-ran
    assert [pid for k, pid in attempts if k == target][0] == str(killed[0])
    assert counts["units"] == 6 and not (root / "failed.json").exists()
    _assert_same_files(root, local_store)  # features bit for bit, manifest, store.json


def test_ray_resumes_and_recomputes_nothing_done(ray_cluster, tiny_sensor, traj_file, local_store, tmp_path):
    root = tmp_path / "store"
    _extract(tiny_sensor, traj_file, root)
    for path in sorted((root / "units").glob("*.json"))[3:]:
        path.unlink()  # a driver killed after 3 units
    stamps = {p.name: p.stat().st_mtime_ns for p in (root / "units").glob("*.json")}
    counts = _extract(tiny_sensor, traj_file, root, RayExecutor(workers=2))
    assert counts["skipped_done"] == 3
    assert {p: (root / "units" / p).stat().st_mtime_ns for p in stamps} == stamps
    _assert_same_files(root, local_store)


def test_harm_and_kl_repair_parts_on_ray_equal_local(ray_cluster, tiny_sensor, traj_file, tmp_path):
    trajs = load_trajectories(traj_file)
    load = partial(stages.sensor, "tiny-qwen3.5")
    boundaries = ["mini-code-1@2", "web-003@1"]
    sites = [("resid_pre", 0), ("resid_pre", 5)]
    for where, executor in (("local", None), ("ray", RayExecutor(workers=2))):
        stages.harm(tiny_sensor, trajs, tmp_path / where / "harm", HarmConfig(boundaries=boundaries, max_k=2, budget=2),
                    executor=executor, load=load if executor else None)
        stages.patch(tiny_sensor, trajs, tmp_path / where / "patch", PatchConfig(task_ids=["mini-code-1"]), sites=sites,
                     executor=executor, load=load if executor else None)
    _assert_same_files(tmp_path / "ray", tmp_path / "local")


def _always_fails(_ctx, key: str) -> dict:
    if key == "bad":
        raise RuntimeError("this unit always fails")
    return {"key": key}


def test_a_unit_that_keeps_failing_is_recorded_after_its_retries(ray_cluster, tmp_path):
    with pytest.raises(RuntimeError, match="1 unit\\(s\\) failed .*bad: .*this unit always fails"):
        run_units(["a", "bad", "c"], _always_fails, tmp_path, "demo", progress=False, load=lambda: None,
                  executor=RayExecutor(workers=2, retries=1))
    failed = json.loads((tmp_path / "failed.json").read_text())
    assert list(failed) == ["bad"] and failed["bad"]["attempts"] == 2
    assert "this unit always fails" in failed["bad"]["error"]
    assert len(list(tmp_path.glob("a-*.json"))) == 1 and len(list(tmp_path.glob("c-*.json"))) == 1


# ------------------------------------------------------------------------------------------------ drivers


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "COLUMNS": "200"}


def test_killed_driver_rerun_resumes_and_a_second_driver_is_refused(traj_file, local_store, tmp_path):
    root = tmp_path / "store"
    args = ["extract", "--trajectories", str(traj_file), "--store", str(root), *CLI_ARGS]
    hold = tmp_path / "hold"
    hold.mkdir()
    os.mkfifo(hold / "release")  # the driver blocks on it after its 2nd unit (interp.io.hold_point), until killed
    driver = subprocess.Popen([sys.executable, "-m", "interp", *args], env={**_env(), HOLD_ENV: f"2:{hold}"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 1800  # only turns a hang into a failure: the hold, not a clock, stops the driver
    while not (hold / "held").exists() and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert driver.poll() is None and (hold / "held").exists(), driver.communicate()[1][-3000:]
    # a second driver on the same store is refused, naming the first
    second = subprocess.run([sys.executable, "-m", "interp", *args], env=_env(), capture_output=True, text=True,
                            timeout=1800)
    assert second.returncode == 2 and f"pid {driver.pid}" in " ".join(second.stderr.split()), second.stderr[-2000:]
    driver.send_signal(signal.SIGKILL)
    driver.communicate(timeout=60)
    stamps = {p.name: p.stat().st_mtime_ns for p in (root / "units").glob("*.json")}
    assert len(stamps) == 2 and (root / ".lock").exists()  # the dead driver's lock is left behind
    rerun = subprocess.run([sys.executable, "-m", "interp", *args], env=_env(), capture_output=True, text=True,
                           timeout=1800)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "'skipped_done': 2" in rerun.stdout
    assert {p: (root / "units" / p).stat().st_mtime_ns for p in stamps} == stamps  # nothing done was recomputed
    _assert_same_files(root, local_store)


def test_sweep_on_ray_equals_the_local_sweep(ray_cluster, tmp_path, demo_trajectories, sweep_config):
    from interp.pipelines.sweep import run_sweep

    traj = tmp_path / "t.jsonl"
    traj.write_text("".join(json.dumps(t.to_json()) + "\n" for t in demo_trajectories[:6]))
    summaries = {}
    for kind in ("local", "ray"):
        path = sweep_config(tmp_path / f"{kind}.toml", traj, tmp_path / kind)
        summaries[kind] = run_sweep(path, executor=kind)
    for store in (tmp_path / "local" / "stores").iterdir():
        _assert_same_files(tmp_path / "ray" / "stores" / store.name, store)
    for results in (tmp_path / "local" / "cells").rglob("probe_results.json"):
        got = tmp_path / "ray" / results.relative_to(tmp_path / "local")
        a, b = (json.loads(x.read_text()) for x in (got, results))
        assert {k: v for k, v in a.items() if k != "elapsed_s"} == {k: v for k, v in b.items() if k != "elapsed_s"}
    assert (summaries["ray"]["worker"] != f"pid {os.getpid()}").all()  # the probes ran on Ray workers
    assert (summaries["local"]["worker"] == f"pid {os.getpid()}").all()


def test_workers_asking_for_gpus_the_cluster_lacks_are_refused(ray_cluster, tmp_path):
    with pytest.raises(ValueError, match=r"the Ray cluster has 0 GPU\(s\); a worker asks for 1"):
        run_units(["a"], _always_fails, tmp_path, "demo", progress=False, load=lambda: None,
                  executor=RayExecutor(num_gpus=1))
