"""The one labels-CSV reader and writer, annotation reader and agreement (interp.data.labels)."""

from __future__ import annotations

import pytest
from sklearn.metrics import cohen_kappa_score, confusion_matrix

from interp.data.labels import agreement, annotation_labels, read_labels_csv, write_labels_csv

pytestmark = pytest.mark.unit

HEADER = "task_id,after_step,future_necessity\n"


def _csv(tmp_path, body: str, name: str = "labels.csv"):
    path = tmp_path / name
    path.write_text(body)
    return path


def test_reader_skips_empty_and_minus_one_and_accepts_float_spellings(tmp_path):
    path = _csv(tmp_path, HEADER + "a,1,1\na,2,\na,3,-1\na,4,0.0\nb,1,1.0\nb,2, 0 \n")
    assert read_labels_csv(path, "future_necessity") == {("a", 1): 1, ("a", 4): 0, ("b", 1): 1, ("b", 2): 0}


def test_reader_reports_every_problem_with_file_line_and_field(tmp_path):
    path = _csv(tmp_path, HEADER + "a,1,1\n,2,1\na,x,1\na,0,1\na,2,yes\na,1,0\n")
    with pytest.raises(ValueError) as exc:
        read_labels_csv(path, "future_necessity")
    lines = str(exc.value).splitlines()
    assert lines[0] == f"5 problem(s) in {path}:"
    assert lines[1:] == [
        f"{path}:3: task_id: empty",
        f"{path}:4: after_step: 'x' is not an integer",
        f"{path}:5: after_step: 0 out of range >= 1",
        f"{path}:6: future_necessity: 'yes' is not 0 or 1 (empty or -1 = no label)",
        f"{path}:7: after_step: duplicate boundary a@1 (first on line 2)",
    ]


def test_reader_checks_tasks_and_ranges_against_trajectories(tmp_path, mini_trajectory):
    n = mini_trajectory.n_steps
    ok = _csv(tmp_path, HEADER + f"{mini_trajectory.task_id},{n},1\n", "ok.csv")
    assert read_labels_csv(ok, "future_necessity", [mini_trajectory]) == {(mini_trajectory.task_id, n): 1}
    bad = _csv(tmp_path, HEADER + f"{mini_trajectory.task_id},{n + 1},1\nnope,1,1\n", "bad.csv")
    with pytest.raises(ValueError) as exc:
        read_labels_csv(bad, "future_necessity", [mini_trajectory])
    assert f"{bad}:2: after_step: {n + 1} out of range 1..{n}" in str(exc.value)
    assert f"{bad}:3: task_id: unknown task 'nope'" in str(exc.value)
    assert read_labels_csv(bad, "future_necessity") == {(mini_trajectory.task_id, n + 1): 1, ("nope", 1): 1}


def test_reader_header_missing_file_and_optional_column(tmp_path):
    path = _csv(tmp_path, "task_id,after_step,externalization_gap\na,1,1\n")
    with pytest.raises(ValueError, match=rf"^{path}:1: header: missing column\(s\) future_necessity;"):
        read_labels_csv(path, "future_necessity")
    assert read_labels_csv(path, "future_necessity", required=False) == {}
    assert read_labels_csv(path, "externalization_gap") == {("a", 1): 1}
    no_ids = _csv(tmp_path, "task,future_necessity\n", "no_ids.csv")
    with pytest.raises(ValueError, match="missing column\\(s\\) task_id, after_step"):
        read_labels_csv(no_ids, "future_necessity", required=False)  # the ids are always required
    with pytest.raises(FileNotFoundError, match="absent.csv: file not found"):
        read_labels_csv(tmp_path / "absent.csv", "future_necessity")


def test_writer_round_trips_through_the_reader(tmp_path):
    rows = [{"task_id": "a,quoted", "after_step": 1, "future_necessity": 1, "note": "x"},
            {"task_id": "b", "after_step": 2, "future_necessity": "", "note": ""},
            {"task_id": "b", "after_step": 3, "future_necessity": 0, "note": 'say "hi"'}]
    path = write_labels_csv(tmp_path / "sub" / "out.csv", rows, "future_necessity", ["note"])
    assert path.read_text().splitlines()[0] == "task_id,after_step,future_necessity,note"
    assert read_labels_csv(path, "future_necessity") == {("a,quoted", 1): 1, ("b", 3): 0}


def test_annotation_labels_reads_both_fields(mini_trajectory):
    tid = mini_trajectory.task_id
    y = annotation_labels([mini_trajectory], "future_necessity")
    g = annotation_labels([mini_trajectory], "externalization_gap")
    assert y == {(tid, a.after_step): a.future_necessity for a in mini_trajectory.annotations}
    assert g == {(tid, a.after_step): a.externalization_gap for a in mini_trajectory.annotations}
    assert set(y.values()) == {0, 1}
    with pytest.raises(ValueError, match="field: unknown label 'note'"):
        annotation_labels([mini_trajectory], "note")


def test_agreement_against_sklearn_on_a_hand_example():
    ref = {("a", 1): 1, ("a", 2): 1, ("a", 3): 0, ("b", 1): 0, ("b", 2): 1, ("b", 3): 1, ("c", 1): 1}
    pred = {("a", 1): 1, ("a", 2): 1, ("a", 3): 1, ("b", 1): 1, ("b", 2): 1, ("b", 3): 0, ("z", 9): 1}
    got = agreement(pred, ref)
    keys = sorted(set(ref) & set(pred))  # ("c", 1) and ("z", 9) are not shared
    r, p = [ref[k] for k in keys], [pred[k] for k in keys]
    # by hand: ref [1,1,0,0,1,1], pred [1,1,1,1,1,0]: po = 3/6, pe = (2/6)(1/6) + (4/6)(5/6) = 22/36,
    # kappa = (18/36 - 22/36) / (14/36) = -2/7
    assert got["kappa"] == pytest.approx(-2 / 7, abs=1e-4)
    assert got["kappa"] == pytest.approx(cohen_kappa_score(r, p), abs=1e-4)
    assert got["n"] == 6 and got["accuracy"] == pytest.approx(3 / 6, abs=1e-4)
    assert got["confusion"] == confusion_matrix(r, p, labels=[0, 1]).tolist() == [[0, 2], [1, 3]]  # rows: reference
    assert (got["predicted_positive_rate"], got["reference_positive_rate"]) == (round(5 / 6, 4), round(4 / 6, 4))


def test_agreement_without_overlap_or_variation():
    empty = agreement({("a", 1): 1}, {("b", 1): 1})
    assert empty["n"] == 0 and all(v is None for k, v in empty.items() if k != "n")
    constant = agreement({("a", 1): 1, ("a", 2): 1}, {("a", 1): 1, ("a", 2): 1})
    assert constant["kappa"] is None and constant["accuracy"] == 1.0 and constant["confusion"] == [[0, 0], [0, 2]]
    assert set(constant) == set(empty)


def test_the_writer_guards_formula_cells_and_the_reader_restores_them(tmp_path):
    """Cells a spreadsheet would run (= + - @ tab CR) get a leading ' (a plain leading ' is left as written); ids
    round-trip."""
    import csv

    ids = ["=HYPERLINK(\"http://x\",\"y\")", "+1", "-2", "@SUM(A1)", "\tx", "'quoted", "plain", "a=b"]
    rows = [{"task_id": t, "after_step": 1, "future_necessity": i % 2, "note": f"=cmd|' /C calc'!A{i}"}
            for i, t in enumerate(ids)]
    path = write_labels_csv(tmp_path / "g.csv", rows, "future_necessity", ["note"])
    cells = list(csv.DictReader(path.open(newline="")))
    for row, cell in zip(rows, cells):
        first = row["task_id"][0]
        assert cell["task_id"] == ("'" + row["task_id"] if first in "=+-@\t" else row["task_id"])
        assert cell["note"].startswith("'=") and cell["future_necessity"] in ("0", "1")  # labels stay numbers
    assert read_labels_csv(path, "future_necessity") == {(t, 1): i % 2 for i, t in enumerate(ids)}
