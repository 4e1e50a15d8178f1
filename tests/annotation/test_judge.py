"""The judge labeller against a scripted local server: labels, missing-not-zero, retries, pacing, resume after kill."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from interp.annotation.judge import JudgeClient, JudgeConfig, folder_for, parse_answer, run_judge, system_prompt
from interp.annotation.session import SHORT, build_queue
from interp.data.labels import annotation_labels, read_labels_csv
from interp.data.trajectory import load_trajectories
from interp.pipelines.cli import app
from tests.annotation._stub_llm import StubLLM

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TASKS = ("web-002", "security-002")  # two demo trajectories: 6 + 7 steps, 13 G and 11 y items


@pytest.fixture
def trajs_path(tmp_path: Path) -> Path:
    lines = [ln for ln in (ROOT / "data/demo/trajectories.jsonl").read_text().splitlines()
             if json.loads(ln)["task_id"] in TASKS]
    path = tmp_path / "trajs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def truth(path: Path) -> dict[str, dict[tuple[str, int], int]]:
    """The demo annotations of the test trajectories (what the scripted judge answers)."""
    trajs = load_trajectories(path)
    return {f: annotation_labels(trajs, f) for f in ("externalization_gap", "future_necessity")}


def answering(labels: dict[str, dict[tuple[str, int], int]]):
    """A script answering each item with its annotation: the label line first (``G: 1``), then a rationale."""
    def script(item, attempt):
        task, b, field = item
        return ("answer", f"{SHORT[field]}: {labels[field][(task, b)]}\n={task} at {b}")
    return script


def judge_cli(stub: StubLLM, trajs: Path, out: Path, *extra: str):
    return CliRunner().invoke(app, ["labels", "judge", "--trajectories", str(trajs), "--labels", str(out),
                                    "--base-url", stub.base_url, "--model", "stub-model", "--backoff", "0",
                                    *extra], env={"OPENAI_API_KEY": "sekret-key"})


def test_the_judge_labels_every_item_with_the_guideline_as_rubric(trajs_path, tmp_path):
    labels = truth(trajs_path)
    out = tmp_path / "judge.csv"
    with StubLLM(answering(labels)) as stub:
        result = judge_cli(stub, trajs_path, out)
    assert result.exit_code == 0, result.output
    queue = build_queue(load_trajectories(trajs_path), "both")
    assert sorted(stub.asked()) == sorted((i.task_id, i.after_step, i.field) for i in queue) and len(queue) == 24
    for field, expected in labels.items():
        got = read_labels_csv(out, field)
        defined = {k: v for k, v in expected.items() if field == "externalization_gap" or
                   k[1] < {"web-002": 6, "security-002": 7}[k[0]]}
        assert got == defined
    rows = list(csv.DictReader(out.open()))
    from interp.annotation.judge import sha256_text

    assert {r["annotator"] for r in rows} == {"judge:stub-model"} and {r["model"] for r in rows} == {"stub-model"}
    assert {r["prompt_sha256"] for r in rows} == {sha256_text(system_prompt())}
    assert all(r["missing"] == "" for r in rows)
    for req in stub.requests:
        task, b, field = req["item"]
        assert req["path"] == "/v1/chat/completions" and req["headers"]["Authorization"] == "Bearer sekret-key"
        assert req["body"]["messages"][0]["content"].startswith("# Labelling guideline")
        later = f"### Step {b + 1}\n" in req["user"]
        assert later == (field == "future_necessity"), (task, b, field)  # G never sees a later step
        assert f"### Step {b}\n" in req["user"]
    for path in (out, folder_for(out) / "journal.jsonl"):
        assert "sekret-key" not in path.read_text()
    assert "24 asked, 0 cached" in result.output


def test_interp_label_judge_is_labels_judge(trajs_path, tmp_path):
    """``interp label --judge`` runs ``interp labels judge`` (the issue's name for it): same options, same labels."""
    labels = truth(trajs_path)
    rows = {}
    for command in (["labels", "judge"], ["label", "--judge"]):
        out = tmp_path / f"{command[0]}.csv"
        with StubLLM(answering(labels)) as stub:
            result = CliRunner().invoke(app, [*command, "--trajectories", str(trajs_path), "--labels", str(out),
                                              "--base-url", stub.base_url, "--model", "stub-model", "--task", "g"])
        assert result.exit_code == 0, result.output
        assert len(stub.requests) == 13 and "13 asked, 0 cached" in result.output
        assert read_labels_csv(out, "externalization_gap") == labels["externalization_gap"]
        rows[command[0]] = [{k: v for k, v in r.items() if k != "time"} for r in csv.DictReader(out.open())]
    assert rows["label"] == rows["labels"]
    runner = CliRunner()
    assert "--base-url" in runner.invoke(app, ["label", "--judge", "--help"]).output
    assert "--judge" in runner.invoke(app, ["label", "--help"]).output
    plain = runner.invoke(app, ["label", "--trajectories", str(trajs_path), "--out", str(tmp_path / "rule"),
                                "--base-url", "http://x/v1"])
    assert plain.exit_code == 2 and "--base-url" in plain.output  # without --judge: the rule labeller's options only


def test_max_items_asks_the_shortest_prompts_first_and_a_later_run_the_rest(trajs_path, tmp_path):
    labels = truth(trajs_path)
    out = tmp_path / "judge.csv"
    with StubLLM(answering(labels)) as stub:
        assert judge_cli(stub, trajs_path, out, "--task", "g", "--max-items", "3").exit_code == 0
        sizes = [len(r["user"]) for r in stub.requests]
    queue = build_queue(load_trajectories(trajs_path), "g")
    assert len(sizes) == 3 and sizes == sorted(sizes)
    with StubLLM(answering(labels)) as rest:
        result = judge_cli(rest, trajs_path, out, "--task", "g")
        assert result.exit_code == 0 and "10 asked, 3 cached" in result.output
        assert max(sizes) <= min(len(r["user"]) for r in rest.requests)  # the three were the shortest
    assert len(stub.requests) + len(rest.requests) == len(queue)
    assert read_labels_csv(out, "externalization_gap") == labels["externalization_gap"]
    assert "--max-items: must be >= 1" in str(judge_cli(rest, trajs_path, out, "--max-items", "0").exception)


@pytest.mark.parametrize("reply, reason", [
    (("raw", b"<html>gateway</html>"), "malformed response"),
    (("answer", "Yes, I think the state is only in reasoning."), "unparseable answer"),
    (("answer", "G: 2\nx"), "first line is not G: 0 or G: 1"),
    (("answer", '{"label": 1, "rationale": "JSON is not the format asked for"}'), "unparseable answer"),
    (("answer", "G: 1\nor, reading it again, G: 0"), "states both G: 0 and G: 1"),
    (("answer", ""), "empty answer"),
    (("status", 401), "HTTP 401"),
    (("status", 503), "HTTP 503"),
    (("hold",), "timeout after 0.3 s"),
])
def test_a_failure_or_an_unusable_answer_is_missing_never_zero(trajs_path, tmp_path, reply, reason):
    labels = truth(trajs_path)
    target = ("web-002", 2, "externalization_gap")  # annotated G = 1 there

    def script(item, attempt):
        return reply if item == target else answering(labels)(item, attempt)

    out = tmp_path / "judge.csv"
    with StubLLM(script) as stub:
        result = judge_cli(stub, trajs_path, out, "--task", "g", "--retries", "1", "--timeout", "0.3")
        assert result.exit_code == 0, result.output
        retried = reply[0] in ("hold",) or reply == ("status", 503)
        assert stub.asked().count(target) == (2 if retried else 1)
    got = read_labels_csv(out, "externalization_gap")
    assert ("web-002", 2) not in got and len(got) == 12
    row = next(r for r in csv.DictReader(out.open()) if (r["task_id"], r["after_step"]) == ("web-002", "2"))
    assert row["externalization_gap"] == "" and row["missing"].startswith("G: ") and reason in row["missing"]
    journal = [json.loads(x) for x in (folder_for(out) / "journal.jsonl").read_text().splitlines()]
    rec = next(e for e in journal if e["event"] == "answer" and e["after_step"] == 2 and e["task_id"] == "web-002")
    assert rec["label"] is None and reason in rec["problem"]

    answered = reply[0] == "answer"  # the model replied, unusably: kept unless --retry-missing
    assert rec["answered"] is answered
    if answered:
        with StubLLM(answering(labels)) as again:
            assert judge_cli(again, trajs_path, out, "--task", "g").exit_code == 0
            assert again.asked() == []
    with StubLLM(answering(labels)) as again:  # a re-run asks only the missing item again
        assert judge_cli(again, trajs_path, out, "--task", "g", "--retry-missing").exit_code == 0
        assert again.asked() == [target]
    assert read_labels_csv(out, "externalization_gap")[("web-002", 2)] == 1


def test_429_and_5xx_are_retried_with_backoff_and_retry_after(trajs_path):
    waits: list[float] = []
    seq = {1: ("status", 429), 2: ("status", 502), 3: ("status", 500), 4: ("answer", "G: 1")}
    with StubLLM(lambda item, attempt: seq[attempt]) as stub:
        client = JudgeClient(JudgeConfig(stub.base_url, "m", backoff_s=0.25, max_retries=3), sleep=waits.append)
        answer = client.ask([{"role": "user", "content": "Label G (externalization_gap) at boundary b = 1 of "
                                                         "trajectory t (2 steps)."}], "G")
    assert (answer.label, answer.attempts, answer.problem) == (1, 4, "")
    assert waits == [0.0, 0.25 * 2, 0.25 * 4]  # Retry-After: 0 on the 429, then the doubling backoff
    with StubLLM(lambda item, attempt: ("status", 503)) as stub:
        client = JudgeClient(JudgeConfig(stub.base_url, "m", backoff_s=0, max_retries=2), sleep=waits.append)
        answer = client.ask([{"role": "user", "content": "Label y (future_necessity) at boundary b = 1 of "
                                                         "trajectory t (2 steps)."}], "y")
        assert len(stub.requests) == 3
    assert answer.label is None and answer.problem.endswith("after 3 attempts") and "HTTP 503" in answer.problem


def test_a_refused_connection_is_retried_then_missing():
    waits: list[float] = []
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = JudgeClient(JudgeConfig(f"http://127.0.0.1:{port}/v1", "m", backoff_s=1, max_retries=2),
                         sleep=waits.append)
    answer = client.ask([{"role": "user", "content": "x"}], "G")
    assert answer.label is None and "connection failed" in answer.problem and waits == [1, 2]


def test_requests_are_paced_by_the_rate_limit():
    """Fake clock: the client sleeps exactly what is left of min_interval_s since the previous request began."""
    now = [100.0]
    slept: list[float] = []

    def post(url, body, headers, timeout):
        now[0] += 0.4  # each request takes 0.4 s of the fake clock
        return 200, {}, json.dumps({"choices": [{"message": {"content": "G: 0"}}]}).encode()

    def sleep(s):
        slept.append(round(s, 6))
        now[0] += s

    client = JudgeClient(JudgeConfig("http://x/v1", "m", min_interval_s=1.5), post=post, sleep=sleep,
                         clock=lambda: now[0])
    for _ in range(3):
        assert client.ask([{"role": "user", "content": "x"}], "G").label == 0
    assert slept == [1.1, 1.1]


@pytest.mark.parametrize("text, name, label, rationale", [
    ("G: 1\nThe plan is only in the reasoning.", "G", 1, "The plan is only in the reasoning."),
    ("**y: 0**\n\nNothing later re-derives it.", "y", 0, "Nothing later re-derives it."),
    ("  g:1", "G", 1, ""),
    ("G: 0.\nG: 0 since the report holds it", "G", 0, "G: 0 since the report holds it"),
    ("G: 1\nThe window 14:00-16:00 is only in reas", "G", 1, "The window 14:00-16:00 is only in reas"),  # cut short
])
def test_parse_answer_takes_the_label_line_first(text, name, label, rationale):
    assert parse_answer(text, name) == (label, rationale, "")


@pytest.mark.parametrize("text, name", [
    ("label: 1", "G"), ("1", "G"), ("G = 1", "G"), ("G: 1.5", "G"), ("G: 10", "G"), ("G: 0 or G: 1", "G"),
    ("G: 1\nactually G: 0", "G"), ('{"label": 1, "rationale": "x"}', "G"), ("y: 1", "G"),
    ("The answer is G: 1", "G"), ("", "y"), ("\n  \n", "y"),
])
def test_parse_answer_refuses_anything_but_exactly_one_label(text, name):
    label, _, problem = parse_answer(text, name)
    assert label is None and problem


def test_bad_settings_fail_before_anything_is_written(trajs_path, tmp_path):
    for args, message in ((["--base-url", "ftp://x"], "--base-url"), (["--base-url", "http://x/v1", "--model", " "],
                                                                       "--model")):
        result = CliRunner().invoke(app, ["labels", "judge", "--trajectories", str(trajs_path), "--labels",
                                          str(tmp_path / "o" / "j.csv"), "--model", "m", *args])
        assert result.exit_code != 0 and message in str(result.exception or result.output)
    assert not (tmp_path / "o").exists()


def test_a_killed_judge_resumes_where_it_stopped(trajs_path, tmp_path):
    """SIGKILL while the 5th request is in flight (the stub holds it and signals); the re-run asks from there."""
    labels = truth(trajs_path)
    out = tmp_path / "judge.csv"
    queue = [(i.task_id, i.after_step, i.field) for i in build_queue(load_trajectories(trajs_path), "g")]

    def script(item, attempt):
        return ("block",) if item == queue[4] else answering(labels)(item, attempt)

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    with StubLLM(script) as stub:
        proc = subprocess.Popen([sys.executable, "-m", "interp", "labels", "judge", "--trajectories", str(trajs_path),
                                 "--labels", str(out), "--base-url", stub.base_url, "--model", "stub-model",
                                 "--task", "g"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            assert stub.blocked.wait(timeout=300), "the judge never sent the 5th request"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        assert stub.asked() == queue[:5]
    assert read_labels_csv(out, "externalization_gap") == {k[:2]: labels["externalization_gap"][k[:2]]
                                                           for k in queue[:4]}
    with StubLLM(answering(labels)) as again:
        result = judge_cli(again, trajs_path, out, "--task", "g")
        assert result.exit_code == 0, result.output
        assert again.asked() == queue[4:]
    assert read_labels_csv(out, "externalization_gap") == labels["externalization_gap"]
    assert "9 asked, 4 cached" in result.output


def test_a_changed_model_or_trajectory_is_asked_again(trajs_path, tmp_path):
    labels = truth(trajs_path)
    out = tmp_path / "judge.csv"
    with StubLLM(answering(labels)) as stub:
        assert judge_cli(stub, trajs_path, out, "--task", "g").exit_code == 0
    text = trajs_path.read_text().replace("Is the Freiburg city library", "Is the Freiburg public library")
    trajs_path.write_text(text)
    with StubLLM(answering(labels)) as stub:
        assert judge_cli(stub, trajs_path, out, "--task", "g").exit_code == 0
        assert {t for t, _, _ in stub.asked()} == {"web-002"} and len(stub.asked()) == 6


def test_run_judge_refuses_a_second_judge_on_the_same_output(trajs_path, tmp_path):
    from interp.io import WriterLocked, writer_lock

    out = tmp_path / "judge.csv"
    with writer_lock(folder_for(out), command="other"):
        with pytest.raises(WriterLocked, match="another run is writing here"):
            run_judge(trajs_path, out, JudgeConfig("http://127.0.0.1:9/v1", "m"), "g")


def test_long_texts_are_cut_in_the_middle_with_a_marker(trajs_path):
    from interp.annotation.judge import _cut, item_prompt
    from interp.annotation.session import Item

    text = "A" * 300 + "B" * 400 + "C" * 300
    cut = _cut(text, 200)
    assert cut == "A" * 100 + "\n[... 800 characters cut ...]\n" + "C" * 100 and _cut("short", 200) == "short"
    traj = next(t for t in load_trajectories(trajs_path) if t.task_id == "security-002")
    whole, short = (item_prompt(traj, Item("security-002", 7, "externalization_gap"), n) for n in (100_000, 200))
    longest = max(len(o) for s in traj.steps for o in s.observations)
    assert longest > 200 and "characters cut" not in whole and "characters cut" in short and len(short) < len(whole)
    for t, step in enumerate(traj.steps, start=1):  # every step keeps its head and its tail
        assert f"### Step {t}\n" in short and step.observations[0][-50:] in short
