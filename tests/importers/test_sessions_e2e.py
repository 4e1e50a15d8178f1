"""Session files and chat recordings through the CLI: ``interp import`` (no code), ``validate --strict``, ``render`` and ``extract``.

One real sample per new format (tests/importers/samples/claude-code,
.../codex, .../openhands, .../gemini) runs on the tiny random Qwen3.5, in-process through typer's
``CliRunner`` as in tests/importers/test_import_e2e.py.
"""

from __future__ import annotations

import json

import pytest

from interp.data.importers.registry import FORMATS
from interp.data.trajectory import load_trajectories

from ._support import REAL, cli

pytestmark = pytest.mark.e2e

TINY = "tiny-qwen3.5"
SAMPLES = {"claude-code": REAL / "claude-code" / "d-kimuson_1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl",
           "codex": REAL / "codex" / "acidicsoil_rollout-2025-11-17T15-30-28-019a93b9-f380-7600-98ff-940e6b99603c.jsonl",
           "openhands": REAL / "openhands" / "openhands-runtime-tests_wrong_initial_state.json",
           "gemini": REAL / "gemini" / "kvsankar_session-dcbe78d3.json"}


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """Each sample imported with ``auto`` into its own file, then joined."""
    root = tmp_path_factory.mktemp("sessions")
    outputs = {}
    for fmt, source in SAMPLES.items():
        out = root / f"{fmt}.jsonl"
        result = cli("import", "auto", source, "--out", out, "--strict")
        assert f"formats: {fmt} 1" in result.output
        outputs[fmt] = out
    joined = root / "all.jsonl"
    joined.write_text("".join(p.read_text(encoding="utf-8") for p in outputs.values()), encoding="utf-8")
    return root, outputs, joined


def test_import_help_lists_every_format():
    result = cli("import", "--help")
    text = " ".join(result.output.split())
    for fmt in FORMATS:
        assert fmt in text, fmt


def test_imported_sessions_validate_strictly_and_render_their_reasoning(imported):
    _, outputs, joined = imported
    result = cli("validate", "--strict", joined)
    assert "4 trajectories" in result.output and "unknown field" not in result.output
    for fmt, path in outputs.items():
        (traj,) = load_trajectories(path)
        b = next(i for i, s in enumerate(traj.steps, start=1) if s.reasoning)
        rendered = cli("render", joined, "--task-id", traj.task_id, "--after-step", b, "--model", TINY)
        assert "reasoning_block" in rendered.output  # the imported reasoning reaches the prompt
        assert traj.steps[b - 1].reasoning.split("\n")[0][:40] in rendered.output


def test_extract_runs_on_the_imported_sessions(imported):
    from interp.extraction.store import Store

    root, _, joined = imported
    store = root / "store"
    cli("extract", "--trajectories", joined, "--store", store, "--model", TINY, "--layers", "3,7",
        "--pooling", "last,mean_reasoning")
    frame = Store(store).manifest()
    trajs = load_trajectories(joined)
    assert set(frame["status"]) == {"ok"} and len(frame) == sum(t.n_steps for t in trajs)
    assert set(frame["task_id"]) == {t.task_id for t in trajs}
    assert json.loads(SAMPLES["codex"].read_text(encoding="utf-8").splitlines()[0])["payload"]["id"] in set(
        frame["task_id"])
