"""Judge runs that cannot hang or shrink: a total deadline per request (a reply trickled byte by byte is cut), a
Retry-After honoured up to a cap and logged, a ``--max-items`` pilot after a full run keeps every row, and a run
whose every request failed exits non-zero with the endpoint's error. Loopback servers, synchronised on events."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from interp.annotation.judge import JudgeClient, JudgeConfig, http_post
from interp.data.labels import read_label_table
from interp.pipelines.cli import app
from tests.annotation._stub_llm import StubLLM
from tests.annotation.test_judge import answering, judge_cli, trajs_path, truth  # noqa: F401 (a fixture)

pytestmark = pytest.mark.e2e

ITEM = [{"role": "user", "content": "Label G (externalization_gap) at boundary b = 1 of trajectory t (2 steps)."}]


class Trickle:
    """A server that answers every connection one byte at a time, forever (a byte per 20 ms, paced on an event);
    ``cut`` is set when the client closed the connection, ``sent`` counts the bytes it got out."""

    def __init__(self, where: str):
        self.where = where
        self.cut = threading.Event()
        self.stop = threading.Event()
        self.sent = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.thread = threading.Thread(target=self.serve, daemon=True)

    def serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            conn.recv(65536)
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
            reply = (b"" if self.where == "head" else head) + b"x" * 100000
            try:
                if self.where == "body":
                    conn.sendall(head)
                for byte in reply:
                    if self.stop.wait(0.02):
                        return
                    conn.send(bytes([byte]))
                    self.sent += 1
            except OSError:  # the client shut the connection: the reply was cut
                self.cut.set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1/chat/completions"

    def __enter__(self) -> Trickle:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.listener.close()


@pytest.mark.parametrize("where", ["body", "head"])
def test_a_reply_trickled_byte_by_byte_ends_at_the_deadline(where):
    """Each byte comes well within any per-read timeout; only a total deadline ends the request."""
    with Trickle(where) as server:
        with pytest.raises(TimeoutError):
            http_post(server.url, b"{}", {"Content-Type": "application/json"}, 0.3)
        assert server.cut.wait(timeout=60), "the server was never cut off"
        assert server.sent < 100000
    with Trickle(where) as server:
        client = JudgeClient(JudgeConfig(server.url.rsplit("/chat", 1)[0], "m", timeout_s=0.3, max_retries=0))
        answer = client.ask(ITEM, "G")
        assert answer.label is None and answer.problem == "timeout after 0.3 s after 1 attempts"


def test_a_long_retry_after_is_cut_to_the_cap_and_logged():
    waits: list[float] = []
    logged: list[str] = []
    seq = {1: ("status", 429, "100000"), 2: ("status", 429, "Wed, 21 Oct 2099 07:28:00 GMT"),
           3: ("status", 429, "soon"), 4: ("answer", "G: 1")}
    with StubLLM(lambda item, attempt: seq[attempt]) as stub:
        client = JudgeClient(JudgeConfig(stub.base_url, "m", backoff_s=0.5, max_retries=3, max_wait_s=2),
                             sleep=waits.append, log=logged.append)
        answer = client.ask(ITEM, "G")
    assert (answer.label, answer.attempts) == (1, 4)
    assert waits == [2, 2, 0.5 * 4]  # the cap twice (seconds, then a date), the backoff for a malformed value
    assert logged[0] == ("HTTP 429: the server asks to wait 100000 s (Retry-After); waiting 2 s (the cap, "
                         "--max-wait 2) before retry 1 of 3")
    assert "(the cap, --max-wait 2)" in logged[1] and "'soon' is neither seconds nor a date" in logged[2]


def test_the_command_with_a_huge_retry_after_ends_and_says_so(trajs_path, tmp_path):
    labels = truth(trajs_path)
    script = answering(labels)
    with StubLLM(lambda item, attempt: ("status", 429, "3600") if attempt == 1 else script(item, attempt)) as stub:
        result = judge_cli(stub, trajs_path, tmp_path / "j.csv", "--task", "g", "--max-wait", "0.01",
                           "--max-items", "2")
    assert result.exit_code == 0, result.output
    assert result.output.count("the server asks to wait 3600 s (Retry-After); waiting 0.01 s") == 2


def test_a_max_items_pilot_after_a_full_run_keeps_every_row(trajs_path, tmp_path):
    labels = truth(trajs_path)
    out = tmp_path / "judge.csv"
    with StubLLM(answering(labels)) as stub:
        assert judge_cli(stub, trajs_path, out).exit_code == 0
    full = out.read_bytes()
    rows = read_label_table(out)[1]
    assert len(rows) == 13  # every boundary of the two trajectories
    with StubLLM(answering(labels)) as stub:
        result = judge_cli(stub, trajs_path, out, "--max-items", "2")
        assert result.exit_code == 0, result.output
        assert stub.asked() == []  # cached
    assert read_label_table(out)[1] == rows and out.read_bytes() == full


def test_a_run_that_reached_no_endpoint_exits_non_zero_with_its_error(trajs_path, tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = CliRunner().invoke(app, ["labels", "judge", "--trajectories", str(trajs_path), "--labels",
                                      str(tmp_path / "j.csv"), "--base-url", f"http://127.0.0.1:{port}/v1",
                                      "--model", "m", "--retries", "0", "--max-items", "2"])
    assert result.exit_code != 0
    message = str(result.exception)
    assert "every one of 2 requests failed, nothing labelled" in message and "Connection refused" in message
    journal = [json.loads(line) for line in (tmp_path / "j.csv.judge" / "journal.jsonl").read_text().splitlines()]
    assert [e["answered"] for e in journal if e["event"] == "answer"] == [False, False]
    assert Path(tmp_path / "j.csv").exists()
