"""Risk statistics against a hand computation on 4 tasks / 12 boundaries, and the risk CLI body."""

from __future__ import annotations

import json
import math

import pytest

from interp.externalization.risk import RiskConfig, read_oof_scores, risk_analysis, risk_command, risk_rows

from ._support import DEMO

pytestmark = pytest.mark.unit

# (task, after_step, G, y, OOF score in log-odds)
TABLE = [
    ("A", 1, 1, 1, 2.0), ("A", 2, 1, 0, 0.0), ("A", 3, 0, 0, -1.0),
    ("B", 1, 1, 1, 1.0), ("B", 2, 0, 1, 0.0), ("B", 3, 0, 0, 1.0),
    ("C", 1, 1, 1, 3.0), ("C", 2, 1, 1, 3.0), ("C", 3, 1, 0, 3.0),  # only G=1: no within-task pair
    ("D", 1, 0, 0, 0.0), ("D", 2, 0, 1, -2.0), ("D", 3, 1, 0, -1.0),
]


def _sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _rows():
    return risk_rows({(t, b): g for t, b, g, _, _ in TABLE}, {(t, b): y for t, b, _, y, _ in TABLE},
                     {(t, b): s for t, b, _, _, s in TABLE})


def test_statistics_match_a_hand_computation():
    res = risk_analysis(_rows(), n_boot=400)
    # pooled: G=1 rows A1 A2 B1 C1 C2 C3 D3 -> 4 of 7 positive; G=0 rows A3 B2 B3 D1 D2 -> 2 of 5
    assert res["p_y_given_g1"]["estimate"] == pytest.approx(4 / 7)
    assert (res["p_y_given_g1"]["n"], res["p_y_given_g1"]["n_positive"], res["p_y_given_g1"]["n_tasks"]) == (7, 4, 4)
    assert res["p_y_given_g0"]["estimate"] == pytest.approx(2 / 5)
    assert res["risk_difference"] == pytest.approx(4 / 7 - 2 / 5)
    # within task (A, B, D have both G): A 1/2 - 0, B 1 - 1/2, D 0 - 1/2
    within = res["within_task_gap"]
    assert within["n_tasks"] == 3 and within["per_task"] == {"A": 0.5, "B": 0.5, "D": -0.5}
    assert within["estimate"] == pytest.approx(1 / 6)
    # hidden score: A (2+0)/2 - (-1) = 2, B 1 - (0+1)/2 = 0.5, D -1 - (0-2)/2 = 0
    hidden = res["hidden_score_gap"]["logodds"]
    assert hidden["estimate"] == pytest.approx((2 + 0.5 + 0) / 3)
    prob = ((_sig(2) + _sig(0)) / 2 - _sig(-1) + _sig(1) - (_sig(0) + _sig(1)) / 2 + _sig(-1) - (_sig(0) + _sig(-2)) / 2) / 3
    assert res["hidden_score_gap"]["probability"]["estimate"] == pytest.approx(prob)
    for stat in (res["p_y_given_g1"], res["p_y_given_g0"], within, hidden):
        lo, hi = stat["ci"]
        assert lo <= stat["estimate"] <= hi


def test_without_scores_the_hidden_gap_is_null():
    rows = risk_rows({(t, b): g for t, b, g, _, _ in TABLE}, {(t, b): y for t, b, _, y, _ in TABLE})
    res = risk_analysis(rows, n_boot=50)
    assert res["hidden_score_gap"] is None and res["n_without_score"] == 12


def test_risk_command_from_csvs(tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text("task_id,after_step,externalization_gap,future_necessity\n"
                      + "".join(f"{t},{b},{g},{y}\n" for t, b, g, y, _ in TABLE))
    oof = tmp_path / "probe"
    oof.mkdir()
    (oof / "oof_predictions.csv").write_text(
        "sample_id,task_id,y,score,fold,threshold,pred\n"
        + "".join(f"{t}@{b}:full,{t},{y},{s},0,0.0,1\n" for t, b, _, y, s in TABLE)
        + "".join(f"{t}@{b}:delete_all_reasoning,{t},{y},9.0,0,0.0,1\n" for t, b, _, y, _ in TABLE))
    doc = risk_command(tmp_path / "out", labels=labels, probe_results=oof, config=RiskConfig(n_boot=100))
    written = json.loads((tmp_path / "out" / "externalization.json").read_text())
    assert written["schema"]["p_y_given_g1"]["shape"].startswith("{estimate")  # interp.schema field table
    assert "reference" not in written  # the reference study's numbers live once, in interp.reporting.reference
    assert written["sources"]["y"].endswith("(future_necessity)")
    assert doc["hidden_score_gap"]["logodds"]["estimate"] == pytest.approx(2.5 / 3)  # the full condition only


def _hand_count_without_final_boundaries() -> dict[int, list[int]]:
    """{G: [n, n_positive]} counted from the raw demo JSONL, each task's last boundary (after_step = n_steps) left out."""
    counts = {0: [0, 0], 1: [0, 0]}
    for line in DEMO.read_text().splitlines():
        raw = json.loads(line)
        for ann in raw["annotations"]["boundaries"]:
            g, y = ann.get("externalization_gap"), ann.get("future_necessity")
            if g is None or y is None or ann["after_step"] == len(raw["steps"]):
                continue
            counts[g][0] += 1
            counts[g][1] += y
    return counts


def test_risk_command_from_demo_annotations(tmp_path):
    doc = risk_command(tmp_path, trajectories=DEMO, config=RiskConfig(n_boot=100))
    g1, g0 = doc["p_y_given_g1"], doc["p_y_given_g0"]
    hand = _hand_count_without_final_boundaries()
    assert [g1["n"], g1["n_positive"]] == hand[1] and [g0["n"], g0["n_positive"]] == hand[0]
    assert (g1["n"], g1["n_positive"], g0["n"], g0["n_positive"]) == (111, 65, 57, 14)  # the 0.246 (n = 57)
    assert doc["p_y_given_g0"]["estimate"] == pytest.approx(14 / 57)
    assert doc["n_undefined"] == 25 and doc["n_boundaries"] == 168  # one final boundary per demo task
    assert doc["sources"] == {"G": "annotations", "y": "annotations", "scores": None}


def test_risk_without_trajectories_uses_every_labelled_row(tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text("task_id,after_step,externalization_gap,future_necessity\n"
                      + "".join(f"{t},{b},{g},{y}\n" for t, b, g, y, _ in TABLE))
    doc = risk_command(tmp_path / "out", labels=labels, config=RiskConfig(n_boot=20))
    assert doc["n_boundaries"] == 12 and doc["n_undefined"] is None


@pytest.mark.parametrize("body, message", [
    ("sample_id,task_id,score\nA-1-full,A,0.5\n", ":2: sample_id: 'A-1-full' is not task_id@after_step:condition"),
    ("sample_id,task_id,score\nA@1:full,B,0.5\n", ":2: task_id: 'B' differs from the sample_id's 'A'"),
    ("sample_id,task_id,score\nA@1:full,A,0.5\nA@1:full,A,0.5\n", ":3: sample_id: duplicate sample 'A@1:full'"),
    ("sample_id,task_id,score\nA@1:full,A,high\n", ":2: score: 'high' is not a number"),
    ("sample_id,score\n", ":1: header: missing column(s) task_id"),
])
def test_oof_errors_name_file_line_and_field(tmp_path, body, message):
    path = tmp_path / "oof_predictions.csv"
    path.write_text(body)
    with pytest.raises(ValueError) as exc:
        read_oof_scores(path)
    assert f"{path}{message}" in str(exc.value)


def test_oof_without_the_condition_lists_the_present_ones(tmp_path):
    path = tmp_path / "oof_predictions.csv"
    path.write_text("sample_id,task_id,score\nA@1:delete_all_reasoning,A,0.5\n")
    with pytest.raises(ValueError, match="conditions present: delete_all_reasoning"):
        read_oof_scores(path, "full")


def test_risk_command_skips_unlabelled_rows_and_reports_bad_ones(tmp_path):
    labels = tmp_path / "labels.csv"
    body = "".join(f"{t},{b},{g},{'-1' if t == 'D' else ('' if (t, b) == ('A', 1) else y)}\n"
                   for t, b, g, y, _ in TABLE)
    labels.write_text("task_id,after_step,externalization_gap,future_necessity\n" + body)
    doc = risk_command(tmp_path / "out", labels=labels, config=RiskConfig(n_boot=50))
    assert doc["n_boundaries"] == 8 and doc["n_without_y"] == 4  # D (-1) and A@1 (empty) have no y
    # G=1 with y: A2 (0), B1 (1), C1 (1), C2 (1), C3 (0); G=0 with y: A3 (0), B2 (1), B3 (0)
    assert (doc["p_y_given_g1"]["n"], doc["p_y_given_g1"]["n_positive"]) == (5, 3)
    assert (doc["p_y_given_g0"]["n"], doc["p_y_given_g0"]["n_positive"]) == (3, 1)
    labels.write_text("task_id,after_step,externalization_gap\nA,1,maybe\n")
    with pytest.raises(ValueError, match=r"labels.csv:2: externalization_gap: 'maybe' is not 0 or 1"):
        risk_command(tmp_path / "out", labels=labels, config=RiskConfig(n_boot=50))
