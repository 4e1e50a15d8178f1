"""Killed runs resume to the uninterrupted result; a second writer is refused; Ctrl-C says how far a run got.

Each test starts ``python -m interp ...`` in a subprocess on the tiny model,
holds it after a random number of units (``interp.io.hold_point``: the child
writes ``held`` and blocks on a FIFO, so it cannot finish before the signal
lands, however loaded the machine), SIGKILLs it there, resumes the same
command in-process (``cli.main``, the tiny model cached) and compares every
result file with an uninterrupted in-process run: tensors bit for bit, JSON
value for value. While the held run owns the output folder's lock, a second
writer is refused with a message naming it; after the kill its lock is stale
(dead PID) and the resume takes it over. No step waits on a clock: the
deadlines below only turn a hang into a failure.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from interp.io import HOLD_ENV
from interp.pipelines.cli import main

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "data" / "demo" / "trajectories.jsonl"
STATES = ROOT / "data" / "demo" / "states.jsonl"
TINY = ["--model", "tiny-qwen3.5"]
SUBSET = (0, 4, 12, 16)  # demo lines: code, office, security and web tasks


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("inputs")
    lines = DEMO.read_text().splitlines()
    (root / "trajs.jsonl").write_text("".join(lines[i] + "\n" for i in SUBSET))
    ids = {json.loads(lines[i])["task_id"] for i in SUBSET}
    states = [line for line in STATES.read_text().splitlines() if json.loads(line)["task_id"] in ids][:2]
    assert len(states) == 2
    (root / "states.jsonl").write_text("".join(line + "\n" for line in states))
    return root


def _run(args: list[str], monkeypatch, capsys) -> tuple[int, str]:
    """``interp ARGS`` in-process through ``cli.main``: (exit code, stderr)."""
    monkeypatch.setattr(sys, "argv", ["interp", *map(str, args)])
    capsys.readouterr()
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    return code, capsys.readouterr().err


def _start(args: list[str], hold: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", HOLD_ENV: hold}
    return subprocess.Popen([sys.executable, "-m", "interp", *map(str, args)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(proc: subprocess.Popen, done: callable, what: str, timeout: float = 1800) -> bool:
    """Poll until ``done()``; False when the process ended first (the deadline only turns a hang into a failure)."""
    end = time.monotonic() + timeout
    while not done():
        if proc.poll() is not None:
            return False
        if time.monotonic() > end:
            proc.kill()
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)
    return True


def _files(root: Path, pattern: str) -> list[Path]:
    return sorted(p for p in root.glob(pattern) if not p.name.startswith("."))


def _kill_and_resume(args: list[str], out: Path, unit_glob: str, n_units: int, seed: int, monkeypatch, capsys,
                     interrupt: int = signal.SIGKILL) -> subprocess.CompletedProcess | None:
    """Start ``args`` in a subprocess held after a random number of units, check the lock refuses a second writer,
    signal it at the hold, then resume in-process. Returns the killed process' (code, stderr)."""
    rng = random.Random(seed)
    kill_after = rng.randint(1, max(1, n_units - 1))
    hold = out.parent / f"{out.name}-hold"
    hold.mkdir()
    os.mkfifo(hold / "release")
    proc = _start(args, f"{kill_after}:{hold}")
    try:
        held = _wait_for(proc, lambda: (hold / "held").exists(), f"the hold after {kill_after} units")
        assert held, f"ended before its hold: exit {proc.returncode}\n{proc.communicate()[1][-2000:]}"
        assert len(_files(out, unit_glob)) == kill_after  # held between units: exactly this many on disk
        code, err = _run(args, monkeypatch, capsys)  # a second writer while the held run owns the lock
        assert code == 2 and f"pid {proc.pid}" in err and "another run is writing here" in err, err
        proc.send_signal(interrupt)
        stdout, stderr = proc.communicate(timeout=1800)  # reaped: its PID is dead, its lock stale
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    killed = subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)
    assert proc.returncode in (-interrupt, 130), f"not stopped at its hold: exit {proc.returncode}\n{stderr[-2000:]}"
    code, err = _run(args, monkeypatch, capsys)
    assert code == 0, err
    assert not (out / ".lock").exists()
    assert not list(out.glob("**/.*.tmp"))  # the killed run's temporary files were cleared
    return killed


def _same_json(a: Path, b: Path) -> None:
    assert json.loads(a.read_text()) == json.loads(b.read_text()), f"{a} differs from {b}"


@pytest.mark.parametrize("seed", [1])
def test_extract_killed_resumes_to_identical_tensors(inputs, tmp_path, seed, monkeypatch, capsys, cached_model):
    args = ["extract", "--trajectories", inputs / "trajs.jsonl", "--layers", "3,7", "--pooling",
            "last,mean_latest_step", "--conditions", "full,delete_all_reasoning", *TINY]
    ref, out = tmp_path / "ref", tmp_path / "killed"
    assert _run([*args, "--store", ref], monkeypatch, capsys)[0] == 0
    _kill_and_resume([*args, "--store", out], out, "units/*.json", 2 * len(SUBSET), seed, monkeypatch, capsys)
    names = [p.name for p in _files(ref / "units", "*")]
    assert names == [p.name for p in _files(out / "units", "*")] and len(names) == 4 * len(SUBSET)
    for name in names:
        if name.endswith(".json"):
            _same_json(ref / "units" / name, out / "units" / name)
        else:
            a, b = load_file(ref / "units" / name), load_file(out / "units" / name)
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    assert (ref / "manifest.csv").read_text() == (out / "manifest.csv").read_text()


def test_patch_killed_resumes_to_identical_repairs(inputs, tmp_path, monkeypatch, capsys, cached_model):
    args = ["patch", "--trajectories", inputs / "trajs.jsonl", "--layers", "3,7", *TINY]
    ref, out = tmp_path / "ref", tmp_path / "killed"
    assert _run([*args, "--out", ref], monkeypatch, capsys)[0] == 0
    _kill_and_resume([*args, "--out", out], out, "parts/*/*.json", len(SUBSET), 2, monkeypatch, capsys)
    _same_json(ref / "kl_repair.json", out / "kl_repair.json")


def test_harm_killed_resumes_to_identical_harms(inputs, tmp_path, monkeypatch, capsys, cached_model):
    args = ["harm", "--trajectories", inputs / "trajs.jsonl", "--max-k", "2", "--budget", "2", *TINY]
    ref, out = tmp_path / "ref", tmp_path / "killed"
    assert _run([*args, "--out", ref], monkeypatch, capsys)[0] == 0
    _kill_and_resume([*args, "--out", out], out, "parts/*/*.json", len(SUBSET), 3, monkeypatch, capsys)
    _same_json(ref / "harm.json", out / "harm.json")


def test_intervene_killed_resumes_to_identical_continuations(inputs, tmp_path, monkeypatch, capsys, cached_model):
    args = ["intervene", "--states", inputs / "states.jsonl", "--trajectories", inputs / "trajs.jsonl",
            "--conditions", "full,delete_all_reasoning,keep_latest_reasoning", "--samples", "1",
            "--max-new-tokens", "8", *TINY]
    ref, out = tmp_path / "ref", tmp_path / "killed"
    assert _run([*args, "--out", ref], monkeypatch, capsys)[0] == 0
    _kill_and_resume([*args, "--out", out], out, "units/*/*.json", 6, 4, monkeypatch, capsys)
    _same_json(ref / "interventions.json", out / "interventions.json")


def test_ctrl_c_says_how_far_the_run_got(inputs, tmp_path, monkeypatch, capsys, cached_model):
    out = tmp_path / "patch"
    args = ["patch", "--trajectories", inputs / "trajs.jsonl", "--layers", "3,7", "--out", out, *TINY]
    killed = _kill_and_resume(args, out, "parts/*/*.json", len(SUBSET), 5, monkeypatch, capsys,
                              interrupt=signal.SIGINT)
    assert killed.returncode == 130, killed.stderr
    last = [line for line in killed.stderr.splitlines() if line.strip()][-1]
    assert last.startswith("interrupted after ") and last.endswith(f"/{len(SUBSET)} units; re-run to resume"), \
        killed.stderr
    kill_after = random.Random(5).randint(1, len(SUBSET) - 1)
    assert last == f"interrupted after {kill_after}/{len(SUBSET)} units; re-run to resume", killed.stderr
    assert "Traceback" not in killed.stderr
