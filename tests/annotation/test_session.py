"""The session: queue order, journal replay (undo, skip, torn line), the CSV, adjudication, views and rules."""

from __future__ import annotations

import json

import pytest

from interp.annotation.server import open_app, plan, session_lock
from interp.annotation.session import CSV_FIELDS, Item, build_queue, folder_for
from interp.annotation.views import item_view
from interp.data.labels import read_labels_csv
from interp.data.trajectory import load_trajectories
from interp.io import WriterLocked
from tests.annotation._support import record, step, write_jsonl

pytestmark = pytest.mark.unit


@pytest.fixture()
def runs(tmp_path):
    return write_jsonl(tmp_path / "runs.jsonl", [record("a", [step(t) for t in range(1, 4)]),
                                                 record("b", [step(t) for t in range(1, 3)])])


def session(runs, out, annotator="alice", task="g", adjudicate=()):
    return open_app(plan(runs, out, annotator, task, adjudicate)).session


def test_queue_asks_every_g_of_a_trajectory_before_its_y_and_no_y_at_the_final_boundary(runs):
    queue = build_queue(load_trajectories(runs), "both")
    assert queue == [Item("a", 1, "externalization_gap"), Item("a", 2, "externalization_gap"),
                     Item("a", 3, "externalization_gap"), Item("a", 1, "future_necessity"),
                     Item("a", 2, "future_necessity"), Item("b", 1, "externalization_gap"),
                     Item("b", 2, "externalization_gap"), Item("b", 1, "future_necessity")]
    with pytest.raises(ValueError, match="--task"):
        build_queue([], "x")


def test_replay_keeps_labels_undo_skip_and_notes_and_resumes(runs, tmp_path):
    out = tmp_path / "alice.csv"
    s = session(runs, out, task="both")
    s.label(0, 1, suggestions=False)
    s.label(1, 0, suggestions=True)
    s.label(1, 1, suggestions=False)  # relabel; undo restores the 0
    assert s.undo() == 1 and s.value(s.queue[1]) == 0
    s.skip(2)
    s.label(3, 1, suggestions=False)
    s.note(3, "re-plans at step 3")
    expected = {("a", 1): 1, ("a", 2): 0}
    assert read_labels_csv(out, "externalization_gap") == expected
    assert read_labels_csv(out, "future_necessity") == {("a", 1): 1}
    s2 = session(runs, out, task="both")  # a restart replays the journal
    assert {i: s2.value(i) for i in s2.values} == {i: s.value(i) for i in s.values}
    assert s2.position == 4 and s2.notes == s.notes and s2.order == s.order
    with open(out) as fh:
        header = fh.readline().strip().split(",")
    assert header == [f.name for f in CSV_FIELDS if f.name not in ("adjudicated", "reviewed", "reviewed_<field>")]
    row = out.read_text().splitlines()[1].split(",")
    assert row[:4] == ["a", "1", "1", "1"] and row[4] == "alice" and row[6] == "0" and row[7] == "y: re-plans at step 3"
    assert [row.split(",")[6] for row in out.read_text().splitlines()[1:]] == ["0", "1"]  # (a, 2): 0 shown with


def test_a_torn_last_line_is_dropped_and_the_rest_kept(runs, tmp_path):
    out = tmp_path / "alice.csv"
    s = session(runs, out)
    s.label(0, 1, False)
    s.label(1, 0, False)
    journal = folder_for(out) / "journal.jsonl"
    with open(journal, "a") as fh:
        fh.write('{"event":"label","time":"x","task_id":"a","after_st')  # killed while writing
    s2 = session(runs, out)
    assert read_labels_csv(out, "externalization_gap") == {("a", 1): 1, ("a", 2): 0} and s2.position == 2
    assert all(json.loads(line) for line in journal.read_text().splitlines())  # the tail was cut, the file is whole


def test_a_journal_of_another_annotator_or_task_is_refused(runs, tmp_path):
    out = tmp_path / "alice.csv"
    session(runs, out).label(0, 1, False)
    with pytest.raises(ValueError, match=r"journal.jsonl:1: session.annotator"):
        session(runs, out, annotator="bob")
    with pytest.raises(ValueError, match=r"session.task"):
        session(runs, out, task="y")


def test_bad_input_is_refused_before_anything_is_written(runs, tmp_path):
    with pytest.raises(ValueError, match="--annotator"):
        plan(runs, tmp_path / "x.csv", " ")
    with pytest.raises(ValueError, match="--adjudicate"):
        plan(runs, tmp_path / "x.csv", "c", adjudicate=[tmp_path / "a.csv"])
    with pytest.raises(ValueError, match="--labels"):
        plan(runs, tmp_path, "c")
    assert not list(tmp_path.glob("*.annotate"))


def test_one_writer_per_output(runs, tmp_path):
    out = tmp_path / "alice.csv"
    with session_lock(out):
        with pytest.raises(WriterLocked):
            with session_lock(out):
                pass
    with session_lock(tmp_path / "bob.csv"), session_lock(out):  # another output in the same folder is fine
        pass


def test_adjudication_walks_the_disagreements_and_writes_a_full_label_set(runs, tmp_path):
    a, b = session(runs, tmp_path / "alice.csv"), session(runs, tmp_path / "bob.csv", annotator="bob")
    for i, (va, vb) in enumerate([(1, 1), (0, 1), (1, 0), (0, 0)]):  # items a@1..3, b@1; b@2 only bob
        a.label(i, va, False)
        b.label(i, vb, i == 1)
    b.label(4, 1, False)
    a.note(1, "alice thinks the plan is in the file")
    adj = session(runs, tmp_path / "adj.csv", annotator="carol",
                  adjudicate=[tmp_path / "alice.csv", tmp_path / "bob.csv"])
    assert adj.queue == [Item("a", 2, "externalization_gap"), Item("a", 3, "externalization_gap")]
    assert adj.others(adj.queue[0]) == [{"annotator": "alice", "value": 0, "note": "alice thinks the plan is in the file",
                                         "confidence": ""}, {"annotator": "bob", "value": 1, "note": "", "confidence": ""}]
    adj.label(0, 1, False)
    out = tmp_path / "adj.csv"
    assert read_labels_csv(out, "externalization_gap") == {("a", 1): 1, ("a", 2): 1, ("b", 1): 0}
    rows = [r.split(",") for r in out.read_text().splitlines()]
    assert rows[0][-1] == "adjudicated" and [r[3] for r in rows[1:]] == ["alice+bob", "carol", "alice+bob"]
    assert [r[-1] for r in rows[1:]] == ["0", "1", "0"]


def test_a_g_view_holds_no_later_step_and_a_y_view_holds_them(runs):
    traj = load_trajectories(runs)[0]
    g = json.dumps(item_view(traj, Item("a", 2, "externalization_gap"), suggestions=True))
    assert "STEP1" in g and "STEP2" in g and "STEP3" not in g
    y = item_view(traj, Item("a", 1, "future_necessity"), suggestions=True)
    assert [s["step"] for s in y["history"]] == [1] and [s["step"] for s in y["later"]] == [2, 3]
    assert y["evidence"]["rule_label"] in (0, 1) and all("step" in f for f in y["evidence"]["fired"])
    g_ev = item_view(traj, Item("a", 3, "externalization_gap"), suggestions=True)["evidence"]
    assert g_ev["looked_in"][0].startswith("given text") and {"kind", "text", "step"} <= set(
        (g_ev["only_in_reasoning"] or [{"kind": 0, "text": 0, "step": 0}])[0])


def test_the_notebook_frame_is_an_escaped_iframe_of_a_loopback_page():
    import interp
    from interp.annotation.notebook import AnnotationFrame

    frame = interp.annotation_iframe('http://127.0.0.1:8001/?token=a"b', height=300)
    assert isinstance(frame, AnnotationFrame)
    assert '<iframe src="http://127.0.0.1:8001/?token=a&quot;b"' in frame._repr_html_()
    for url in ("http://example.com:8001/?token=x", "http://127.0.0.1:8001/", "file:///etc/passwd?token=x"):
        with pytest.raises(ValueError, match="labelling page URL"):
            interp.annotation_iframe(url)
