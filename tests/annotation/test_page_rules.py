"""The page's rules without a browser: strict request bodies, CSV formula guard, labels bound to their trajectories,
notes of skipped items, resume at the first unlabelled item, actions as code and diffs, frames and frame origins."""

from __future__ import annotations

import json

import pytest

from interp.annotation.server import BadRequest, RunningAnnotation, open_app, parse_body, plan, security_headers
from interp.annotation.session import folder_for
from interp.annotation.views import call_view, diff_lines
from interp.data.labels import guard_cell, read_labels_csv, unguard_cell, write_labels_csv
from tests.annotation._support import record, step, write_jsonl

pytestmark = pytest.mark.unit


def session(runs, out, task="g"):
    return open_app(plan(runs, out, "alice", task)).session


@pytest.fixture()
def runs(tmp_path):
    return write_jsonl(tmp_path / "runs.jsonl", [record("a", [step(t) for t in range(1, 4)]),
                                                 record("b", [step(t) for t in range(1, 3)])])


@pytest.mark.parametrize("raw, message", [
    (b"[" * 5000 + b"]" * 5000, "body: JSON nested too deeply"),
    (b"[0, 1]", "body: expected a JSON object, got list"),
    (b'{"index": 0, "value": ' + b"[" * 3000 + b"]" * 3000 + b"}", "nested too deeply"),
    (b'{"index": 0, "value": 1.0}', "value: expected a JSON integer, got 1.0"),
    (b'{"index": 0, "value": true}', "value: expected a JSON integer, got true"),
    (b'{"index": 0, "value": 2}', "value: 2 is not 0 or 1"),
    (b'{"index": 0, "value": NaN}', "not JSON"),
    (b'{"index": 0, "value": 1, "extra": {"a": 1}}', "unknown field(s) 'extra'"),
    (b'{"index": "0", "value": 1}', "index: expected a JSON integer"),
    (b'{"value": 1}', "index: missing"),
    (b'{"index": 0, "value": 1', "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b'"label"', "expected a JSON object, got str"),
])
def test_a_malformed_or_nested_body_is_a_400_with_a_one_line_message(raw, message):
    with pytest.raises(BadRequest) as caught:
        parse_body(raw, "label")
    assert caught.value.status == 400 and message in str(caught.value) and "\n" not in str(caught.value)


def test_well_formed_bodies_pass_exactly():
    assert parse_body(b'{"index": 3, "value": 0, "suggestions": false}', "label") == {"index": 3, "value": 0,
                                                                                      "suggestions": False}
    assert parse_body(b"", "undo") == {} and parse_body(b"{}", "undo") == {}
    assert parse_body(json.dumps({"index": 1, "note": "x" * 10_000}).encode(), "note")["index"] == 1
    with pytest.raises(BadRequest, match="note: 10001 characters"):
        parse_body(json.dumps({"index": 1, "note": "x" * 10_001}).encode(), "note")


def test_a_label_is_exactly_the_integer_0_or_1(runs, tmp_path):
    s = session(runs, tmp_path / "alice.csv")
    for bad in (1.0, True, "1", 2, None):
        with pytest.raises(ValueError, match="is not 0 or 1"):
            s.label(0, bad, False)
    assert s.labelled() == 0 and '"event":"label"' not in (folder_for(tmp_path / "alice.csv") / "journal.jsonl").read_text()


FORMULAS = ["=1+1", "+cmd", "-2+3", "@SUM(A1)", "\tx", "\r=x", "'=x", "''@x"]
PLAIN = ["abc", "'abc", "", "a=b", "1", "'"]


def test_formula_cells_are_guarded_and_read_back_as_written(tmp_path):
    for value in FORMULAS:
        assert guard_cell(value).startswith("'") and guard_cell(value)[1:] == value
    for value in PLAIN:
        assert guard_cell(value) == value
    assert [unguard_cell(guard_cell(v)) for v in FORMULAS + PLAIN] == FORMULAS + PLAIN
    assert guard_cell(-1) == -1  # numbers are not text: a -1 label stays -1
    out = write_labels_csv(tmp_path / "l.csv", [{"task_id": "=HYPERLINK(\"x\")", "after_step": 1, "y": 1,
                                                 "note": "-step 2 re-plans"}], "y", ["note"])
    lines = out.read_text().splitlines()
    assert lines[1].startswith("\"'=HYPERLINK(\"\"x\"\")\",1,1,'-step 2")  # every text cell starts with '
    assert read_labels_csv(out, "y") == {('=HYPERLINK("x")', 1): 1}


def test_a_changed_trajectory_sets_aside_only_the_labels_whose_shown_history_changed(runs, tmp_path):
    """An edit to step 2 changes what G at b >= 2 showed; G at b = 1 showed steps 1..1 only and stays."""
    out = tmp_path / "alice.csv"
    s = session(runs, out)
    for i, v in enumerate([1, 0, 1, 1]):  # a@1..3, b@1
        s.label(i, v, False)
    s.note(1, "plan kept in notes.md")
    records = [json.loads(line) for line in runs.read_text().splitlines()]
    records[0]["steps"][1]["observation"] = "a different output"  # one trajectory's step 2 changes
    write_jsonl(runs, records)
    s2 = session(runs, out)
    journal = folder_for(out) / "journal.jsonl"
    assert len(s2.flags) == 2 and all("\n" not in f for f in s2.flags)
    assert [f.split(":")[0] for f in s2.flags] == ["a@2 G", "a@3 G"]
    assert "what this item shows of trajectory 'a' changed since it was labelled" in s2.flags[0]
    assert str(journal) in s2.flags[0]
    assert read_labels_csv(out, "externalization_gap") == {("a", 1): 1, ("b", 1): 1}  # never re-attached
    assert s2.marks() == "1cc1." and s2.position == 1 and s2.notes == {}
    s2.label(1, 0, False)  # labelled again on the new text: bound to it, the flag of that item is gone
    s3 = session(runs, out)
    assert [f.split(":")[0] for f in s3.flags] == ["a@3 G"]
    assert read_labels_csv(out, "externalization_gap") == {("a", 1): 1, ("a", 2): 0, ("b", 1): 1}
    hashes = {line.split(",")[0]: line.split(",")[-1] for line in out.read_text().splitlines()[1:]}
    assert hashes == {"a": s3.hashes["a"], "b": s3.hashes["b"]} and len(hashes["a"]) == 64


def test_a_step_edit_sets_aside_every_y_of_the_trajectory_and_the_g_labels_after_it(runs, tmp_path):
    """y shows every step: an edit anywhere changes every y item of the trajectory; G only from the edited step."""
    out = tmp_path / "alice.csv"
    s = session(runs, out, task="both")  # a: G@1..3, y@1..2; b: G@1..2, y@1
    for i in range(len(s.queue)):
        s.label(i, 1, False)
    records = [json.loads(line) for line in runs.read_text().splitlines()]
    records[0]["steps"][2]["reasoning"] = "edited STEP3"
    write_jsonl(runs, records)
    s2 = session(runs, out, task="both")
    assert [f.split(":")[0] for f in s2.flags] == ["a@3 G", "a@1 y", "a@2 y"]
    assert read_labels_csv(out, "externalization_gap") == {("a", 1): 1, ("a", 2): 1, ("b", 1): 1, ("b", 2): 1}
    assert read_labels_csv(out, "future_necessity") == {("b", 1): 1}


def test_a_removed_trajectory_sets_its_labels_aside_and_keeps_the_file(runs, tmp_path):
    out = tmp_path / "alice.csv"
    s = session(runs, out)
    for i in range(len(s.queue)):
        s.label(i, i % 2, False)
    records = [json.loads(line) for line in runs.read_text().splitlines()]
    write_jsonl(runs, records[1:])  # trajectory a is gone
    s2 = session(runs, out)
    assert len(s2.flags) == 1 and s2.flags[0].startswith("'a': 3 journal event(s) of boundaries no longer in the "
                                                         "trajectory file")
    assert read_labels_csv(out, "externalization_gap") == {("b", 1): 1, ("b", 2): 0}
    s2.label(0, 0, False)  # the session goes on
    records[0]["steps"] = records[0]["steps"][:1]  # a comes back with one step: its b = 2, 3 labels stay aside
    write_jsonl(runs, records)
    s3 = session(runs, out)
    assert [f.split(":")[0] for f in s3.flags] == ["'a'"] and "3 journal event(s)" not in s3.flags[0]
    assert read_labels_csv(out, "externalization_gap") == {("a", 1): 0, ("b", 1): 0, ("b", 2): 0}


def test_a_note_on_a_skipped_item_reaches_the_csv(runs, tmp_path):
    out = tmp_path / "alice.csv"
    s = session(runs, out, task="both")
    s.note(0, "unclear: the plan may be in the tool output")
    s.skip(0)
    s.label(1, 1, False)
    rows = out.read_text().splitlines()
    assert rows[1].startswith("a,1,,,alice,,0,G: unclear: the plan may be in the tool output,")
    assert read_labels_csv(out, "externalization_gap") == {("a", 2): 1}


def test_a_restart_resumes_at_the_first_item_neither_labelled_nor_skipped(runs, tmp_path):
    out = tmp_path / "alice.csv"
    s = session(runs, out)
    for i in range(4):
        s.label(i, 1, False)
    s.label(1, 0, False)  # a correction of item 2 of 5: the session moves on to 3 ...
    assert s.position == 2
    assert session(runs, out).position == 4  # ... a restart opens at the first unlabelled item
    s = session(runs, out)
    s.skip(4)
    assert session(runs, out).position == 4  # only skipped ones left: the first of them
    session(runs, out).label(4, 0, False)
    assert session(runs, out).marks() == "10110"


def test_an_edit_is_a_line_diff_and_written_code_keeps_its_newlines():
    edit = call_view("str_replace_based_edit_tool", {"command": "str_replace", "path": "a.py",
                                                     "old_str": "x = 1\ny = 2\nz = 3", "new_str": "x = 1\ny = 20\nz = 3"})
    assert edit["args"][:2] == [{"name": "command", "kind": "value", "text": '"str_replace"'},
                                {"name": "path", "kind": "value", "text": '"a.py"'}]
    assert edit["args"][2]["kind"] == "diff" and edit["args"][2]["lines"] == [
        [" ", "x = 1"], ["-", "y = 2"], ["+", "y = 20"], [" ", "z = 3"]]
    # the reference: difflib's own ndiff, without its hint lines
    import difflib
    ndiff = [[d[0], d[2:]] for d in difflib.ndiff("a\nb\nc\nd".splitlines(), "a\nc\nD\nd\ne".splitlines())
             if not d.startswith("?")]
    assert sorted(map(tuple, diff_lines("a\nb\nc\nd", "a\nc\nD\nd\ne"))) == sorted(map(tuple, ndiff))
    write = call_view("write_file", {"path": "f.py", "content": "def f():\n    return 1\n"})
    assert {k: write["args"][1][k] for k in ("name", "kind", "text")} == {"name": "content", "kind": "code",
                                                                         "text": "def f():\n    return 1\n"}
    patch = call_view("apply_patch", {"patch": "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-old\n+new"})
    assert [op for op, _ in patch["args"][0]["lines"]] == ["@", "@", "@", "-", "+"]


def test_frames_through_jupyter_server_proxy_and_frame_origins(monkeypatch):
    import interp

    run = RunningAnnotation("http://127.0.0.1:8123/?token=t", None, None, None, None, 8123)  # type: ignore[arg-type]
    run.app = type("A", (), {"token": "t"})()  # type: ignore[assignment]
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/alice/")
    assert run.proxy_url() == "/user/alice/proxy/8123/?token=t" and run.proxy_url("/") == "/proxy/8123/?token=t"
    assert '<iframe src="/user/alice/proxy/8123/?token=t"' in run.frame(via="proxy")._repr_html_()
    assert run.frame(via="direct").url == "http://127.0.0.1:8123/?token=t"
    for url in ("/proxy/8123/", "//evil.example/proxy/1/?token=x", "/proxy/x/?token=t", "javascript:1/proxy/1/?token"):
        with pytest.raises(ValueError, match="labelling page URL"):
            interp.annotation_iframe(url)
    csp = security_headers(["https://hub.example.org", "https://*.example.org:8443"])["content-security-policy"]
    assert csp.endswith("frame-ancestors 'self' http://127.0.0.1:* http://localhost:* https://127.0.0.1:* "
                        "https://localhost:* https://hub.example.org https://*.example.org:8443")
    for bad in ("https://x.org; script-src *", "*", "hub.example.org", "https://x.org/path"):
        with pytest.raises(ValueError, match="--frame-ancestor"):
            security_headers([bad])


def test_written_code_is_highlighted_by_pygments_and_joins_back_to_the_text():
    from pygments.lexers import PythonLexer

    code = 'def f(x):\n    return "a" + x  # add\n'
    arg = call_view("write_file", {"path": "pkg/m.py", "content": code})["args"][1]
    assert "".join(text for _, text in arg["tokens"]) == code
    tokens = {text: css for css, text in arg["tokens"]}
    assert tokens["def"] == "k" and tokens["f"] == "nf" and tokens['"a"'] == "s2" and tokens["# add"] == "c1"
    # the reference: Pygments' own token stream of the same text (the classes are its short names)
    reference = [(str(t), v) for t, v in PythonLexer(stripnl=False, ensurenl=False).get_tokens(code)]
    assert ("Token.Keyword", "def") in reference and ("Token.Comment.Single", "# add") in reference
    shell = call_view("run", {"command": "cd src\npytest -q"})["args"][0]
    assert shell["kind"] == "code" and "".join(t for _, t in shell["tokens"]) == "cd src\npytest -q"
    assert "tokens" not in call_view("write_file", {"path": "notes.unknownext", "content": "a\nb"})["args"][1]


def test_review_shows_the_judges_rationale_for_the_asked_label_only(runs, tmp_path):
    """The judge writes ``rationale`` (``G: ...; y: ...`` with both labels); review shows the part for the item."""
    from interp.annotation.judge import CSV_FIELDS

    judge = write_labels_csv(tmp_path / "judge.csv", [
        {"task_id": "a", "after_step": 1, "externalization_gap": 1, "future_necessity": 0, "annotator": "judge:m",
         "rationale": "G: the plan; y: later re-plan"},
        {"task_id": "a", "after_step": 2, "externalization_gap": 0, "future_necessity": 1, "annotator": "judge:m",
         "rationale": "y: only y"}], "externalization_gap", [f.name for f in CSV_FIELDS[3:]])
    s = open_app(plan(runs, tmp_path / "carol.csv", "carol", "both", review=judge)).session
    notes = {(i.task_id, i.after_step, i.field): s.others(i)[0]["note"] for i in s.queue}
    assert notes == {("a", 1, "externalization_gap"): "the plan", ("a", 2, "externalization_gap"): "",
                     ("a", 1, "future_necessity"): "later re-plan", ("a", 2, "future_necessity"): "only y"}


def test_a_judges_labels_are_walked_confirmed_or_corrected_and_recorded_as_such(runs, tmp_path):
    judge = write_labels_csv(tmp_path / "judge.csv", [
        {"task_id": "a", "after_step": 1, "externalization_gap": 1, "annotator": "judge:tiny", "note": "plan only in reasoning"},
        {"task_id": "a", "after_step": 2, "externalization_gap": None, "annotator": "judge:tiny", "note": "unparseable"},
        {"task_id": "a", "after_step": 3, "externalization_gap": 0, "annotator": "judge:tiny", "note": "written to file"},
        {"task_id": "b", "after_step": 1, "externalization_gap": 1, "annotator": "judge:tiny", "note": "-"}],
        "externalization_gap", ["annotator", "note"])
    out = tmp_path / "carol.csv"
    s = open_app(plan(runs, out, "carol", "g", review=judge)).session
    assert s.mode == "review" and [(i.task_id, i.after_step) for i in s.queue] == [("a", 1), ("a", 3), ("b", 1)]
    assert s.others(s.queue[0]) == [{"annotator": "judge:tiny", "value": 1, "note": "plan only in reasoning",
                                     "confidence": ""}]
    s.label(0, 1, False)  # confirms
    s.label(1, 1, False)  # corrects 0 -> 1
    rows = [line.split(",") for line in out.read_text().splitlines()]
    assert rows[0][-2:] == ["reviewed", "reviewed_externalization_gap"]
    assert [(r[0], r[1], r[2], r[3], r[-2], r[-1]) for r in rows[1:]] == [
        ("a", "1", "1", "carol", "judge:tiny", "1"), ("a", "3", "1", "carol", "judge:tiny", "0")]
    with pytest.raises(ValueError, match="session.mode"):  # a review journal is not a labelling one
        open_app(plan(runs, out, "carol", "g"))
    with pytest.raises(ValueError, match="--review: give either"):
        plan(runs, tmp_path / "x.csv", "carol", adjudicate=[judge, judge], review=judge)
