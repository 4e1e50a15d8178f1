"""The rule-based externalization labeler on hand-made trajectories, one per carrier kind, and its CLI body."""

from __future__ import annotations

import csv
import json

import pytest

from interp.data.labels import read_labels_csv
from interp.externalization.labeler import (
    CARRIER_KINDS,
    STUDY_CARRIERS,
    GapLabelerConfig,
    extract_items,
    label_command,
    label_gap,
    label_gaps,
)

from ._support import MINI, make_trajectory

pytestmark = pytest.mark.unit


def _item(label, text):
    return next(it for it in label.items if it.text == text)


def _call(tool, **arguments):
    return {"tool": tool, "arguments": arguments}


def test_written_file_content_externalizes():
    traj = make_trajectory("Fix the retry logic in net/client.py.", [
        {"reasoning": "The backoff should double base_delay_ms on each retry, so the cap must be 8000.",
         "action": _call("write_file", path="net/client.py", content="base_delay_ms = 250\nMAX_DELAY_MS = 8000\n"),
         "observation": "wrote 2 lines"}])
    label = label_gap(traj, 1)
    for text in ("base_delay_ms", "8000"):
        item = _item(label, text)
        assert item.status == "externalized"
        assert item.found_in == [{"source": "written_file", "step": 1, "where": "action.arguments.content"}]
    assert label.externalization_gap == 0


def test_defaults_are_the_studys_definition():
    config = GapLabelerConfig()
    assert config.scope == "all" and config.carriers == STUDY_CARRIERS == ("written_file", "tool_output", "feedback")


def test_tool_argument_externalizes_only_when_opted_in():
    traj = make_trajectory("The nightly CI job is red; find out why.", [
        {"reasoning": "The failing job is build-4711 on runner eu-3, so I will fetch its log.",
         "action": _call("run_shell", command="ci logs build-4711 --runner eu-3"), "observation": "log fetched"}])
    default = label_gap(traj, 1)  # the study's carriers: a tool argument does not externalize
    assert _item(default, "build-4711").status == "not_externalized" and default.externalization_gap == 1
    label = label_gap(traj, 1, GapLabelerConfig(carriers=CARRIER_KINDS))
    item = _item(label, "build-4711")
    assert (item.kind, item.status) == ("identifier", "externalized")
    assert item.found_in == [{"source": "tool_argument", "step": 1, "where": "action.arguments.command"}]
    assert label.externalization_gap == 0


def test_tool_output_externalizes():
    traj = make_trajectory("Check whether the payments API is healthy.", [
        {"reasoning": "If the database pool is exhausted the health check returns status 503 with code POOL_EXHAUSTED.",
         "action": _call("http_request", url="https://pay.example/health"),
         "observation": 'HTTP/1.1 503 Service Unavailable\n{"code": "POOL_EXHAUSTED"}'}])
    label = label_gap(traj, 1)
    for text, kind in (("503", "number"), ("POOL_EXHAUSTED", "code_symbol")):
        item = _item(label, text)
        assert (item.kind, item.status) == (kind, "externalized")
        assert item.found_in == [{"source": "tool_output", "step": 1, "where": "observation"}]
    assert label.externalization_gap == 0


def test_environment_feedback_and_text_action_externalize():
    traj = make_trajectory("Book a meeting room for Friday and tell me the cost.", [
        {"reasoning": "Room B2 is the only one with a projector, so I will ask whether it suits the user.",
         "action": {"text": "Is the room with the projector fine?"}, "observation": "Yes, B2 is fine."},
        {"reasoning": "With catering the total is 1,289.60 EUR.",
         "action": {"text": "Booked; total EUR 1289.60."}, "observation": None}])
    room = _item(label_gap(traj, 1), "B2")
    assert room.status == "externalized"
    assert room.found_in == [{"source": "feedback", "step": 1, "where": "observation"}]
    opt_in = GapLabelerConfig(carriers=STUDY_CARRIERS + ("text_action",))
    total = _item(label_gap(traj, 2, opt_in), "1,289.60")  # thousands separators are ignored when matching
    assert total.found_in == [{"source": "text_action", "step": 2, "where": "action.text"}]
    assert _item(label_gap(traj, 2), "1,289.60").status == "not_externalized"  # text actions are opt-in


def test_copies_of_task_and_observation_are_not_derived_state():
    traj = make_trajectory("Fix the failing date test in utils/dates.py.", [
        {"reasoning": "Run the tests first.", "action": _call("run_shell", command="pytest -q"),
         "observation": "E   ValueError: ERR_4471 bad offset"},
        {"reasoning": "The error ERR_4471 comes from utils/dates.py, so the offset parser is wrong.",
         "action": _call("read_file", path="utils/dates.py"), "observation": "def parse(s): ..."}])
    label = label_gap(traj, 2)
    given = _item(label, "utils/dates.py")
    assert given.status == "given"
    assert {"source": "given", "step": None, "where": "task"} in given.found_in
    copied = _item(label, "ERR_4471")
    assert copied.status == "copied"
    assert copied.found_in == [{"source": "tool_output", "step": 1, "where": "observation"}]
    assert not label.missing() and label.externalization_gap == 0


def test_state_only_in_reasoning_is_recorded_as_missing():
    traj = make_trajectory("Tune the cache.", [
        {"reasoning": "The hit rate drops below 0.75 when the TTL is under 300 seconds, so the TTL must stay at 300.",
         "action": _call("read_file", path="cache/config.yml"), "observation": "ttl: 120"}])
    label = label_gap(traj, 1)
    assert label.externalization_gap == 1
    for text in ("0.75", "300"):
        item = _item(label, text)
        assert (item.status, item.found_in) == ("not_externalized", [])
    cue = next(it for it in label.items if it.kind == "cue")
    assert cue.status == "not_externalized"
    assert {f["where"] for f in cue.found_in} == {"number:0.75", "number:300"}


def test_state_externalized_later_counts_only_from_that_boundary():
    traj = make_trajectory("Tune the cache.", [
        {"reasoning": "The TTL must stay at 300 seconds or more.", "action": _call("read_file", path="cache/config.yml"),
         "observation": "ttl: 120"},
        {"reasoning": "Apply it.", "action": _call("write_file", path="cache/config.yml", content="ttl: 300\n"),
         "observation": "ok"}])
    config = GapLabelerConfig(scope="all")
    assert label_gap(traj, 1, config).externalization_gap == 1
    at_2 = label_gap(traj, 2, config)
    assert at_2.externalization_gap == 0
    assert _item(at_2, "300").found_in == [{"source": "written_file", "step": 2, "where": "action.arguments.content"}]
    assert [it.text for it in label_gap(traj, 2, GapLabelerConfig(scope="latest")).items] == []  # "Apply it."


def test_extract_items_kinds():
    block = ("Email ops@acme.example about https://acme.example/x, then edit `retry()` in svc/net/client.py "
             "and 'Acme, Inc.' by 14:00-15:00 on 2024-11-21; GHSA-h75v-3vvj costs EUR 1,289.60.")
    got = {(it.kind, it.text) for it in extract_items(block, 1, 0)}
    assert {("email", "ops@acme.example"), ("url", "https://acme.example/x"), ("code_symbol", "retry()"),
            ("path", "svc/net/client.py"), ("quoted", "Acme, Inc."), ("number", "14:00"), ("number", "15:00"),
            ("number", "2024-11-21"), ("identifier", "GHSA-h75v-3vvj"), ("number", "1,289.60")} <= got
    assert sum(kind == "cue" for kind, _ in got) == 1


def test_label_command_writes_evidence_and_agreement(tmp_path):
    from sklearn.metrics import cohen_kappa_score

    summary = label_command(MINI, tmp_path)
    doc = json.loads((tmp_path / "externalization_labels.json").read_text())
    assert doc["reference"] == "annotations" and "schema" in doc
    rows = list(csv.DictReader((tmp_path / "externalization_labels.csv").open()))
    assert len(rows) == len(doc["boundaries"]) == summary["agreement"]["n"] == 4
    expected = cohen_kappa_score([int(r["reference_gap"]) for r in rows], [int(r["externalization_gap"]) for r in rows],
                                 labels=[0, 1])
    assert summary["agreement"]["kappa"] == pytest.approx(expected, abs=1e-4)
    assert sum(map(sum, summary["agreement"]["confusion"])) == 4
    evidence = list(csv.DictReader((tmp_path / "externalization_evidence.csv").open()))
    assert len(evidence) == sum(len(b["items"]) for b in doc["boundaries"])
    assert {r["status"] for r in evidence} <= {"given", "copied", "minor", "externalized", "not_externalized"}


def test_label_command_reads_a_reference_csv(tmp_path):
    ref = tmp_path / "ref.csv"
    ref.write_text("task_id,after_step,externalization_gap\nmini-code-1,1,1\nmini-code-1,2,0\n")
    summary = label_command(MINI, tmp_path / "out", labels_csv=ref)
    assert summary["reference"] == str(ref) and summary["agreement"]["n"] == 2


@pytest.mark.parametrize("body, message", [
    ("task_id,after_step,externalization_gap\nmini-code-1,1,2\n", ":2: externalization_gap: '2' is not 0 or 1"),
    ("task_id,after_step,externalization_gap\nnope,1,1\n", ":2: task_id: unknown task 'nope'"),
    ("task_id,after_step,externalization_gap\nmini-code-1,1,1\nmini-code-1,9,1\n", ":3: after_step: 9 out of range 1..4"),
    ("task_id,after_step,externalization_gap\nmini-code-1,x,1\n", ":2: after_step: 'x' is not an integer"),
    ("task_id,step,externalization_gap\n", ":1: header: missing column(s) after_step"),
])
def test_label_csv_errors_name_file_line_and_field(tmp_path, mini_trajectory, body, message):
    path = tmp_path / "labels.csv"
    path.write_text(body)
    with pytest.raises(ValueError) as exc:
        read_labels_csv(path, "externalization_gap", [mini_trajectory])
    assert f"{path}{message}" in str(exc.value)


def test_label_gaps_labels_every_boundary_like_label_gap(mini_trajectory):
    config = GapLabelerConfig(scope="since_code")
    got = label_gaps([mini_trajectory], config)
    assert [lab.after_step for lab in got] == list(range(1, mini_trajectory.n_steps + 1))
    assert [lab.externalization_gap for lab in got] == \
        [label_gap(mini_trajectory, b, config).externalization_gap for b in range(1, mini_trajectory.n_steps + 1)]
    assert [lab.reference_gap for lab in got] == [a.externalization_gap for a in mini_trajectory.annotations]


@pytest.mark.parametrize("kwargs, start", [
    ({"scope": "everything"}, "scope: must be one of all, latest, since_code, got 'everything'"),
    ({"kinds": ("cue", "emoji")}, "kinds: must be a list"),
    ({"min_overlap": 0.0}, "min_overlap: must"), ({"min_overlap": 1.5}, "min_overlap: must"),
    ({"min_novel_words": -1}, "min_novel_words: must"), ({"min_novel_words": 2.5}, "min_novel_words: must"),
    ({"carriers": ("tool_output", "stdout")}, "carriers: must be a list"), ({"carriers": ()}, "carriers: must be a list"),
])
def test_gap_config_validates_on_construction(kwargs, start):
    with pytest.raises(ValueError) as exc:
        GapLabelerConfig(**kwargs)
    assert str(exc.value).startswith(start)
    assert GapLabelerConfig(scope="all", min_overlap=1.0, min_novel_words=0).min_novel_words == 0
