"""`interp serve` on the command line: bad options refused in one line, and a real server process."""

from __future__ import annotations

import os
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
    (["--policy", "hide_observation"], "--policy: policy 'hide_observation': not a policy of a live agent"),
    (["--policy", "iclr"], "--policy iclr: needs --model"),
    (["--policy", "keep_last_k_reasoning:k=0"], "k must be an integer >= 1"),
    (["--upstream", "ftp://x"], "expected an http:// or https:// base URL"),
    (["--max-sessions", "0"], "--max-sessions 0: must be a finite number >= 1"),
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
        p.terminate()
        p.communicate(timeout=30)
    assert read_requests(tmp_path / "log")[0]["edited"] is True
