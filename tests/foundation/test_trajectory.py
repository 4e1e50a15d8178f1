"""Trajectory files: loading, round-trip, block splitting and line-exact validation errors."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import warnings
from collections import Counter
from pathlib import Path

import pytest

from interp.data.trajectory import (
    Action,
    Trajectory,
    TrajectoryError,
    get_trajectory,
    join_blocks,
    load_trajectories,
    split_blocks,
    validate_file,
)

from ._support import DEMO, MINI, mini_record

pytestmark = pytest.mark.unit

# ---------------------------------------------------------------------------------------------
# split_blocks


@pytest.mark.parametrize("text, blocks", [
    ("one block", ["one block"]),
    ("line one\nline two", ["line one\nline two"]),  # a single newline does not split
    ("a\n\nb", ["a", "b"]),
    ("a\n\n\n\nb", ["a", "b"]),  # the empty piece between two separators is not a block
    ("a\n\n\nb", ["a", "\nb"]),  # literal split: the third newline starts the next block
    ("a\n   \nb", ["a\n   \nb"]),  # a line of spaces does NOT split (only a literal "\n\n" does)
    ("a\n \t \nb", ["a\n \t \nb"]),  # ... nor of tabs
    ("a\n\n  \n\nb", ["a", "b"]),  # a whitespace-only piece is not a block
    ("\n\n  \na\n\nb\n\n \n", ["  \na", "b"]),  # leading/trailing whitespace-only pieces dropped
    ("  padded  \n\n\tb", ["  padded  ", "\tb"]),  # blocks are kept verbatim, never stripped
    ("def f():\n    return 1", ["def f():\n    return 1"]),
    ("    indented first line\n    second", ["    indented first line\n    second"]),
    ("", []),
    ("   \n\n \t\n", []),
    # CRLF: "\r\n\r\n" holds no literal "\n\n": no split
    ("a\r\n\r\nb", ["a\r\n\r\nb"]),
    ("a\r\nb\n\nc", ["a\r\nb", "c"]),
    ("a\r\rb", ["a\r\rb"]),
])
def test_split_blocks_hand_cases(text, blocks):
    assert split_blocks(text) == blocks


def test_split_blocks_join_round_trip_seeded():
    """split(join(blocks)) == blocks; blocks are verbatim slices; replace_blocks keeps everything else."""
    import random

    from interp.data.trajectory import block_char_spans, replace_blocks

    rng = random.Random(0)
    alphabet = ["a", "b", " ", "\t", "\n", "\n\n", "x\ny", "é", "  ", "\r\n"]
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        blocks = split_blocks(text)
        assert all(b.strip() and "\n\n" not in b for b in blocks), repr(text)
        assert [text[s:e] for s, e in block_char_spans(text)] == blocks
        assert split_blocks(join_blocks(blocks)) == blocks
        assert replace_blocks(text, {}) == (text if blocks else "")
        if blocks:
            k = rng.randrange(len(blocks))
            skipped = replace_blocks(text, {k: "[SKIP]"})
            assert split_blocks(skipped) == [("[SKIP]" if i == k else b) for i, b in enumerate(blocks)]
            removed = replace_blocks(text, {k: None})
            assert split_blocks(removed) == [b for i, b in enumerate(blocks) if i != k]


def test_step_blocks_and_observations(mini_trajectory):
    t = mini_trajectory
    assert [len(s.blocks) for s in t.steps] == [2, 3, 2, 1]
    assert t.steps[1].blocks[2] == "If it calls datetime.now() without tz, that is the bug."
    assert [s.observations for s in t.steps] == [
        ["FAILED tests/test_dates.py::test_utc - AssertionError: 09:00 != 08:00"],
        ["def parse_date(s):\n    return datetime.fromtimestamp(int(s))\n"],
        ["wrote 2 lines", "1 passed"],
        [],
    ]


# ---------------------------------------------------------------------------------------------
# loading and round-trip


def test_mini_round_trip_is_exact():
    raw = mini_record()
    traj = Trajectory.from_json(raw)
    assert traj.to_json() == raw
    assert json.dumps(traj.to_json(), sort_keys=True) == json.dumps(raw, sort_keys=True)


def test_unknown_top_level_fields_pass_through_untouched():
    raw = mini_record()
    extras = {"provenance": {"run": 7, "nested": [1, {"a": None, "b": [True, 2.5]}]},
              "zz_unicode": "Größe 😀", "empty": {}, "nothing": None, "list": [[], [[]]]}
    raw.update(extras)
    traj = Trajectory.from_json(copy.deepcopy(raw))
    assert dict(traj.extra) == extras
    out = traj.to_json()
    for k, v in extras.items():
        assert out[k] == v and type(out[k]) is type(v)
    assert out == raw
    again = Trajectory.from_json(json.loads(json.dumps(out)))
    assert again == traj


def test_demo_round_trip(corpus):
    """Every record of the corpus: from_json(to_json(t)) == t, through real JSON text."""
    name, trajs = corpus
    for t in trajs:
        assert Trajectory.from_json(json.loads(json.dumps(t.to_json()))) == t, t.task_id
    # the file's own records are reproduced exactly (fields present in the file)
    path = MINI if name == "mini" else DEMO
    for line, t in zip((ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()), trajs):
        raw = json.loads(line)
        out = t.to_json()
        for key, value in raw.items():
            if key == "annotations":
                # a boundary written without "note" comes back with note "" (the dataclass default)
                got = out.get(key, {}).get("boundaries", [])
                want = [{"note": "", **b} for b in value.get("boundaries", [])]
                assert got == want, t.task_id
            else:
                assert out[key] == value, (t.task_id, key)


def test_minimal_record_gains_defaults_and_is_stable():
    raw = mini_record()
    for key in ("tools", "final_answer", "outcome", "annotations", "source", "provenance"):
        raw.pop(key)
    t = Trajectory.from_json(raw)
    out = t.to_json()
    assert out["tools"] == [] and out["final_answer"] is None and out["outcome"] == {}
    assert "annotations" not in out and "source" not in out
    assert Trajectory.from_json(out) == t and Trajectory.from_json(out).to_json() == out


@pytest.mark.parametrize("action", [
    {"tool": "run_tests", "arguments": {}},
    {"calls": [{"tool": "run_tests", "arguments": {}}]},  # a one-call parallel action keeps its shape
    {"calls": [{"tool": "read_file", "arguments": {"path": "a"}}, {"tool": "run_tests", "arguments": {}}]},
    {"text": "done"},
    {"text": ""},
])
def test_action_shapes_round_trip(action):
    a = Action.from_json(action)
    assert a.to_json() == action
    assert a.is_text == ("text" in action)
    assert a.parallel == ("calls" in action)


def test_trajectory_is_frozen(mini_trajectory):
    with pytest.raises(dataclasses.FrozenInstanceError):
        mini_trajectory.task = "x"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        mini_trajectory.steps[0].reasoning = "x"  # type: ignore[misc]
    assert isinstance(mini_trajectory.steps, tuple)


def test_to_json_does_not_alias_the_frozen_trajectory():
    raw = mini_record()
    t = Trajectory.from_json(raw)
    out = t.to_json()
    out["provenance"]["run"] = 99
    raw["provenance"]["run"] = 98
    assert t.extra["provenance"] == {"run": 7}


def test_unknown_step_fields_pass_through():
    raw = mini_record()
    raw["steps"][0]["timestamp"] = "2025-01-01T00:00:00Z"
    out = Trajectory.from_json(copy.deepcopy(raw)).to_json()
    assert out["steps"][0].get("timestamp") == "2025-01-01T00:00:00Z"


def test_get_trajectory(mini_trajectory):
    assert get_trajectory([mini_trajectory], "mini-code-1") is mini_trajectory
    with pytest.raises(KeyError, match="mini-code-1"):
        get_trajectory([mini_trajectory], "nope")


def test_annotation_lookup(mini_trajectory):
    a = mini_trajectory.annotation(2)
    assert (a.after_step, a.future_necessity, a.externalization_gap, a.note) == (2, 1, 1, "fix only in reasoning")
    assert mini_trajectory.annotation(5) is None


# ---------------------------------------------------------------------------------------------
# validation of malformed files: one line per problem, FILE:LINE: field.path: message


def _rec(task_id: str, edit=None) -> dict:
    raw = mini_record()
    raw["task_id"] = task_id
    if edit is not None:
        edit(raw)
    return raw


def _set(path: str, value):
    """An edit setting a dotted/indexed path (e.g. ``steps.0.reasoning``) to value; DELETE removes it."""
    def edit(raw):
        keys = [int(k) if k.isdigit() else k for k in path.split(".")]
        obj = raw
        for k in keys[:-1]:
            obj = obj[k]
        if value is DELETE:
            del obj[keys[-1]]
        else:
            obj[keys[-1]] = value
    return edit


DELETE = object()
LINE_RE = re.compile(r"^(?P<file>.+?):(?P<line>\d+): (?P<field>\S+): (?P<msg>.+)$")

# (id, raw line or record edit, field path, message pattern)
BAD_CASES = [
    ("bad-json", '{"task_id": "x", bad json', "(line)", r"^invalid JSON: .+ at column \d+$"),
    ("not-an-object", "[1, 2, 3]", "(record)", r"expected a JSON object, got list"),
    ("steps-not-list", _set("steps", "oops"), "steps", r"'oops' is not of type 'array'"),
    ("steps-empty", _set("steps", []), "steps", r"should be non-empty|too short"),
    ("reasoning-int", _set("steps.0.reasoning", 5), "steps[0].reasoning", r"5 is not of type 'string'"),
    ("task-id-int", _set("task_id", 12), "task_id", r"12 is not of type 'string'"),
    ("task-empty", _set("task", ""), "task", r"should be non-empty|too short"),
    ("observation-int", _set("steps.2.observation", 5), "steps[2].observation", r"wrong type"),
    ("missing-task", _set("task", DELETE), "task", r"'task' is a required property"),
    ("missing-observation", _set("steps.1.observation", DELETE), "steps[1].observation",
     r"'observation' is a required property"),
    ("after-step-zero", _set("annotations.boundaries.0.after_step", 0), "annotations.boundaries[0].after_step",
     r"less than the minimum of 1"),
    ("after-step-too-large", _set("annotations.boundaries.3.after_step", 5), "annotations.boundaries[3].after_step",
     r"^5 out of range 1\.\.4$"),
    ("after-step-duplicate", _set("annotations.boundaries.2.after_step", 2), "annotations.boundaries[2].after_step",
     r"^duplicate boundary 2$"),
    ("label-not-binary", _set("annotations.boundaries.0.future_necessity", 2),
     "annotations.boundaries[0].future_necessity", r"is not one of \[0, 1\]"),
    ("action-tool-name", _set("steps.1.action", {"tool_name": "read_file", "arguments": {}}), "steps[1].action",
     r"^unknown action shape \{\"tool_name\": \"read_file\".*expected"),
    ("action-extra-key", _set("steps.0.action", {"tool": "run_tests", "arguments": {}, "id": "c1"}),
     "steps[0].action", r"^unknown action shape"),
    ("action-args-list", _set("steps.0.action", {"tool": "run_tests", "arguments": []}), "steps[0].action",
     r"^unknown action shape"),
    ("parallel-too-few-obs", _set("steps.2.observation", ["wrote 2 lines"]), "steps[2].observation",
     r"^1 observations for 2 parallel calls$"),
    ("parallel-too-many-obs", _set("steps.2.observation", ["a", "b", "c"]), "steps[2].observation",
     r"^3 observations for 2 parallel calls$"),
]

# Not problems by default: (id, edit, field, message pattern, severity). A tool that is not declared is a
# warning (a problem under strict); a step without reasoning is valid, a note.
SOFT_CASES = [
    ("reasoning-empty", _set("steps.0.reasoning", ""), "steps[0].reasoning", r"^no reasoning", "notes"),
    ("reasoning-blank", _set("steps.3.reasoning", "  \n\n \t\n"), "steps[3].reasoning", r"^no reasoning",
     "notes"),
    ("undeclared-tool", _set("steps.0.action.tool", "deploy"), "steps[0].action.tool",
     r"^tool 'deploy' is not declared in tools$", "warnings"),
    ("undeclared-parallel-tool", _set("steps.2.action.calls.1.tool", "deploy"), "steps[2].action.calls[1].tool",
     r"^tool 'deploy' is not declared in tools$", "warnings"),
]


def _write(tmp_path: Path, lines: list, name: str = "t.jsonl", newline: str = "\n") -> Path:
    path = tmp_path / name
    text = newline.join(x if isinstance(x, str) else json.dumps(x) for x in lines) + newline
    path.write_bytes(text.encode("utf-8"))
    return path


def _bad_line(case, task_id: str):
    _, what, _, _ = case
    return what if isinstance(what, str) else _rec(task_id, what)


def _parse(line: str) -> dict:
    m = LINE_RE.match(line)
    assert m, f"not FILE:LINE: field: message -> {line!r}"
    return m.groupdict()


def _field_ok(got_field: str, got_msg: str, want_field: str) -> bool:
    """The problem names want_field: as its path, or (missing field) as its parent path + the name in the message."""
    if got_field == want_field:
        return True
    parent, _, leaf = want_field.rpartition(".")
    return got_field == (parent or "(record)") and f"'{leaf}'" in got_msg


@pytest.mark.parametrize("case", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_each_problem_is_one_exact_line(case, tmp_path):
    _, _, want_field, pattern = case
    # line 1 valid, line 2 blank (still counted), line 3 bad, line 4 valid
    path = _write(tmp_path, [_rec("ok-1"), "", _bad_line(case, "bad-3"), _rec("ok-4")])
    report = validate_file(path)
    assert len(report.problems) == 1, report.problems
    p = _parse(report.problems[0])
    assert (p["file"], p["line"]) == (str(path), "3")
    assert _field_ok(p["field"], p["msg"], want_field), p
    assert re.search(pattern, p["msg"]), p["msg"]
    assert report.n_trajectories == 2  # the valid lines still count
    assert report.domains == {"code": 2}


@pytest.mark.parametrize("case", SOFT_CASES, ids=[c[0] for c in SOFT_CASES])
def test_warnings_and_notes_load_and_strict_makes_warnings_problems(case, tmp_path):
    _, edit, want_field, pattern, severity = case
    path = _write(tmp_path, [_rec("ok-1"), _rec("soft-2", edit)])
    for strict in (False, True):
        report = validate_file(path, strict=strict)
        soft = getattr(report, severity) if not (strict and severity == "warnings") else report.problems
        assert len(soft) == 1, (strict, soft)
        p = _parse(soft[0])
        assert (p["file"], p["line"], p["field"]) == (str(path), "2", want_field)
        assert re.search(pattern, p["msg"]), p["msg"]
        others = [x for name in ("problems", "warnings", "notes") for x in getattr(report, name)
                  if not (x is soft[0])]
        assert others == [], others
        assert report.n_trajectories == (1 if strict and severity == "warnings" else 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trajs = load_trajectories(path)
    assert [t.task_id for t in trajs] == ["ok-1", "soft-2"]
    assert len(caught) == (severity == "warnings")
    if severity == "notes":
        step = trajs[1].steps[int(want_field.split("[")[1].split("]")[0])]
        assert step.blocks == []


def test_duplicate_task_id(tmp_path):
    path = _write(tmp_path, [_rec("a"), _rec("b"), _rec("a")])
    report = validate_file(path)
    assert report.problems == [f"{path}:3: task_id: duplicate task_id 'a' (first on line 1)"]
    assert report.n_trajectories == 2


def test_all_bad_lines_of_a_file_are_reported(tmp_path):
    lines, expected = [], []
    for i, case in enumerate(BAD_CASES):
        lines.append(_rec(f"ok-{i}"))
        lines.append(_bad_line(case, f"bad-{i}"))
        expected.append((len(lines), case))
    lines.append(_rec("ok-0"))  # a duplicate id at the very end
    path = _write(tmp_path, lines)
    report = validate_file(path)
    assert len(report.problems) == len(BAD_CASES) + 1
    parsed = [_parse(p) for p in report.problems]
    for p, (lineno, case) in zip(parsed, expected):
        assert p["file"] == str(path) and int(p["line"]) == lineno, (p, case[0])
        assert _field_ok(p["field"], p["msg"], case[2]), (p, case[0])
        assert re.search(case[3], p["msg"]), (p, case[0])
    assert parsed[-1]["line"] == str(len(lines)) and parsed[-1]["field"] == "task_id"
    assert report.n_trajectories == len(BAD_CASES)
    assert report.n_steps == 4 * len(BAD_CASES)

    with pytest.raises(TrajectoryError) as exc:
        load_trajectories(path)
    assert exc.value.problems == report.problems
    assert str(exc.value).startswith(f"{len(report.problems)} problem(s) in trajectory input:")
    assert report.problems[0] in str(exc.value)


def test_several_schema_problems_of_one_record_are_all_reported(tmp_path):
    def edit(raw):
        raw["steps"][0]["reasoning"] = 5
        raw["steps"][3]["action"] = {"tool_name": "x"}
        raw["domain"] = ""
    path = _write(tmp_path, [_rec("a", edit)])
    fields = sorted(_parse(p)["field"] for p in validate_file(path).problems)
    assert fields == ["domain", "steps[0].reasoning", "steps[3].action"]


def test_crlf_file_loads_with_exact_line_numbers(tmp_path):
    path = _write(tmp_path, [_rec("a"), _bad_line(BAD_CASES[4], "b"), _rec("c")], newline="\r\n")
    report = validate_file(path)
    assert [(_parse(p)["line"], _parse(p)["field"]) for p in report.problems] == [("2", "steps[0].reasoning")]
    assert report.n_trajectories == 2


def test_non_utf8_line_is_reported_with_its_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    good = json.dumps(_rec("a")).encode()
    bad = json.dumps(_rec("b", _set("task", "caf\u00e9")), ensure_ascii=False).encode("latin-1")  # é -> 0xE9
    path.write_bytes(good + b"\n" + bad + b"\n")
    report = validate_file(path)
    assert [_parse(p)["line"] for p in report.problems] == ["2"]
    assert report.n_trajectories == 1


def test_missing_file(tmp_path):
    path = tmp_path / "nope.jsonl"
    report = validate_file(path)
    assert report.problems == [f"{path}: file not found"] and report.n_trajectories == 0
    with pytest.raises(TrajectoryError, match="file not found"):
        load_trajectories(path)


def test_tools_undeclared_check_is_off_without_tool_list(tmp_path):
    """Documented behaviour: with no `tools` list, any tool name is accepted."""
    path = _write(tmp_path, [_rec("a", lambda r: (r.pop("tools"), _set("steps.0.action.tool", "deploy")(r)))])
    assert validate_file(path).problems == []


def test_unknown_fields_are_collected_not_problems(tmp_path):
    path = _write(tmp_path, [_rec("a"), _rec("b", _set("zzz", 1))])
    report = validate_file(path)
    assert report.problems == []
    assert report.unknown_fields == [
        f"{path}:1: provenance: unknown field (kept and passed through)",
        f"{path}:2: provenance: unknown field (kept and passed through)",
        f"{path}:2: zzz: unknown field (kept and passed through)",
    ]


# ---------------------------------------------------------------------------------------------
# summary counts, computed independently from the raw JSON


def _independent_counts(path: Path) -> tuple[int, int, int, dict[str, int]]:
    raws = [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    n_steps = sum(len(r["steps"]) for r in raws)
    # a boundary b is a point after b completed steps, b = 1..n_steps (the ones conditions accept)
    n_boundaries = sum(len(range(1, len(r["steps"]) + 1)) for r in raws)
    return len(raws), n_steps, n_boundaries, dict(Counter(r["domain"] for r in raws))


def test_validate_file_summary_counts(corpus, tmp_path):
    name, _ = corpus
    path = MINI if name == "mini" else DEMO
    report = validate_file(path)
    assert report.problems == []
    n, steps, boundaries, domains = _independent_counts(path)
    assert (report.n_trajectories, report.n_steps, report.n_boundaries, report.domains) == (
        n, steps, boundaries, domains)
    doms = ", ".join(f"{d}={k}" for d, k in sorted(domains.items()))
    assert report.summary() == f"{path}: {n} trajectories, {steps} steps, {boundaries} boundaries; domains: {doms}"


def test_validate_summary_on_a_mixed_file(tmp_path):
    def two_steps(raw):
        raw["steps"] = raw["steps"][:2]
        raw["annotations"]["boundaries"] = raw["annotations"]["boundaries"][:2]
    lines = [_rec("a"), _rec("b", lambda r: r.update(domain="web")), _bad_line(BAD_CASES[2], "c"),
             _rec("d", two_steps)]
    report = validate_file(_write(tmp_path, lines))
    assert len(report.problems) == 1
    assert (report.n_trajectories, report.n_steps, report.n_boundaries) == (3, 10, 10)
    assert report.domains == {"code": 2, "web": 1}
