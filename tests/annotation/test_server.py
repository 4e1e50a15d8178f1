"""The server answers only on 127.0.0.1, only with the token, only for the Host it serves; one per output."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tests.annotation._support import ROOT, Server, free_port, record, step, write_jsonl

pytestmark = pytest.mark.e2e


@pytest.fixture()
def server(tmp_path):
    traj = write_jsonl(tmp_path / "runs.jsonl", [record("t0", [step(t) for t in range(1, 4)])])
    srv = Server("--trajectories", str(traj), "--labels", str(tmp_path / "a.csv"), "--annotator", "alice",
                 "--port", str(free_port()), cwd=tmp_path)
    yield srv
    srv.stop()


def status(url: str, headers: dict | None = None, data: bytes | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers or {}), timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_request_without_the_token_is_refused(server, tmp_path):
    wrong = server.token[:-1] + ("B" if server.token.endswith("A") else "A")
    for path in ("/", "/app.js", "/app.css", "/api/state", "/api/item/0"):
        assert status(server.base + path) == 403, path
        assert status(server.base + path, {"X-Annotate-Token": wrong}) == 403, path
        assert status(server.base + path, {"X-Annotate-Token": server.token}) == 200, path
    assert status(server.url) == 200  # the printed URL carries the token
    body = json.dumps({"index": 0, "value": 1}).encode()
    assert status(server.base + "/api/label", {"Content-Type": "application/json"}, body) == 403
    assert '"event":"label"' not in (tmp_path / "a.csv.annotate" / "journal.jsonl").read_text()
    assert status(server.base + "/api/label", {"X-Annotate-Token": server.token}, body) == 200
    assert status(server.base + "/api/label", {"X-Annotate-Token": server.token},
                  json.dumps({"index": 99, "value": 1}).encode()) == 400
    assert status(server.base + "/api/label", {"X-Annotate-Token": server.token},
                  json.dumps({"index": 0, "value": "1"}).encode()) == 400


def test_refused_with_the_wrong_host_header(server):
    port = server.base.rsplit(":", 1)[1]
    with socket.create_connection(("127.0.0.1", int(port)), timeout=10) as sock:  # DNS rebinding: Host is checked
        sock.sendall(f"GET /api/state?token={server.token} HTTP/1.1\r\nHost: evil.example:{port}\r\n"
                     "Connection: close\r\n\r\n".encode())
        assert sock.recv(100).startswith(b"HTTP/1.1 400")


def non_loopback_address() -> str | None:
    """This host's address on its default route (no packet is sent), or None without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def test_not_reachable_on_a_non_loopback_address(server):
    port = int(server.base.rsplit(":", 1)[1])
    address = non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to try")
    with pytest.raises(OSError):
        socket.create_connection((address, port), timeout=5).close()
    socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_a_second_server_on_the_same_output_is_refused(server, tmp_path):
    done = subprocess.run([sys.executable, "-m", "interp", "annotate", "--trajectories", str(tmp_path / "runs.jsonl"),
                           "--labels", str(tmp_path / "a.csv"), "--annotator", "alice", "--port", "0"],
                          cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "another run is writing here" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def post(server, path: str, data: bytes, headers: dict | None = None) -> tuple[int, str]:
    req = urllib.request.Request(server.base + path, data=data, headers={"X-Annotate-Token": server.token,
                                                                         **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_api_answers_bad_bodies_with_a_400_or_413_never_a_500(server, tmp_path):
    from interp.annotation.server import MAX_BODY

    cases = [(b"[" * 20_000 + b"]" * 20_000, 400, "nested too deeply"),
             (b'{"index": 0, "value": 1.0}', 400, "value: expected a JSON integer, got 1.0"),
             (b'{"index": 0, "value": 1, "x": [[[]]]}', 400, "unknown field"),
             (b"{oops", 400, "not JSON"),
             (b'{"index": 0, "value": 1, "pad": "' + b"x" * MAX_BODY + b'"}', 413, "allowed")]
    for body, code, message in cases:
        got, text = post(server, "/api/label", body)
        assert got == code and message in json.loads(text)["error"] and "Traceback" not in text, (body[:30], text)
    journal = (tmp_path / "a.csv.annotate" / "journal.jsonl").read_text()
    assert '"event":"label"' not in journal
    assert post(server, "/api/label", b'{"index": 0, "value": 1}')[0] == 200


def test_behind_jupyter_server_proxy_its_forwarded_requests_pass_whatever_their_host(tmp_path):
    traj = write_jsonl(tmp_path / "runs.jsonl", [record("t0", [step(t) for t in range(1, 3)])])
    srv = Server("--trajectories", str(traj), "--labels", str(tmp_path / "p.csv"), "--annotator", "alice",
                 "--port", str(free_port()), "--behind-proxy", cwd=tmp_path)
    try:
        port = int(srv.base.rsplit(":", 1)[1])

        def first_line(headers: str) -> bytes:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(f"GET /api/state?token={srv.token} HTTP/1.1\r\nHost: hub.example.org\r\n{headers}"
                             "Connection: close\r\n\r\n".encode())
                return sock.recv(100).split(b"\r\n")[0]

        assert first_line(f"X-Forwarded-Context: /user/alice/proxy/{port}\r\n") == b"HTTP/1.1 200 OK"
        assert first_line("").startswith(b"HTTP/1.1 400")  # not forwarded by the proxy: the Host check holds
        assert f"through Jupyter: {{base_url}}proxy/{port}/?token={srv.token}" in srv.log.read_text()
    finally:
        srv.stop()


def test_the_page_carries_the_guideline_and_a_forwarded_request_needs_behind_proxy(server):
    from interp.annotation.guideline import guideline_html

    page = server.get("/").decode()
    assert guideline_html() in page and '<details id="guideline">' in page
    assert 'href="app.css?' in page and 'src="app.js?' in page and '"/api' not in page  # relative URLs only
    port = int(server.base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:  # not started --behind-proxy
        sock.sendall(f"GET /api/state?token={server.token} HTTP/1.1\r\nHost: hub.example.org\r\n"
                     f"X-Forwarded-Context: /proxy/{port}\r\nConnection: close\r\n\r\n".encode())
        assert sock.recv(100).startswith(b"HTTP/1.1 400")
