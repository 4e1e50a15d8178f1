"""File-name, containment and writer-lock rules of ``interp.io`` (one home for each)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from interp.io import HOLD_ENV, LOCK_NAME, WriterLocked, hold_point, inside, run_units, safe_stem, writer_lock

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("a, b", [("a/b", "a_b"), ("a b", "a_b"), ("A", "a"), ("x" * 100 + "1", "x" * 100 + "2")])
def test_safe_stem_keeps_distinct_ids_distinct(a: str, b: str) -> None:
    assert safe_stem(a) != safe_stem(b)


@pytest.mark.parametrize("raw", ["../../../../x/PWNED", "..", ".", "/etc/passwd", "a\\b", "", "\x00", "é/ü", "x" * 500])
def test_safe_stem_is_one_plain_bounded_name(raw: str, tmp_path: Path) -> None:
    stem = safe_stem(raw)
    assert stem == safe_stem(raw)  # deterministic
    assert set(stem) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    assert not stem.startswith(".") and len(stem) <= 64 + 11
    assert (tmp_path / f"{stem}.json").resolve().parent == tmp_path.resolve()


def test_inside_refuses_escapes_and_symlinks(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert inside(out, out / "a" / "b.json") == (out / "a" / "b.json").resolve()
    with pytest.raises(ValueError, match="outside the output folder"):
        inside(out, out / ".." / "x.json")
    (out / "link").symlink_to(tmp_path)
    with pytest.raises(ValueError, match="outside the output folder"):
        inside(out, out / "link" / "x.json")


def test_run_units_keeps_hostile_ids_inside(tmp_path: Path) -> None:
    keys = ["../../x/PWNED", "a/b", "a_b"]
    got = run_units(keys, lambda k: {"key": k}, tmp_path / "parts", "t", progress=False)
    assert got == {k: {"key": k} for k in keys}
    files = sorted(p.name for p in (tmp_path / "parts").iterdir())
    assert len(files) == 3 and not (tmp_path / "x").exists()
    # a re-run reads each key's own file back
    again = run_units(keys, lambda k: pytest.fail("recomputed"), tmp_path / "parts", "t", progress=False)
    assert again == got


def test_lock_is_exclusive_named_and_released(tmp_path: Path) -> None:
    with writer_lock(tmp_path, command="interp extract") as lock:
        holder = json.loads(lock.read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        with pytest.raises(WriterLocked, match=rf"pid {os.getpid()} .*'interp extract' since "):
            with writer_lock(tmp_path, command="interp patch"):
                pass
    assert not (tmp_path / LOCK_NAME).exists()
    with pytest.raises(RuntimeError):
        with writer_lock(tmp_path, command="x"):
            raise RuntimeError("boom")
    assert not (tmp_path / LOCK_NAME).exists()


def test_stale_lock_of_dead_process_is_taken_over(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "command": "old",
                                                  "since": "2020-01-01T00:00:00Z"}))
    with writer_lock(tmp_path, command="new") as lock:
        assert json.loads(lock.read_text())["command"] == "new"
    assert not (tmp_path / LOCK_NAME).exists()


def test_lock_of_other_host_or_live_process_is_never_taken(tmp_path: Path) -> None:
    for holder in ({"pid": 1, "host": "elsewhere", "command": "c", "since": "s"},
                   {"pid": os.getppid(), "host": socket.gethostname(), "command": "c", "since": "s"}):
        (tmp_path / LOCK_NAME).write_text(json.dumps(holder))
        with pytest.raises(WriterLocked, match=f"pid {holder['pid']} on {holder['host']}"):
            with writer_lock(tmp_path, command="new"):
                pass
        assert json.loads((tmp_path / LOCK_NAME).read_text()) == holder


def test_hold_point_blocks_at_its_unit_until_released(tmp_path: Path, monkeypatch) -> None:
    """The interrupt tests' hook: no effect at other counts; at its count it says so and blocks on the FIFO."""
    os.mkfifo(tmp_path / "release")
    monkeypatch.setenv(HOLD_ENV, f"2:{tmp_path}")
    hold_point(1)
    assert not (tmp_path / "held").exists()
    returned = threading.Event()

    def held_run() -> None:
        hold_point(2)
        returned.set()

    thread = threading.Thread(target=held_run, daemon=True)
    thread.start()
    while not (tmp_path / "held").exists():  # written before it blocks
        assert thread.is_alive()
        thread.join(0.01)
    assert (tmp_path / "held").read_text() == str(os.getpid()) and not returned.is_set()
    with open(tmp_path / "release", "wb"):
        pass  # the writer side: the held reader sees EOF and goes on
    thread.join()
    assert returned.is_set()


@pytest.mark.parametrize("value", ["x:/tmp", "2", "2:"])
def test_hold_point_refuses_a_malformed_setting(value: str, monkeypatch) -> None:
    monkeypatch.setenv(HOLD_ENV, value)
    with pytest.raises(ValueError, match=f"INTERP_HOLD_AFTER_UNITS={value!r}: expected"):
        hold_point(1)


def test_json_results_are_compact_and_keep_every_number(tmp_path: Path) -> None:
    """Result files carry no indentation (the bytes that grew with the model's width, #40) and the same numbers:
    a list of N floats takes exactly the sum of their shortest round-trip reprs, N - 1 commas and the brackets."""
    import numpy as np

    from interp.io import atomic_write_json

    values = np.random.default_rng(0).normal(size=(3, 50))
    doc = {"coef": values, "name": "a b, c: d", "none": float("nan"), "nested": [{"k": 1}, {"k": [1.5, -2]}]}
    atomic_write_json(tmp_path / "x.json", doc)
    text = (tmp_path / "x.json").read_text(encoding="utf-8")
    assert text.endswith("}\n") and "\n" not in text[:-1] and ": " not in text.replace("a b, c: d", "")
    back = json.loads(text)
    assert back["coef"] == values.tolist() and back["none"] is None and back["nested"] == doc["nested"]
    atomic_write_json(tmp_path / "row.json", values[0])
    row = (tmp_path / "row.json").read_bytes()
    assert len(row) == sum(len(repr(float(v))) for v in values[0]) + (len(values[0]) - 1) + 2 + 1
