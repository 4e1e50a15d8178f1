"""The whole conformance corpus through the CLI: every real sample (tests/importers/samples/) imported with ``auto``
and ``--strict``, validated strictly, rendered at every run's last boundary and extracted at every boundary on the
tiny random Qwen3.5 (issue #36: each file through import, validate, render and extract, not one per format; 40 files).

The field-by-field comparisons with independent readers live in test_conformance.py, test_otel_real.py and the
per-format tests; this module checks that what they compare also runs through the analyses.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from interp.data.trajectory import load_trajectories
from interp.sensor.limits import DEFAULT_MAX_TOKENS

from ._support import REAL, cli

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TINY = "tiny-qwen3.5"
# Samples that are not an importable run on purpose, each tested for its refusal where it is kept:
# a Codex rollout with no assistant turn (test_codex.py), the content-less Microsoft Agent Framework trace and
# Arize's single-span attribute maps, which tests wrap in an exporter envelope (test_otel*.py).
NOT_RUNS = {"simonw_rollout-019b64e5-57fa-7463-b644-fba7e456f905.jsonl"}
OTEL_TRACES = ("any-agent", "veadk")


def corpus() -> list[Path]:
    """Every real sample that holds runs: files, ATIF run folders, exported OTel traces."""
    found: list[Path] = []
    for folder in sorted(p for p in REAL.iterdir() if p.is_dir()):
        if folder.name == "atif":
            found += sorted(p for p in folder.iterdir() if p.is_dir())  # Harbor trials and tbench's folder
        elif folder.name == "otel":
            found += sorted(f for name in OTEL_TRACES for f in (folder / name).iterdir() if f.suffix == ".json")
        else:
            found += sorted(f for f in folder.iterdir() if f.is_file() and f.name != "SOURCES.md"
                            and f.name not in NOT_RUNS)
    return found


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """Each sample imported (``auto --strict``) into its own file, then joined."""
    root = tmp_path_factory.mktemp("corpus")
    joined = root / "all.jsonl"
    parts = []
    for i, source in enumerate(corpus()):
        out = root / f"{i:02d}.jsonl"
        result = cli("import", "auto", source, "--out", out, "--strict", "--id-prefix", f"{i:02d}-")  # ids repeat
        # across producers (Inspect's samples are 1, 2, ...)
        assert "converted" in result.output or "formats:" in result.output, (source, result.output)
        assert out.stat().st_size > 0, source
        parts.append(out.read_text(encoding="utf-8"))
    joined.write_text("".join(parts), encoding="utf-8")
    return root, joined


def test_the_corpus_is_every_format(imported):
    formats = {p.relative_to(REAL).parts[0] for p in corpus()}
    assert formats == {p.name for p in REAL.iterdir() if p.is_dir()}
    assert len(corpus()) >= 40


def test_every_imported_run_validates_strictly_and_renders(imported):
    _, joined = imported
    trajs = load_trajectories(joined)
    result = cli("validate", "--strict", joined)
    assert f"{len(trajs)} trajectories" in result.output
    for traj in trajs:
        rendered = cli("render", joined, "--task-id", traj.task_id, "--after-step", traj.n_steps, "--model", TINY)
        last = traj.steps[-1]
        if last.reasoning.strip():
            assert "reasoning_block" in rendered.output, traj.task_id


def test_extract_runs_at_every_boundary_of_the_corpus(imported):
    from interp.extraction.store import Store

    root, joined = imported
    store = root / "store"
    cli("extract", "--trajectories", joined, "--store", store, "--model", TINY, "--layers", "3,7",
        "--pooling", "last,mean_reasoning")
    frame = Store(store).manifest()
    trajs = load_trajectories(joined)
    assert len(frame) == sum(t.n_steps for t in trajs)
    assert set(frame["task_id"]) == {t.task_id for t in trajs}
    skipped = frame[frame["status"] != "ok"]
    assert set(skipped["status"]) <= {"skipped"}  # over-long renders are skipped and recorded, never truncated:
    assert (skipped["n_tokens"] > DEFAULT_MAX_TOKENS).all(), skipped[["task_id", "n_tokens", "reason"]].head()
    ok = frame[frame["status"] == "ok"]
    assert set(ok["task_id"]) == {t.task_id for t in trajs}  # every run has boundaries that ran
    assert len(ok) > 0.8 * len(frame)
