"""``interp import`` end to end: every sample imports, validates and runs through extract, label, probe, patch, externalize.

Commands run in-process through typer's ``CliRunner`` (as in
tests/e2e/test_cli_commands.py) on the tiny random Qwen3.5. The samples
(``tests/data/import/``) hold every awkward case: content as a list of parts,
tool results as lists, empty thoughts, final messages with no action,
JSON-string arguments, parallel calls, redacted thinking, non-ASCII text; the
error paths (invalid JSON arguments with FILE:LINE) run through the console
entry point. Runs with empty thoughts join the analyses once #15's validator
accepts them (branch i15); until then they are reported and skipped.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from types import SimpleNamespace

import pandas as pd
import pytest

from interp.data.trajectory import load_trajectories
from interp.pipelines.cli import main

from ._support import EMPTY_REASONING_RUNS, REAL, SAMPLES, cli, empty_reasoning_valid, needs_empty_reasoning

pytestmark = pytest.mark.e2e

HAS_INSPECT = importlib.util.find_spec("inspect_ai") is not None  # the optional extra (in dev: CI has it)
TINY = "tiny-qwen3.5"
LAYERS = "3,7"
IMPORTS = {  # name: (FORMAT, INPUT, extra options)
    "openai": ("openai", SAMPLES / "openai.jsonl", []),
    "anthropic": ("auto", SAMPLES / "anthropic.jsonl", []),
    "swe-agent": ("swe-agent", SAMPLES / "swe-agent", []),
    "map": ("map", SAMPLES / "custom.jsonl", ["--map", SAMPLES / "custom_map.json"]),
    "hook": ("map", SAMPLES / "hooked.jsonl", ["--hook", f"{SAMPLES / 'custom_hook.py'}:convert"]),
    # real public samples (tests/importers/samples/README.md), sniffed
    "tau2": ("auto", REAL / "tau2" / "claude-sonnet-4-5_retail.json", []),
    "atif": ("auto", REAL / "atif" / "rfc_example", []),
    "mini-swe-agent": ("auto", REAL / "mini-swe-agent" / "mini-1.x_github_issue.traj.json", []),
    "swe-agent-real": ("auto", REAL / "swe-agent" / "gpt-4o_6e44b9__sweagenttestrepo-1c2844.traj", []),
    **({"inspect": ("auto", REAL / "inspect" / "popularity_log-read-sample.json", [])} if HAS_INSPECT else {}),
}


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """Every sample imported (``interp import``), then joined into one trajectory file."""
    root = tmp_path_factory.mktemp("import")
    outputs, joined = {}, root / "all.jsonl"
    for name, (fmt, source, options) in IMPORTS.items():
        out = root / f"{name}.jsonl"
        has_empty = name in ("openai", "anthropic", "swe-agent")
        result = cli("import", fmt, source, "--out", out, *options,
                     code=1 if has_empty and not empty_reasoning_valid() else 0)
        outputs[name] = SimpleNamespace(path=out, output=result.output)
    joined.write_text("".join(o.path.read_text(encoding="utf-8") for o in outputs.values()), encoding="utf-8")
    trajs = load_trajectories(joined)
    return SimpleNamespace(root=root, outputs=outputs, path=joined, trajs=trajs, ids=[t.task_id for t in trajs],
                           n_boundaries=sum(t.n_steps for t in trajs))


@pytest.fixture(scope="module")
def store(imported):
    path = imported.root / "store"
    cli("extract", "--trajectories", imported.path, "--store", path, "--model", TINY, "--layers", LAYERS,
        "--pooling", "last,mean_reasoning")
    return path


@pytest.fixture(scope="module")
def labels(imported):
    out = imported.root / "labels"
    cli("label", "--trajectories", imported.path, "--out", out)
    return out / "future_necessity_labels.csv"


def test_every_sample_imports_and_validates(imported):
    expected = 16 + HAS_INSPECT - (0 if empty_reasoning_valid() else len(EMPTY_REASONING_RUNS))  # 16: the hand-written runs and the real samples (IMPORTS)
    assert len(imported.ids) == len(set(imported.ids)) == expected
    assert not EMPTY_REASONING_RUNS & set(imported.ids) or empty_reasoning_valid()
    result = cli("validate", imported.path)
    assert f"{expected} trajectories" in result.output
    openai = imported.outputs["openai"].output
    assert "formats: openai" in openai and "image_url content parts x1" in openai
    assert "redacted_thinking blocks x2" in imported.outputs["anthropic"].output  # sniffed: auto
    strict = cli("validate", "--strict", imported.path)
    assert "unknown field" not in strict.output  # metadata and the importer's step fields are declared
    text = imported.path.read_text(encoding="utf-8")
    for word in ("Müller", "café", "Søren", "✅", "zoë@example.com"):  # non-ASCII kept verbatim
        assert word in text


@needs_empty_reasoning
def test_runs_with_empty_thoughts_are_imported(imported):
    assert EMPTY_REASONING_RUNS <= set(imported.ids)
    by_id = {t.task_id: t for t in imported.trajs}
    assert by_id["oa-empty-1"].steps[0].reasoning == "" and by_id["an-empty-1"].steps[1].reasoning == ""


def test_extract_label_probe_on_the_imported_runs(imported, store, labels):
    from interp.extraction.store import Store

    frame = Store(store).manifest()
    assert set(frame["status"]) == {"ok"} and len(frame) == imported.n_boundaries
    assert set(frame["task_id"]) == set(imported.ids)
    table = pd.read_csv(labels)
    assert len(table) == imported.n_boundaries - len(imported.ids)  # final boundaries have no label
    assert set(table["future_necessity"]) == {0, 1}
    out = imported.root / "probe"
    cli("probe", "--store", store, "--out", out, "--labels", labels, "--n-perm", 5, "--n-boot", 50, "--n-jobs", 1)
    doc = json.loads((out / "probe_results.json").read_text(encoding="utf-8"))
    assert 0 <= doc["auroc"] <= 1 and doc["n_excluded_final"] == len(imported.ids)


def test_patch_on_the_imported_runs(imported):
    out = imported.root / "patching"
    cli("patch", "--trajectories", imported.path, "--out", out, "--model", TINY, "--layers", LAYERS)
    doc = json.loads((out / "kl_repair.json").read_text(encoding="utf-8"))
    assert doc["n_samples"] + doc["n_excluded"] == imported.n_boundaries and doc["n_samples"] > 0
    assert all(math.isfinite(v) for v in doc["repair_mean"])


def test_externalize_on_the_imported_runs(imported):
    out = imported.root / "externalization"
    cli("externalize", "label", "--trajectories", imported.path, "--out", out, "--n-boot", 20)
    doc = json.loads((out / "externalization_labels.json").read_text(encoding="utf-8"))
    assert doc["n_boundaries"] == imported.n_boundaries


def test_real_samples_render_on_the_tiny_model(imported):
    for name in ("tau2", "atif"):
        task_id = json.loads(imported.outputs[name].path.read_text(encoding="utf-8").splitlines()[0])["task_id"]
        result = cli("render", imported.path, "--task-id", task_id, "--after-step", 2, "--model", TINY)
        assert "reasoning_block" in result.output  # the imported reasoning reaches the prompt
    for name in ("mini-swe-agent", "swe-agent-real", *(("inspect",) if HAS_INSPECT else ())):  # one per format
        task_id = json.loads(imported.outputs[name].path.read_text(encoding="utf-8").splitlines()[0])["task_id"]
        result = cli("render", imported.path, "--task-id", task_id, "--after-step", 1, "--model", TINY)
        assert "observation" in result.output


def test_import_errors_name_file_line_and_field(monkeypatch, capsys, tmp_path):
    source = SAMPLES / "openai_bad.jsonl"
    out = tmp_path / "t.jsonl"
    monkeypatch.setattr(sys, "argv", ["interp", "import", "openai", str(source), "--out", str(out)])
    with pytest.raises(SystemExit) as exc:
        main()
    stdout, stderr = capsys.readouterr()
    assert exc.value.code == 1
    assert f"{source}:2: messages[1].tool_calls[0].function.arguments: invalid JSON arguments" in stderr
    assert f"{source}: 1 runs converted, 3 skipped -> {out}" in stdout
    assert [t.task_id for t in load_trajectories(out)] == ["bad-ok"]
    monkeypatch.setattr(sys, "argv", ["interp", "import", "xml", str(source), "--out", str(out)])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2 and capsys.readouterr().err.startswith("error: unknown import format 'xml'")
