"""The ``interp`` command line, run as a user runs it: a subprocess of ``python -m interp``.

Output is piped (not a terminal), with ``COLUMNS=80``: what a user gets from
``interp ... > out.txt`` or in CI logs. Each command runs once per test
session (shared by the xdist workers) and several tests read its result.
Content checks ignore whitespace; separate tests pin the exact-line expectations.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from interp.data.conditions import apply_condition
from interp.sensor.models import SPECS, load_tokenizer
from interp.data.render import render
from interp.data.trajectory import load_trajectories, validate_file

from ._support import MINI, ROOT, mini_record

pytestmark = pytest.mark.e2e

MARKER_RE = re.compile(r"⟦(?P<kind>\w+)(?: step=(?P<step>\d+))?(?: #(?P<block>\d+))? tokens (?P<start>\d+):(?P<end>\d+)⟧")
ROW_RE = re.compile(r"^│ (?P<kind>\w+)\s+│\s+(?P<n>\d+) │$", re.M)


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1", **(env or {})}
    full_env.pop("FORCE_COLOR", None)
    return subprocess.run([sys.executable, "-m", "interp", *args], capture_output=True, text=True, cwd=ROOT,
                          env=full_env, timeout=300)


@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory, worker_id):
    """A folder shared by the xdist workers of this session (each CLI command runs once, ~2 s of imports)."""
    base = tmp_path_factory.getbasetemp()
    return base if worker_id == "master" else base.parent


@pytest.fixture(scope="session")
def cli(shared_dir):
    """``cli(key, make)``: ``make()`` -> (CompletedProcess, extra) once per session, shared across workers."""
    from filelock import FileLock

    def get(key: str, make):
        out = shared_dir / f"cli-{key}.json"
        with FileLock(str(out) + ".lock"):
            if not out.exists():
                proc, extra = make()
                out.write_text(json.dumps({"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr,
                                           "extra": extra}))
        d = json.loads(out.read_text())
        return subprocess.CompletedProcess([], d["rc"], d["stdout"], d["stderr"]), d["extra"]
    return get


def _problem_file(tmp: Path) -> tuple[Path, list]:
    """A file with a long path and two bad lines (lines 2 and 4) among valid ones."""
    folder = tmp / "a_rather_long_directory_name_for_trajectory_files" / "second_level"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trajectories_with_problems.jsonl"
    good = [mini_record() for _ in range(3)]
    for i, r in enumerate(good):
        r["task_id"] = f"ok-{i}"
    bad1 = mini_record()
    bad1["task_id"] = "bad-1"
    bad1["steps"][0]["reasoning"] = 5
    bad2 = mini_record()
    bad2["task_id"] = "bad-2"
    bad2["steps"][1]["action"] = {"tool_name": "read_file", "arguments": {}}
    lines = [good[0], bad1, good[1], bad2, good[2]]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path, lines


@pytest.fixture(scope="module")
def problem_run(cli, shared_dir):
    def make():
        folder = shared_dir / "cli-problem"
        folder.mkdir(exist_ok=True)
        path, _ = _problem_file(folder)
        return run_cli("validate", str(path)), str(path)
    proc, path = cli("problem", make)
    return Path(path), proc


@pytest.fixture(scope="module")
def strict_run(cli):
    return cli("strict", lambda: (run_cli("validate", "--strict", str(MINI)), None))[0]


@pytest.fixture(scope="module")
def clean_run(cli):
    return cli("clean", lambda: (run_cli("validate", str(MINI)), None))[0]


@pytest.fixture(scope="module")
def unknown_spec_run(cli):
    return cli("unknown-spec", lambda: (run_cli("render", str(MINI), "--task-id", "mini-code-1", "--after-step",
                                                "2", "--model", "no-such-model"), None))[0]


@pytest.fixture(scope="module")
def missing_path_run(cli, shared_dir):
    missing = shared_dir / "a_checkpoint_directory_that_does_not_exist_anywhere"

    def make():
        return run_cli("render", str(MINI), "--task-id", "mini-code-1", "--after-step", "2",
                       "--model", "qwen3.5-9b", "--model-path", str(missing)), None
    return missing, cli("missing-path", make)[0]


@pytest.fixture(scope="module")
def models_run(cli, shared_dir):
    # Pin the 9B spec to "not available" whatever the local HF cache holds.
    no9b = shared_dir / "no-9b-here"
    return cli("models", lambda: (run_cli("models", env={"INTERP_QWEN35_9B_PATH": str(no9b)}), None))[0]


def _flat(text: str) -> str:
    return " ".join(text.split())


def _squash(text: str) -> str:
    """All whitespace removed: compares content whatever the console did to line breaks."""
    return "".join(text.split())


# ---------------------------------------------------------------------------------------------
# validate


def test_validate_clean_file_prints_the_summary(clean_run):
    proc = clean_run
    assert proc.returncode == 0, proc.stderr
    report = validate_file(MINI)
    raw = json.loads(MINI.read_text().splitlines()[0])
    n = len(raw["steps"])
    assert _squash(proc.stdout) == _squash(f"{MINI}: 1 trajectories, {n} steps, {n} boundaries; domains: code=1")
    assert _squash(proc.stdout) == _squash(report.summary())
    assert proc.stderr == ""


def test_validate_malformed_file_reports_every_problem(problem_run):
    path, proc = problem_run
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    expected = validate_file(path).problems
    assert [p.split(": ", 2)[0:2] for p in expected] == [[f"{path}:2", "steps[0].reasoning"],
                                                         [f"{path}:4", "steps[1].action"]]
    squashed = _squash(proc.stderr)
    for p in expected:
        assert _squash(p) in squashed
    assert squashed.endswith(_squash("2 problem(s); 3 valid trajectories"))
    assert proc.stdout == ""


def test_validate_prints_exactly_one_line_per_problem(problem_run):
    path, proc = problem_run
    assert proc.stderr.splitlines() == [*validate_file(path).problems, "2 problem(s); 3 valid trajectories"]


def test_validate_strict_reports_unknown_fields(strict_run):
    proc = strict_run
    assert proc.returncode == 1
    assert _squash(f"{MINI}:1: provenance: unknown field (kept and passed through)") in _squash(proc.stderr)
    assert len(proc.stderr.splitlines()) == 1  # one problem: its line is the whole output


def test_validate_soft_findings_exit_0_and_strict_lists_notes(tmp_path):
    """A step without reasoning is valid (a note, shown under --strict); an undeclared tool is a warning
    (exit 0) and a problem under --strict (exit 1)."""
    raw = mini_record()
    raw.pop("provenance", None)
    raw["steps"][1]["reasoning"] = ""
    raw["steps"][0]["action"]["tool"] = "deploy"
    path = tmp_path / "soft.jsonl"
    path.write_text(json.dumps(raw) + "\n", encoding="utf-8")
    plain = run_cli("validate", str(path))
    assert plain.returncode == 0, plain.stderr
    assert plain.stderr.splitlines() == [f"warning: {path}:1: steps[0].action.tool: tool 'deploy' is not declared "
                                         "in tools"]
    strict = run_cli("validate", "--strict", str(path))
    assert strict.returncode == 1
    assert strict.stderr.splitlines() == [
        f"{path}:1: steps[0].action.tool: tool 'deploy' is not declared in tools",
        f"note: {path}:1: steps[1].reasoning: no reasoning (the step acts without reasoning blocks; valid)"]
    raw["steps"][0]["action"]["tool"] = "run_tests"
    path.write_text(json.dumps(raw) + "\n", encoding="utf-8")
    notes_only = run_cli("validate", "--strict", str(path))
    assert notes_only.returncode == 0, notes_only.stderr
    assert notes_only.stderr.splitlines() == [
        f"note: {path}:1: steps[1].reasoning: no reasoning (the step acts without reasoning blocks; valid)"]


# ---------------------------------------------------------------------------------------------
# render


def _markers(stdout: str) -> list[tuple]:
    return [(m["kind"], int(m["step"]) if m["step"] else None, int(m["block"]) if m["block"] else None,
             int(m["start"]), int(m["end"])) for m in MARKER_RE.finditer(stdout)]


EMOJI_OBS = "slice a[1:100:2] -> status :ok:"


@pytest.fixture(scope="module")
def render_run(cli, shared_dir):
    """``interp render`` of a mini copy (step 1's observation holds rich emoji codes) at b=2 under
    hide_observation with the tiny (native template) tokenizer, and the same render in-process."""
    spec, condition, b = "tiny-qwen3.5", "hide_observation", 2
    raw = mini_record()
    raw["steps"][0]["observation"] = EMOJI_OBS
    path = shared_dir / "cli-render-mini.jsonl"

    def make():
        SPECS[spec].fetch()
        path.write_text(json.dumps(raw) + "\n", encoding="utf-8")
        return run_cli("render", str(path), "--task-id", raw["task_id"], "--after-step", str(b),
                       "--condition", condition, "--model", spec), None
    proc, _ = cli("render", make)
    tok = load_tokenizer(spec)
    traj = load_trajectories(path)[0]
    edited, log = apply_condition(condition, traj, b, counter=lambda s: len(tok(s, add_special_tokens=False).input_ids))
    return proc, render(edited, b, tok), log


def test_render_prints_segment_markers_and_token_table(render_run):
    proc, rendered, log = render_run
    assert proc.returncode == 0, proc.stderr
    assert _markers(proc.stdout) == [(s.kind, s.step, s.block, s.start, s.end) for s in rendered.segments]
    table = {m["kind"]: int(m["n"]) for m in ROW_RE.finditer(proc.stdout)}
    assert table == rendered.tokens_per_kind()
    assert f"{rendered.n_tokens} tokens" in _flat(proc.stdout)
    assert log.edits
    assert _squash(f"edit log: {len(log.edits)} edits, {log.chars_removed} chars / {log.tokens_removed} tokens") \
        in _squash(proc.stdout)


def test_render_prints_every_piece(render_run):
    """Whitespace aside, the marked-up output holds the prompt text, and each piece after its marker.

    """
    proc, rendered, _ = render_run
    body = _squash(MARKER_RE.sub("", proc.stdout))
    pos = 0
    for part in rendered.text.split(EMOJI_OBS):
        found = body.find(_squash(part), pos)
        assert found >= 0, part[:80]
        pos = found + len(_squash(part))
    chunks = MARKER_RE.split(proc.stdout)
    texts = chunks[6::6]  # split() yields text + 5 groups per marker
    assert len(texts) == len(rendered.segments)
    for seg, printed in zip(rendered.segments, texts):
        piece = rendered.text[seg.char_start:seg.char_end]
        if piece != EMOJI_OBS:
            assert _squash(printed).startswith(_squash(piece)), seg


def test_render_prints_the_prompt_verbatim(render_run):
    proc, rendered, _ = render_run
    body = MARKER_RE.sub("", proc.stdout)
    for part in rendered.text.split(EMOJI_OBS):  # the emoji observation is the other bug's
        assert part in body


def test_render_does_not_replace_emoji_codes(render_run):
    proc, _, _ = render_run
    assert proc.returncode == 0, proc.stderr
    assert _squash(EMOJI_OBS) in _squash(MARKER_RE.sub("", proc.stdout))


# ---------------------------------------------------------------------------------------------
# models and error handling


def test_models_lists_the_three_specs(models_run):
    proc = models_run
    assert proc.returncode == 0, proc.stderr
    rows = re.findall(r"^│ (\S+)\s+│ (yes|no)\b", proc.stdout, re.M)
    assert [r[0] for r in rows] == ["smollm2-135m", "tiny-qwen3.5", "qwen3.5-9b"]
    assert rows == [(name, "yes" if spec.resolve() else "no") for name, spec in SPECS.items()
                    if name != "qwen3.5-9b"] + [("qwen3.5-9b", "no")]
    assert "Any local HF directory" in proc.stdout


def test_models_shows_the_full_how_to_get_hint(models_run):
    assert "INTERP_QWEN35_9B_PATH" in models_run.stdout
    assert "--allow-download" not in models_run.stdout  # no command accepts it


def test_models_names_the_bound_kernels(models_run):
    """No fla or causal-conv1d here: the tiny hybrid calls transformers' torch code; SmolLM2 has no such layers."""
    out = _squash(models_run.stdout)
    assert _squash("│ tiny-qwen3.5 │") in out and _squash("Gated-DeltaNet: torch; conv: torch") in out
    assert (_squash("none (no Gated-DeltaNet layers)") in out) == SPECS["smollm2-135m"].available()


def test_unknown_spec_is_a_clear_error_with_exit_2(unknown_spec_run):
    proc = unknown_spec_run
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    flat = _flat(proc.stderr)
    assert flat.startswith("error: unknown model spec 'no-such-model'")
    for name in SPECS:
        assert name in flat


def test_missing_model_path_is_a_clear_error_with_exit_2(missing_path_run):
    missing, proc = missing_path_run
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    flat = _flat(proc.stderr)
    assert flat.startswith("error: --model-path")
    assert "no config.json" in flat
    assert _squash(str(missing)) in _squash(proc.stderr)


def test_model_errors_are_one_line(unknown_spec_run, missing_path_run):
    for proc in (unknown_spec_run, missing_path_run[1]):
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr

