"""A store on a file system that fills up mid-extraction: one line naming the file and the space needed, no
half-written unit, and a resume after space is freed gives the store an uninterrupted run gives.

The real case mounts a small tmpfs (needs root, as CI and the sessions run; skipped elsewhere); the injected
case raises ENOSPC at the flush of the third file written, on any machine.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from interp.extraction.store import Store, load_tensors
from interp.pipelines.cli import main

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "data" / "demo" / "trajectories.jsonl"


def _extract(store: Path, trajectories: Path, monkeypatch, capsys) -> tuple[int, str]:
    """Run ``interp extract`` in-process; (exit code, stderr without progress lines)."""
    monkeypatch.setattr(sys, "argv", ["interp", "extract", "--trajectories", str(trajectories), "--store", str(store),
                                      "--model", "tiny-qwen3.5", "--layers", "all"])
    capsys.readouterr()
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error")]
    return code, "\n".join(lines)


def _assert_whole(store: Path) -> None:
    """Every unit's tensors have their JSON and no temporary file is left."""
    units = store / "units"
    assert not list(units.glob(".*.tmp"))
    tensors = {p.stem for p in units.glob("*.safetensors")}
    assert tensors <= {p.stem for p in units.glob("*.json")}


def _same_store(a: Path, b: Path) -> None:
    fa, fb = Store(a).manifest(), Store(b).manifest()
    cols = [c for c in fa.columns if c != "forward"]
    pd.testing.assert_frame_equal(fa[cols].reset_index(drop=True), fb[cols].reset_index(drop=True))
    for path in sorted((a / "units").glob("*.safetensors")):
        ta, tb = load_tensors(path), load_tensors(b / "units" / path.name)
        assert ta.keys() == tb.keys()
        for key in ta:
            torch.testing.assert_close(ta[key], tb[key], rtol=0, atol=0)


@pytest.fixture
def few(tmp_path) -> Path:
    """Four demo trajectories (several units, so the disk fills between two of them)."""
    path = tmp_path / "few.jsonl"
    path.write_text("".join(DEMO.read_text().splitlines(keepends=True)[:4]))
    return path


@pytest.fixture
def reference(tmp_path, few, cached_model, monkeypatch, capsys) -> Path:
    store = tmp_path / "reference"
    assert _extract(store, few, monkeypatch, capsys)[0] == 0
    return store


def test_full_tmpfs_then_resume(tmp_path, few, reference, cached_model, monkeypatch, capsys):
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=120k", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a size-limited tmpfs here (needs root)")
    try:
        code, err = _extract(mount / "store", few, monkeypatch, capsys)
        assert code == 1
        assert len(err.splitlines()) == 1 and "No space left on device" in err, err
        assert str(mount / "store" / "units") in err and "bytes to write" in err and "free" in err, err
        _assert_whole(mount / "store")
        done = len(list((mount / "store" / "units").glob("*.json")))
        assert 0 < done < 4, "the disk must fill between two units for this test to mean anything"
        subprocess.run(["mount", "-o", "remount,size=32m", str(mount)], check=True)
        assert _extract(mount / "store", few, monkeypatch, capsys)[0] == 0
        _assert_whole(mount / "store")
        _same_store(mount / "store", reference)
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_injected_enospc_then_resume(tmp_path, few, reference, cached_model, monkeypatch, capsys):
    real, calls = os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 3:  # store.json, unit 1's tensors, then unit 1's JSON fails
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    code, err = _extract(tmp_path / "store", few, monkeypatch, capsys)
    monkeypatch.setattr(os, "fsync", real)
    assert code == 1 and "No space left on device" in err and "bytes to write" in err, err
    _assert_whole(tmp_path / "store")
    assert not list((tmp_path / "store" / "units").glob("*.safetensors")), "unit 1's tensors without their JSON"
    assert _extract(tmp_path / "store", few, monkeypatch, capsys)[0] == 0
    _same_store(tmp_path / "store", reference)
