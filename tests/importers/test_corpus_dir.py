"""A directory is a corpus (issue #47): under --strict a file that is not read is a problem; a wrong format flag
names the format the file looks like in the first problem line; a per-run table (imported, refused with its
reason, drops by path) is written beside the output and reads back exactly."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interp.data.importers.registry import TABLE_SUFFIX, RunRow, import_runs, read_table, write_table
from interp.data.trajectory import load_trajectories

from ._support import REAL, cli

pytestmark = pytest.mark.unit

ATIF_TRIAL = REAL / "atif" / "gemini-cli_3d-scan-calc"
CC_SESSION = REAL / "claude-code" / "yoavf_claude-code-pomodoro-timer.jsonl"
CODEX = REAL / "codex" / "kvsankar_rollout-019e9625-802f-7e91-840a-cfe88d14117a.jsonl"
SPANS = REAL / "otel" / "any-agent" / "GOOGLE_trace.json"


def mixed_corpus(root: Path) -> Path:
    """A directory as users have them: a Harbor trial (read), a Claude Code session and an OTel trace (data files
    with no run-file name: not read)."""
    corpus = root / "corpus"
    shutil.copytree(ATIF_TRIAL, corpus / "trial-1")
    shutil.copy(CC_SESSION, corpus / "session.jsonl")
    (corpus / "spans").mkdir()
    shutil.copy(SPANS, corpus / "spans" / "trace.json")
    return corpus


def test_a_mixed_directory_under_strict_fails_naming_every_unread_file(tmp_path):
    corpus = mixed_corpus(tmp_path)
    out = tmp_path / "t.jsonl"
    report = import_runs("auto", corpus, out, strict=True)
    unread = [corpus / "session.jsonl", corpus / "spans" / "trace.json"]
    assert not report.written and not out.exists() and report.converted == 1
    assert report.problems == [f"{f}:1: (file): not read: no run-file name (name the file to import it)"
                               for f in unread]
    result = cli("import", "auto", corpus, "--out", out, "--strict", code=1)
    assert all(str(f) in result.output for f in unread)
    lenient = import_runs("auto", corpus, out)  # without --strict: imported, the unread files listed
    assert lenient.written and lenient.not_read == unread and not lenient.problems


def test_the_per_run_table_beside_the_output_lists_imported_refused_and_unread(tmp_path):
    corpus = mixed_corpus(tmp_path)
    broken = json.loads((ATIF_TRIAL / "agent" / "trajectory.json").read_text(encoding="utf-8"))
    broken["schema_version"] = "ATIF-v2.0"
    (corpus / "trial-2" / "agent").mkdir(parents=True)
    (corpus / "trial-2" / "agent" / "trajectory.json").write_text(json.dumps(broken), encoding="utf-8")
    out = tmp_path / "t.jsonl"
    report = import_runs("auto", corpus, out)
    table = out.with_name(out.name + TABLE_SUFFIX)
    assert report.written and report.table == table and f"per-run table: {table}" in report.summary()
    rows = read_table(table)
    (traj,) = load_trajectories(out)
    trial_1 = str(corpus / "trial-1" / "agent" / "trajectory.json")
    trial_2 = str(corpus / "trial-2" / "agent" / "trajectory.json")
    assert [(r.file, r.status, r.task_id) for r in rows] == [
        (trial_1, "imported", traj.task_id), (trial_2, "refused", ""),
        (str(corpus / "session.jsonl"), "not read", ""), (str(corpus / "spans" / "trace.json"), "not read", "")]
    assert rows[1].reason == "schema_version: ATIF major version 2 (ATIF-v2.0) is not supported; this importer " \
                             "reads ATIF-v1.0 ... v1.x"
    assert report.problems == [f"{trial_2}:1: {rows[1].reason}"]
    assert Counter(json.loads(rows[0].drops)) == report.dropped  # the one imported run's drops, by path


@pytest.mark.parametrize("source, flag, detected", [
    (CC_SESSION, "openai", "claude-code"),
    (CODEX, "claude-code", "codex"),
    (CC_SESSION, "anthropic", "claude-code"),
])
def test_a_session_file_given_the_wrong_flag_is_one_problem_naming_its_format(tmp_path, source, flag, detected):
    """Once 124 and 153 problem lines, none naming the format: now one, first, naming it."""
    result = cli("import", flag, source, "--out", tmp_path / "t.jsonl", code=1)
    lines = result.output.splitlines()
    assert lines[0] == (f"{source}:1: (file): looks like '{detected}', not '{flag}': a {detected} session file "
                        f"(one run); import it with {detected} or auto")
    assert sum(1 for line in lines if re.match(rf"{re.escape(str(source))}:\d+: ", line)) == 1


def test_a_record_given_the_wrong_flag_names_the_format_it_looks_like(tmp_path):
    """A Gemini API history given openai (once "unknown role 'model'"), an ATIF trial given swe-agent."""
    doc = json.loads((REAL / "gemini" / "api-history" / "codeboltai_api-request_gemini-2.5-pro.json")
                     .read_text(encoding="utf-8"))
    source = tmp_path / "history.json"
    source.write_text(json.dumps(doc["request"]["contents"]), encoding="utf-8")
    report = import_runs("openai", source, tmp_path / "t.jsonl")
    assert report.problems[0].startswith(f"{source}:1: ") and "looks like 'gemini', not 'openai' (import it with " \
                                                              "gemini or auto): " in report.problems[0]
    atif = import_runs("swe-agent", ATIF_TRIAL, tmp_path / "s.jsonl")
    assert "looks like 'atif', not 'swe-agent'" in atif.problems[0]


TEXT = st.text(max_size=40)  # any Unicode text but lone surrogates (not encodable as UTF-8)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(st.lists(st.builds(RunRow, TEXT, st.integers(1, 10**9), TEXT, TEXT,
                          st.sampled_from(["imported", "refused", "not read"]), TEXT, TEXT), max_size=6))
def test_the_per_run_table_reads_back_exactly(rows):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl.runs.csv"
        write_table(rows, path)
        assert read_table(path) == rows
