"""``interp extract ... | cat`` prints progress lines: with stdout and stderr piped (no terminal) the extraction
reports ``extract: i/N units`` lines with tokens/s and elapsed time, not an invisible rich bar."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
MINI = ROOT / "tests" / "data" / "mini.jsonl"


def test_extract_through_a_pipe_prints_progress_lines(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = (f"{sys.executable} -m interp extract --trajectories {MINI} --store {tmp_path / 'store'} "
           "--model tiny-qwen3.5 --layers 0 --conditions full,delete_all_reasoning 2>&1 | cat")
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [x for x in proc.stdout.splitlines() if x.startswith("extract: ")]
    assert [re.match(r"extract: (\d+)/2 units", x).group(1) for x in lines] == ["0", "1", "2"], proc.stdout
    assert "tok/s" in lines[-1] and "elapsed" in lines[-1] and "ETA" in lines[1]
    assert "\x1b[" not in proc.stdout  # no terminal control codes in a log
