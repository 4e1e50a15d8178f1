"""``import_runs``: reading inputs, per-run problems as FILE:LINE, validation of the output, atomic writes, auto."""

from __future__ import annotations

import json
import shutil

import pytest

from interp.data.importers.reader import read_records
from interp.data.importers.registry import converter, import_runs
from interp.data.trajectory import load_trajectories

from ._support import EMPTY_REASONING_RUNS, SAMPLES, empty_reasoning_valid, needs_empty_reasoning, records

pytestmark = pytest.mark.unit

CASES = {  # format, input, options -> the task ids of the runs in it
    "openai": ("openai", SAMPLES / "openai.jsonl", {}, ["oa-code-1", "oa-airline-1", "oa-web-1", "oa-empty-1"]),
    "anthropic": ("anthropic", SAMPLES / "anthropic.jsonl", {}, ["an-office-1", "an-security-1", "an-empty-1"]),
    "swe-agent": ("swe-agent", SAMPLES / "swe-agent", {}, ["demo__calc-1", "demo__slug-2"]),
    "map": ("map", SAMPLES / "custom.jsonl", {"field_map": SAMPLES / "custom_map.json"}, ["cu-web-1", "cu-web-2"]),
    "hook": ("map", SAMPLES / "hooked.jsonl", {"hook": f"{SAMPLES / 'custom_hook.py'}:convert"}, ["hk-shell-1"]),
}


@pytest.mark.parametrize("case", CASES)
def test_every_sample_imports_and_validates(case, tmp_path):
    fmt, source, options, ids = CASES[case]
    out = tmp_path / "t.jsonl"
    report = import_runs(fmt, source, out, **options)
    expected = ids if empty_reasoning_valid() else [i for i in ids if i not in EMPTY_REASONING_RUNS]
    assert [t.task_id for t in load_trajectories(out)] == expected  # the validator of `interp validate`
    assert report.converted == len(expected) and report.skipped == len(ids) - len(expected)
    assert all("empty reasoning" in p for p in report.problems)
    assert "\\u" not in out.read_text(encoding="utf-8")  # non-ASCII written as is, never escaped


@needs_empty_reasoning
@pytest.mark.parametrize("case", CASES)
def test_runs_with_empty_thoughts_import_once_they_are_valid(case, tmp_path):
    fmt, source, options, ids = CASES[case]
    report = import_runs(fmt, source, tmp_path / "t.jsonl", strict=True, **options)
    assert report.problems == [] and report.converted == len(ids) and report.written


def test_problems_name_file_line_and_field_and_skip_only_their_run(tmp_path):
    source = SAMPLES / "openai_bad.jsonl"
    out = tmp_path / "t.jsonl"
    report = import_runs("openai", source, out)
    assert report.problems == [
        f"{source}:2: messages[1].tool_calls[0].function.arguments: invalid JSON arguments: Expecting value at "
        f"character 12 of '{{\"target\": \\'tests\\'}}'",
        f"{source}:3: (line): invalid JSON: Expecting value at column 1",
        f"{source}:4: messages[2]: tool result for call id 'c9' answers no open call of the preceding assistant "
        f"turn (open: 'c1')",
    ]
    assert report.skipped == 3 and report.reasons["invalid JSON arguments"] == 1
    assert report.summary().splitlines()[:2] == [
        f"{source}: 1 runs converted, 3 skipped -> {out}",
        "skipped: invalid JSON arguments (1); invalid JSON (1); tool result for call id _ answers no open call of "
        "the preceding assistant turn (1)"]
    assert [t.task_id for t in load_trajectories(out)] == ["bad-ok"]


def test_strict_writes_nothing_and_leaves_an_existing_output(tmp_path):
    out = tmp_path / "t.jsonl"
    out.write_text("old\n")
    report = import_runs("openai", SAMPLES / "openai_bad.jsonl", out, strict=True)
    assert report.problems and not report.written
    assert out.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]  # no temp files left


def test_duplicate_task_ids_skip_the_later_run(tmp_path):
    source = tmp_path / "dup.jsonl"
    line = (SAMPLES / "openai.jsonl").read_text(encoding="utf-8").splitlines()[0]
    source.write_text(f"{line}\n\n{line}\n", encoding="utf-8")
    report = import_runs("openai", source, tmp_path / "t.jsonl")
    assert report.converted == 1 and report.problems == [
        f"{source}:3: task_id: duplicate task_id 'oa-code-1' (first in {source}:1) (in the converted trajectory)"]


def test_auto_sniffs_each_run(tmp_path):
    mixed = tmp_path / "mixed.jsonl"
    lines = [records(SAMPLES / "openai.jsonl")[0], records(SAMPLES / "anthropic.jsonl")[0],
             json.loads((SAMPLES / "swe-agent" / "demo__calc-1.traj").read_text(encoding="utf-8")), {"foo": 1}]
    mixed.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines), encoding="utf-8")
    report = import_runs("auto", mixed, tmp_path / "t.jsonl")
    assert dict(report.formats) == {"openai": 1, "anthropic": 1, "swe-agent": 1}
    assert report.problems == [f"{mixed}:4: (record): format not recognised (auto): expected a .traj object, an "
                               f"ATIF trajectory, a tau2-bench result file, an Inspect log, or chat messages (openai, anthropic); "
                               f"name the format or use map"]
    assert [t.task_id for t in load_trajectories(tmp_path / "t.jsonl")] == ["oa-code-1", "an-office-1", "mixed-3"]


def test_a_json_array_gives_each_run_its_line(tmp_path):
    runs = records(SAMPLES / "openai.jsonl")[:3]
    runs[2]["messages"][2]["tool_calls"][0]["function"]["arguments"] = "{nope"
    source = tmp_path / "runs.json"
    source.write_text(json.dumps(runs, indent=1, ensure_ascii=False), encoding="utf-8")
    starts = [i + 1 for i, line in enumerate(source.read_text(encoding="utf-8").splitlines()) if line == " {"]
    assert [r.line for r in read_records(source)] == starts
    report = import_runs("openai", source, tmp_path / "t.jsonl")
    assert report.problems[0].startswith(f"{source}:{starts[2]}: messages[2].tool_calls[0].function.arguments: ")
    assert report.converted == 2


def test_a_json_file_with_one_run_and_a_directory_of_traj_files(tmp_path):
    one = tmp_path / "one.json"
    one.write_text(json.dumps(records(SAMPLES / "openai.jsonl")[0]["messages"]), encoding="utf-8")
    assert [(r.line, r.single) for r in read_records(one)] == [(1, True)]
    nested = tmp_path / "trajectories" / "user" / "exp"
    shutil.copytree(SAMPLES / "swe-agent", nested)
    (nested / "args.yaml").write_text("not a run")
    assert [r.file.name for r in read_records(tmp_path / "trajectories")] == ["demo__calc-1.traj", "demo__slug-2.traj"]


@pytest.mark.parametrize("fmt, options, message", [
    ("json", {}, "unknown import format 'json'"),
    ("map", {}, "format map needs exactly one of --map"),
    ("openai", {"field_map": SAMPLES / "custom_map.json"}, "--map and --hook go with format map"),
    ("map", {"hook": "json:nope"}, "has no function 'nope'"),
])
def test_bad_options_fail_before_any_work(tmp_path, fmt, options, message):
    with pytest.raises(ValueError, match=message):
        import_runs(fmt, SAMPLES / "openai.jsonl", tmp_path / "t.jsonl", **options)
    with pytest.raises(FileNotFoundError, match="input not found"):
        import_runs("openai", tmp_path / "none.jsonl", tmp_path / "t.jsonl")
    assert not list(tmp_path.iterdir())


def test_the_converter_is_the_formats_own():
    record = records(SAMPLES / "openai.jsonl")[0]
    from interp.data.importers.common import RunContext

    used, (run,) = converter("auto")(record, RunContext("f", 1, "f"))
    assert used == "openai" and run["task_id"] == "oa-code-1"


def test_a_hook_result_that_is_not_plain_json_skips_its_record(tmp_path):
    hook = tmp_path / "hook.py"
    hook.write_text("def convert(record):\n    return {'task_id': 'x', 'tags': {1, 2}}\n")
    source = tmp_path / "runs.jsonl"
    source.write_text("{}\n")
    report = import_runs("map", source, tmp_path / "t.jsonl", hook=f"{hook}:convert")
    assert report.problems == [f"{source}:1: (record): converted run is not plain JSON (Object of type set is not "
                               f"JSON serializable)"]
    assert not report.written and not (tmp_path / "t.jsonl").exists()


def test_importing_loads_no_model_code():
    import subprocess
    import sys

    code = ("import sys; from interp.data.importers.registry import import_runs; "
            "print(sorted(m for m in ('torch', 'transformers', 'transformer_lens') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_undeclared_tools_are_warnings_and_problems_under_strict(tmp_path):
    run = records(SAMPLES / "openai.jsonl")[0]
    run["tools"] = run["tools"][:1]  # only read_file declared
    source = tmp_path / "runs.jsonl"
    source.write_text(json.dumps(run) + "\n")
    report = import_runs("openai", source, tmp_path / "t.jsonl")
    assert report.converted == 1 and not report.problems
    assert report.warnings[0] == (f"{source}:1: steps[0].action.tool: tool 'run_tests' is not declared in tools "
                                  f"(in the converted trajectory)")
    report = import_runs("openai", source, tmp_path / "t2.jsonl", strict=True)
    assert report.converted == 0 and report.problems[0].startswith(f"{source}:1: steps[0].action.tool: tool")


def test_control_tokens_import_and_deep_nesting_is_a_problem_of_its_line(tmp_path):
    """Control tokens are kept (the rendering commands refuse them unless --allow-control-tokens); a line nested too
    deeply to read is one problem naming its line, not a crash."""
    run = {"id": "ct", "messages": [{"role": "system", "content": "s <|im_end|>"}, {"role": "user", "content": "do"},
                                    {"role": "assistant", "content": "done </think>"}]}
    source = tmp_path / "runs.jsonl"
    source.write_text("[" * 100_000 + "]" * 100_000 + "\n" + json.dumps(run) + "\n")
    report = import_runs("openai", source, tmp_path / "out.jsonl")
    assert (report.converted, report.skipped) == (1, 1)
    assert dict(report.reasons) == {"JSON nested too deeply to read": 1}
    assert load_trajectories(tmp_path / "out.jsonl", allow_control_tokens=True)[0].task_id == "ct"
    with pytest.raises(ValueError, match="control token"):
        load_trajectories(tmp_path / "out.jsonl")
