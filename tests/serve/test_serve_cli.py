"""`interp serve` on the command line: bad options refused in one line, and a real server process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from interp.pipelines.cli import main
from interp.serve.runlog import read_requests

from ._support import Stub, opening, scripted_turns

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def interp(*args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "interp", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env})


@pytest.mark.parametrize("args, message", [
    (["--policy", "hide_observation"], "policy 'hide_observation': not a policy of a live agent"),
    (["--policy", "iclr"], "--policy iclr: needs --model"),
    (["--policy", "drsr_gate"], "--policy drsr_gate: needs --model"),
    (["--policy", "drsr_gate", "--model", "tiny-qwen3.5"], "--gate-scorer: given exactly when --policy is drsr_gate"),
    (["--policy", "drsr_gate", "--model", "tiny-qwen3.5", "--gate-scorer", "no/such.json"],
     "no/such.json: no gate scorer file"),
    (["--gate-scorer", "no/such.json"], "--gate-scorer: given exactly when --policy is drsr_gate"),
    (["--policy", "keep_last_k_reasoning:k=0"], "k must be an integer >= 1"),
    (["--upstream", "ftp://x"], "expected an http:// or https:// base URL"),
    (["--max-sessions", "0"], "--max-sessions: must be an integer >= 1, got 0"),
    (["--provider", "claude"], "--provider: must be one of auto, openai-chat, deepseek, anthropic, openai-responses"),
    (["--port", "-5"], "--port: must be an integer in [0, 65535], got -5"),
    (["--port", "70000"], "--port: must be an integer in [0, 65535], got 70000"),
    (["--session-ttl", "0"], "--session-ttl: must be a number > 0"),
    (["--threads", "0"], "--threads: must be an integer >= 1"),
    (["--decide", "later"], "--decide: must be one of sync, async"),
    (["--max-body-bytes", "0"], "--max-body-bytes: must be an integer >= 1"),
])
def test_bad_options_are_one_line_errors(tmp_path, monkeypatch, capsys, args, message):
    base = {"--upstream": "http://127.0.0.1:9/v1", "--log-dir": str(tmp_path / "log")}
    for k, v in zip(args[::2], args[1::2]):
        base[k] = v
    monkeypatch.setattr(sys, "argv", ["interp", "serve", *[x for kv in base.items() for x in kv]])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "log").exists()


@pytest.mark.slow  # a CLI process start: about 30 s on a loaded 2-core machine
def test_a_server_process_proxies_and_logs(serving, tmp_path):
    stub = Stub(scripted_turns(2))
    upstream = serving(stub.build())
    p = interp("serve", "--upstream", upstream, "--log-dir", str(tmp_path / "log"), "--port", "0",
               "--policy", "delete_all_reasoning", INTERP_SERVE_TOKEN="t0k3n")
    try:
        line = p.stdout.readline()  # printed once the socket listens: requests queue until it serves
        assert line.startswith("interp serve: http://127.0.0.1:"), line + p.stderr.read()
        url = line.split()[2]
        turns = scripted_turns(2)
        body = {"model": "m", "messages": [*opening(), turns[0], {"role": "tool", "tool_call_id": "call_1",
                                                                  "content": "ok"}]}
        r = httpx.post(f"{url}/chat/completions", json=body, headers={"authorization": "Bearer t0k3n"}, timeout=60)
        assert r.status_code == 200 and r.json()["choices"][0]["message"] == turns[1]
        assert stub.received[0]["messages"][2]["reasoning_content"] == ""
    finally:
        p.send_signal(signal.SIGINT)  # Ctrl-C: the proxy stops; no batch job's "re-run to resume" line
        out, err = p.communicate(timeout=60)
    assert "interp serve: stopped" in out and "re-run" not in err and "Traceback" not in err, (out, err)
    assert read_requests(tmp_path / "log")[0]["edited"] is True


def _row(**over) -> dict:
    from interp.serve.runlog import REQUEST_FIELDS

    row = {f.name: None for f in REQUEST_FIELDS}
    row.update(session="s", request=1, time=0.0, policy="full", stream=False, status=200, n_messages=2, n_steps=0,
               edited=False, prompt_tokens=10, completion_tokens=2, sensor_seconds=0.0, proxy_seconds=0.0,
               upstream_seconds=0.0, cache_bytes=0, sessions=1, removed_tokens=0, removed_measure="unedited",
               api="chat", provider="openai-chat", attempt=1, coarsened=[], lag=0, evicted=[])
    row.update(over)
    return row


@pytest.mark.parametrize("lines, prices, message", [
    ([_row(), {**_row(), "request": "2"}], None, "requests.jsonl:2: request: expected an integer"),
    ([_row(), "{oops"], None, "requests.jsonl:2: not JSON"),
    ([_row(prompt_tokens=None)], None, "session s request 1: no usage reported"),
    ([_row()], {"uncached_input": 1, "cache_read": 1, "cache_write": 1, "output": -1}, "output: expected a price"),
])
def test_bad_run_logs_and_prices_are_one_line_errors(tmp_path, monkeypatch, capsys, lines, prices, message):
    import json

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "requests.jsonl").write_text(
            "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    args = ["interp", "tokens", "--trajectories", str(tmp_path / "a"), "--paired", str(tmp_path / "b"),
            "--out", str(tmp_path / "o")]
    if prices is not None:
        (tmp_path / "p.json").write_text(json.dumps(prices))
        args += ["--prices", str(tmp_path / "p.json")]
    monkeypatch.setattr(sys, "argv", args)
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "o" / "paired.json").exists()


def test_a_run_log_written_before_the_new_fields_reads_with_their_defaults(tmp_path):
    """Rows of a proxy that had no Messages/Responses APIs, provider rules, measures or async decisions read as
    that proxy behaved; a field it did write is still required."""
    import json

    new = ("api", "provider", "attempt", "coarsened", "removed_measure", "lag", "evicted")
    old = [{k: v for k, v in _row(**over).items() if k not in new}
           for over in ({}, {"request": 2, "edited": True, "removed_tokens": 5},
                        {"request": 3, "edited": True, "removed_tokens": None})]
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    rows = read_requests(tmp_path)
    assert [{k: r[k] for k in new if k != "removed_measure"} for r in rows] == \
        [{"api": "chat", "provider": "openai-chat", "attempt": 1, "coarsened": [], "lag": 0, "evicted": []}] * 3
    assert [(r["removed_tokens"], r["removed_measure"]) for r in rows] == [(0, "unedited"), (5, "strings"),
                                                                           (None, "unknown")]
    (tmp_path / "requests.jsonl").write_text(json.dumps({k: v for k, v in old[0].items() if k != "status"}) + "\n")
    with pytest.raises(ValueError, match="requests.jsonl:1: status: missing"):
        read_requests(tmp_path)
