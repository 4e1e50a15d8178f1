"""Label files exact to the byte: every kind (hand labels, adjudication, review, judge, rule labels) goes through one
writer and one reader; any id, note, rationale and model name reads back as written, and no cell a spreadsheet
opens starts with a formula character."""

from __future__ import annotations

import csv
import io
import json
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from interp.annotation.judge import CSV_FIELDS as JUDGE_FIELDS
from interp.annotation.judge import JudgeConfig, run_judge
from interp.annotation.server import open_app, parse_body, plan
from interp.annotation.session import CSV_FIELDS as SESSION_FIELDS
from interp.annotation.session import read_annotator_csv
from interp.data.labels import (
    labels_csv_text,
    labels_from_table,
    parse_labels_csv,
    read_label_table,
    read_labels_csv,
    write_labels_csv,
)
from interp.data.trajectory import validate_file
from interp.pipelines.cli import app
from tests.annotation._stub_llm import StubLLM
from tests.annotation._support import record, step, write_jsonl

pytestmark = pytest.mark.unit

G, Y = "externalization_gap", "future_necessity"
_SESSION = [f.name for f in SESSION_FIELDS if f.name not in ("task_id", "after_step")]
# the columns of every label file kind, as their writers lay them out (label columns first)
KINDS = {
    "hand": [G, Y, *(c for c in _SESSION if c not in (G, Y, "adjudicated", "reviewed", "reviewed_<field>"))],
    "adjudication": [G, Y, *(c for c in _SESSION if c not in (G, Y, "reviewed", "reviewed_<field>"))],
    "review": [G, Y, *(c for c in _SESSION if c not in (G, Y, "adjudicated", "reviewed_<field>")),
               f"reviewed_{G}", f"reviewed_{Y}"],
    "judge": [G, Y, *(f.name for f in JUDGE_FIELDS if f.name not in ("task_id", "after_step", G, Y))],
}
FORMULA = ("=", "+", "-", "@", "\t", "\r")
HOSTILE = "\r\n\",' =+-@\t\u200b\u200c\u200d\u2060\u202e\u2066\u2028\x85\ufeff\x00\x1b\u00a0"
# texts of hostile characters (CR, LF, quotes, spaces, formula starts, zero-width, bidi, controls) and any other
# (surrogates aside: not UTF-8)
TEXT = st.text(st.one_of(st.sampled_from(HOSTILE), st.characters(exclude_categories=["Cs"])), max_size=8)


def raw_cells(text: str) -> list[list[str]]:
    """The cells as a spreadsheet gets them: parsed, nothing unguarded."""
    return list(csv.reader(io.StringIO(text, newline="")))


@settings(max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck))
@given(ids=st.lists(TEXT.filter(bool), min_size=1, max_size=3, unique=True), text=TEXT, other=TEXT,
       values=st.lists(st.sampled_from([0, 1, None]), min_size=2, max_size=2))
def test_any_text_round_trips_through_every_label_file_kind(ids, text, other, values):
    for kind, columns in KINDS.items():
        texts = [c for c in columns if c not in (G, Y, "suggestions", "adjudicated", f"reviewed_{G}", f"reviewed_{Y}")]
        rows = [{"task_id": t, "after_step": b, G: values[0], Y: values[1],
                 **{c: (text if i % 2 else other) for i, c in enumerate(texts)}}
                for b, t in enumerate(ids, start=1)]
        written = labels_csv_text(rows, ["task_id", "after_step", *columns])
        header, read = parse_labels_csv(written, f"{kind}.csv")
        assert header == ["task_id", "after_step", *columns]
        assert [r for _, r in read] == [{c: "" if row.get(c) is None else str(row[c]) for c in header}
                                        for row in rows], kind
        for name, value in zip((G, Y), values):
            expected = {(t, b): value for b, t in enumerate(ids, start=1) if value is not None}
            assert labels_from_table(header, read, f"{kind}.csv", name) == expected
        for cells in raw_cells(written)[1:]:
            assert not any(cell.startswith(FORMULA) for cell in cells), (kind, cells)
            assert len(cells) == len(header)


def test_a_carriage_return_stays_inside_its_cell_and_formulas_stay_guarded(tmp_path):
    """The issue's file: a CR in a task id and a note, then a formula; the file reads back exactly."""
    rows = [{"task_id": "a\rb", "after_step": 1, G: 1, "note": "x\ry"}, {"task_id": "c", "after_step": 2, G: 0,
                                                                        "note": "=1+1"}]
    path = write_labels_csv(tmp_path / "l.csv", rows, G, ["note"])
    assert read_labels_csv(path, G) == {("a\rb", 1): 1, ("c", 2): 0}
    assert [r["note"] for _, r in read_label_table(path)[1]] == ["x\ry", "=1+1"]
    assert b'"a\rb"' in path.read_bytes() and b"'=1+1" in path.read_bytes()


@pytest.mark.parametrize("task_id", [" code-001", "code-001 ", " =1+1", "\u200bcode-001"])
def test_ids_with_spaces_are_kept_exactly_by_every_reader(tmp_path, task_id):
    """An id starting or ending with a space (or invisible) is written and read as given; status, agree, review
    and adjudication accept the file."""
    runs = write_jsonl(tmp_path / "runs.jsonl", [record(task_id, [step(t) for t in range(1, 4)]),
                                                 record("other", [step(t) for t in range(1, 3)])])
    rows = [{"task_id": task_id, "after_step": b, G: b % 2, "annotator": who} for b in (1, 2, 3)
            for who in ["x"]]
    a = write_labels_csv(tmp_path / "a.csv", rows, G, ["annotator"])
    b = write_labels_csv(tmp_path / "b.csv", [{**r, G: 1, "annotator": "y"} for r in rows], G, ["annotator"])
    assert read_labels_csv(a, G, trajectories=None) == {(task_id, 1): 1, (task_id, 2): 0, (task_id, 3): 1}
    assert " =1+1" != task_id or b"' =1+1" in a.read_bytes()
    runner = CliRunner()
    for args in (["labels", "status", str(a), str(b), "--trajectories", str(runs)],
                 ["labels", "agree", str(a), str(b), "--trajectories", str(runs), "--n-boot", "20"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    adj = open_app(plan(runs, tmp_path / "adj.csv", "carol", "g", [a, b])).session
    assert adj.queue and {i.task_id for i in adj.queue} == {task_id}
    rev = open_app(plan(runs, tmp_path / "rev.csv", "carol", "g", review=a)).session
    assert {i.task_id for i in rev.queue} == {task_id}


def test_validation_refuses_an_id_with_a_control_character(tmp_path):
    runs = write_jsonl(tmp_path / "runs.jsonl", [record("ok", [step(1)]), record("a\rb", [step(1)])])
    problems = validate_file(runs).problems
    assert len(problems) == 1 and problems[0].startswith(f"{runs}:2: task_id: ") and "U+000D" in problems[0]


def test_a_note_with_cr_sent_to_the_api_reads_back_exactly(tmp_path):
    runs = write_jsonl(tmp_path / "runs.jsonl", [record("a", [step(t) for t in range(1, 3)])])
    out = tmp_path / "alice.csv"
    web = open_app(plan(runs, out, "alice", "g"))
    note = "line\rnext\r\n=1+1 \u200b\u202e' \u2028\x85\x1c"  # U+2028, NEL, FS: line breaks to str.splitlines
    web.change("label", parse_body(json.dumps({"index": 0, "value": 1}).encode(), "label"))
    web.change("note", parse_body(json.dumps({"index": 0, "note": note}).encode(), "note"))
    assert read_annotator_csv(out, [G]).notes == {("a", 1): note}
    again = open_app(plan(runs, out, "alice", "g"))  # replayed from the journal, rewritten
    assert again.session.notes[again.session.queue[0]] == note
    assert read_annotator_csv(out, [G]).notes == {("a", 1): note}


def test_a_judge_model_name_with_cr_reads_back_exactly(tmp_path):
    runs = write_jsonl(tmp_path / "runs.jsonl", [record("a", [step(t) for t in range(1, 3)])])
    model = "m\r=1+1,\"x\"\n\u2028"
    out = tmp_path / "judge.csv"
    with StubLLM(lambda item, attempt: ("answer", "G: 1\n=SUM(A1)\rwhy"), model=model) as stub:
        run_judge(runs, out, JudgeConfig(stub.base_url, "asked", backoff_s=0), "g")
    header, rows = read_label_table(out)
    assert [r["model"] for _, r in rows] == [model, model]
    assert [r["rationale"] for _, r in rows] == ["G: =SUM(A1) why"] * 2
    assert read_labels_csv(out, G) == {("a", 1): 1, ("a", 2): 1}
    with StubLLM(lambda item, attempt: ("answer", "G: 0"), model=model) as stub:  # a re-run reads the journal back
        run_judge(runs, out, JudgeConfig(stub.base_url, "asked", backoff_s=0), "g")
        assert stub.asked() == []
    assert [r["model"] for _, r in read_label_table(out)[1]] == [model, model]


ID_TEXT = st.text(st.one_of(st.sampled_from([c for c in HOSTILE if unicodedata.category(c) != "Cc"]),
                            st.characters(exclude_categories=["Cs", "Cc"])), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(task_id=ID_TEXT, note=TEXT)
def test_the_page_writes_any_id_and_note_that_validation_accepts_exactly(tmp_path_factory, task_id, note):
    """Through the real producer: a trajectory id (control characters are refused at validation) and a note sent
    to the API come back from the hand-labels CSV as they were."""
    root = tmp_path_factory.mktemp("page")
    runs = write_jsonl(root / "runs.jsonl", [record(task_id, [step(1), step(2)])])
    web = open_app(plan(runs, root / "alice.csv", "alice", "g"))
    web.change("label", {"index": 1, "value": 0})
    web.change("note", parse_body(json.dumps({"index": 1, "note": note}).encode(), "note"))
    got = read_annotator_csv(root / "alice.csv", [G], None)
    assert got.labels[G] == {(task_id, 2): 0} and got.notes == ({(task_id, 2): note} if note else {})


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(task_id=TEXT.filter(bool), model=TEXT, rationale=TEXT, problem=TEXT)
def test_the_judge_writes_any_model_name_and_rationale_exactly(tmp_path_factory, task_id, model, rationale, problem):
    from interp.annotation.judge import csv_rows
    from interp.annotation.session import Item

    items = [Item(task_id, 1, G), Item(task_id, 1, Y)]
    answers = {items[0]: {"served_model": model, "prompt_sha256": "x", "time": "t", "label": 1,
                          "rationale": rationale, "problem": ""},
               items[1]: {"served_model": model, "prompt_sha256": "x", "time": "t", "label": None,
                          "rationale": "", "problem": problem}}
    path = tmp_path_factory.mktemp("judge") / "judge.csv"
    write_labels_csv(path, csv_rows(items, answers, "asked"), G, KINDS["judge"][1:])
    (_, row), = read_label_table(path)[1]
    assert row["task_id"] == task_id and row["model"] == (model or "asked")
    assert row["rationale"] == (f"G: {rationale}" if rationale else "") and row["missing"] == f"y: {problem}"
    assert read_labels_csv(path, G) == {(task_id, 1): 1} and read_labels_csv(path, Y) == {}
