"""``interp annotate`` and ``interp labels agree`` refuse bad input with one line, before anything is written."""

from __future__ import annotations

import sys

import pytest

from interp.pipelines.cli import main
from tests.annotation._support import record, step, write_jsonl

pytestmark = pytest.mark.e2e


@pytest.fixture()
def refused(monkeypatch, capsys):
    """``refused(*args) -> the one error line`` of a command that must exit 2 without a traceback."""
    def run(*args):
        monkeypatch.setattr(sys, "argv", ["interp", *map(str, args)])
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main()
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        assert exc.value.code == 2 and "Traceback" not in err and len(lines) == 1, err
        return lines[0]
    return run


@pytest.mark.parametrize("args, words", [
    (["--trajectories", "nope.jsonl", "--labels", "a.csv", "--annotator", "a"], ["nope.jsonl"]),
    (["--trajectories", "runs.jsonl", "--labels", "a.csv", "--annotator", "a", "--task", "z"], ["--task", "z"]),
    (["--trajectories", "runs.jsonl", "--labels", "a.csv", "--annotator", " "], ["--annotator"]),
    (["--trajectories", "runs.jsonl", "--labels", "a.csv", "--annotator", "a", "--port", "70000"], ["--port"]),
    (["--trajectories", "runs.jsonl", "--labels", "a.csv", "--annotator", "a", "--adjudicate", "x.csv"],
     ["--adjudicate", "two"]),
    (["--trajectories", "runs.jsonl", "--labels", "a.csv", "--annotator", "a", "--adjudicate", "bad.csv",
      "--adjudicate", "bad.csv"], ["bad.csv:2", "after_step"]),
    (["--trajectories", "runs.jsonl", "--labels", "sub", "--annotator", "a"], ["--labels", "folder"]),
])
def test_annotate_refuses(refused, tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "runs.jsonl", [record("t", [step(1), step(2)])])
    (tmp_path / "bad.csv").write_text("task_id,after_step,externalization_gap\nt,9,1\n")
    (tmp_path / "sub").mkdir()
    line = refused("annotate", *args)
    assert all(w in line for w in words), line
    assert not list(tmp_path.glob("*.annotate")) and not (tmp_path / "a.csv").exists()


def test_agree_refuses(refused, tmp_path):
    (tmp_path / "a.csv").write_text("task_id,after_step,future_necessity\nt,1,1\n")
    (tmp_path / "b.csv").write_text("task_id,after_step,future_necessity\nt,1,2\n")
    assert "b.csv:2: future_necessity" in refused("labels", "agree", tmp_path / "a.csv", tmp_path / "b.csv")
    assert "missing.csv" in refused("labels", "agree", tmp_path / "a.csv", tmp_path / "missing.csv")
    assert "--field" in refused("labels", "agree", tmp_path / "a.csv", tmp_path / "a.csv", "--field", "x")
