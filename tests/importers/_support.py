"""Samples and references for the importer tests.

The samples in ``tests/data/import/`` were written by hand for these tests
(one file per format, plus ``openai_bad.jsonl`` for the error paths). The
expected trajectories in the tests are written out by hand from the samples,
never produced by the importers.

Steps with empty reasoning are valid only once the validator accepts them
(issue #15, branch ``i15``): tests that validate such runs end to end carry
:data:`needs_empty_reasoning` and skip until then.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "tests" / "data" / "import"
REAL = ROOT / "tests" / "importers" / "samples"  # real public excerpts, one folder per format; sources in SOURCES.md
DEMO = ROOT / "data" / "demo" / "trajectories.jsonl"
# runs whose converted trajectory has a step with empty reasoning (valid once #15's validator is merged)
EMPTY_REASONING_RUNS = {"oa-empty-1", "an-empty-1", "demo__slug-2"}


def records(path: Path) -> list[Any]:
    """The JSON values of a JSON Lines file, in order."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def empty_reasoning_valid() -> bool:
    """Whether this tree's validator accepts a step with empty reasoning (true once #15 is merged)."""
    from interp.data.trajectory import validate_file

    record = {"task_id": "t", "domain": "d", "system_prompt": "", "task": "x",
              "steps": [{"reasoning": "", "action": {"text": "y"}, "observation": None}]}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        path.write_text(json.dumps(record) + "\n", encoding="utf-8")
        return not validate_file(path).problems


needs_empty_reasoning = pytest.mark.skipif(
    not empty_reasoning_valid(), reason="steps with empty reasoning are valid only with #15's validator (branch i15)")


def cli(*args: Any, code: int = 0) -> Any:
    """``interp ARGS`` in-process (typer's CliRunner); fails the test with the output unless the exit code is
    ``code``."""
    import traceback

    from typer.testing import CliRunner

    from interp.pipelines.cli import app

    argv = [str(a) for a in args]
    result = CliRunner().invoke(app, argv)
    if result.exit_code != code:
        detail = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else ""
        pytest.fail(f"interp {' '.join(argv)} -> exit {result.exit_code}\n{result.output}\n{detail}", pytrace=False)
    return result
