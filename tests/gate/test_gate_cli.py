"""``interp gate train`` / ``gate eval`` on bad harms, through the console entry point: NaN harms are refused
in the toolkit's words, naming the boundaries and how many sets, before anything is written; one-class harms
train with a warning naming the count, and ``gate eval`` says there was no measured deletion instead of
printing a null unsafe rate."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from interp.io import safe_stem
from interp.pipelines.cli import main

from .synthetic import records

pytestmark = pytest.mark.e2e


def _drsr(root: Path, recs: list[dict]) -> Path:
    """An ``interp drsr`` output folder holding ``recs`` as its parts."""
    parts = root / "drsr" / "parts" / "drsr.synthetic"
    parts.mkdir(parents=True)
    for r in recs:
        key = "{}@{}".format(r["task_id"], r["after_step"])
        (parts / f"{safe_stem(key)}.json").write_text(json.dumps(r))
    doc = {"boundaries": [{"task_id": r["task_id"], "after_step": r["after_step"]} for r in recs],
           "parts": "parts/drsr.synthetic", "model": None, "proj_dim": None}
    (root / "drsr" / "drsr.json").write_text(json.dumps(doc))
    return root / "drsr"


def _run(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["interp", *args])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out, err = capsys.readouterr()
    return code, out, err


def test_nan_harms_are_refused_by_name_before_anything_is_written(tmp_path, monkeypatch, capsys):
    good = records(12, seed=7)
    drsr = _drsr(tmp_path / "good", good)
    code, _, err = _run(monkeypatch, capsys, "gate", "train", "--drsr", str(drsr), "--out", str(tmp_path / "g"),
                        "--members", "2")
    assert code == 0, err
    bad = json.loads(json.dumps(good))
    bad[3]["sets"][0]["harm"] = float("nan")  # json writes NaN, as Python's json module reads it
    bad_drsr = _drsr(tmp_path / "bad", bad)
    code, out, err = _run(monkeypatch, capsys, "gate", "eval", "--drsr", str(bad_drsr), "--scorer",
                          str(tmp_path / "g" / "gate_scorer.json"), "--out", str(tmp_path / "e"))
    text = out + err
    assert code != 0 and "t003@4 (1 sets)" in text and "NaN" in text and "Expected 2D array" not in text, text
    assert not (tmp_path / "e" / "gate.json").exists()
    code, out, err = _run(monkeypatch, capsys, "gate", "train", "--drsr", str(bad_drsr), "--out", str(tmp_path / "t"))
    assert code != 0 and "t003@4 (1 sets)" in out + err and "no measured pool set" not in out + err
    assert not (tmp_path / "t" / "gate_scorer.json").exists()


def test_one_class_harms_warn_with_the_count_and_eval_names_no_measured_deletion(tmp_path, monkeypatch, capsys):
    recs = records(12, seed=8)
    for r in recs:
        for st in r["sets"]:
            st["harm"] = 0.001
    drsr = _drsr(tmp_path, recs)
    code, out, err = _run(monkeypatch, capsys, "gate", "train", "--drsr", str(drsr), "--out", str(tmp_path / "g"),
                          "--members", "2")
    assert code == 0, err
    assert "warning: gate train: one class:" in err and "0 unsafe" in err
    assert "abstains: 11 calibration boundaries, 18 short of the 29" in out, out
    doc = json.loads((tmp_path / "g" / "gate_scorer.json").read_text())
    assert doc["calibration"]["labels"].startswith("one class") and doc["calibration"]["abstain"] == "data"
    code, out, err = _run(monkeypatch, capsys, "gate", "eval", "--drsr", str(drsr), "--scorer",
                          str(tmp_path / "g" / "gate_scorer.json"), "--out", str(tmp_path / "g"), "--n-boot", "0")
    assert code == 0, err
    assert "no measured deletion (0 deletions)" in out and "unsafe rate None" not in out
    assert "lack of calibration data" in out and "one class" in out
