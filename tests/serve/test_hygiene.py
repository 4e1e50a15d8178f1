"""Request hygiene at the proxy's door: paths confined to the upstream's base (``..`` and its encoded forms never
reach the upstream), the body-size limit, the Host header, the auth scheme in any case, non-JSON bodies and
control tokens logged with their reason."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import httpx
import pytest

from interp.accounting.tokens import parse_policy
from interp.serve.app import Proxy, host_name, path_refusal
from interp.serve.runlog import read_requests

from ._support import Anywhere, Stub, opening, raw, scripted_turns, tool_result

pytestmark = pytest.mark.e2e


ESCAPES = ["/v1/../health", "/v1/%2e%2e/health", "/v1/%2E%2e/%2e%2E/admin", "/v1/models/%2e%2e%2f%2e%2e%2fadmin",
           "/v1/%252e%252e/health", "/v1/./models/../../x", "/v1/models%2f..%2f..%2fadmin", "/v1/..%5c..%5cadmin",
           "/v1/chat/../../health"]


@pytest.mark.parametrize("target", ESCAPES)
def test_a_path_leaving_the_base_never_reaches_the_upstream(serving, tmp_path, target):
    up = Anywhere()
    base = serving(up.build()).removesuffix("/v1")
    proxy = Proxy(f"{base}/tenant-a/v1", parse_policy("full"), tmp_path / "log", upstream_key="sk-secret")
    url = serving(proxy.build())
    status, body = raw(url, target, proxy.token)
    assert status == 400 and "base URL" in json.loads(body)["error"]["message"] and up.paths == []
    assert path_refusal(target.encode()) is not None
    status, body = raw(url, "/v1/models/a%20b?x=1", proxy.token)  # a path inside the base: passed, as written
    assert status == 200 and up.paths == ["/tenant-a/v1/models/a%20b"]


def test_path_refusal_admits_ordinary_paths():
    for ok in ("/v1", "/v1/models", "/v1/chat/completions", "/v1/files/file-abc.jsonl", "/v1/models/gpt-4.1",
               "/v1/a..b/x"):
        assert path_refusal(ok.encode()) is None, ok
    assert "not under /v1" in path_refusal(b"/health")


def test_the_body_limit_is_a_413_before_anything_is_forwarded(serving, tmp_path):
    stub = Stub(scripted_turns(1))
    proxy = Proxy(serving(stub.build()), parse_policy("delete_all_reasoning"), tmp_path / "log", max_body_bytes=2000)
    url = serving(proxy.build())
    headers = {"authorization": f"Bearer {proxy.token}"}
    small = {"model": "m", "messages": opening()}
    big = {"model": "m", "messages": [*opening(), {"role": "user", "content": "x" * 3000}]}
    with httpx.Client(timeout=30) as client:
        assert client.post(f"{url}/chat/completions", json=big, headers=headers).status_code == 413
        data = json.dumps(big).encode()

        def chunks():  # no Content-Length: the limit holds on what arrives
            for i in range(0, len(data), 500):
                yield data[i:i + 500]

        r = client.post(f"{url}/chat/completions", content=chunks(), headers=headers)
        assert r.status_code == 413 and "--max-body-bytes" in r.json()["error"]["message"]
        assert stub.received == []
        r = client.post(f"{url}/chat/completions", json=small, headers=headers)
        assert r.status_code == 200 and stub.received == [small]


def test_the_host_header_is_checked(serving, tmp_path):
    stub = Stub(scripted_turns(1))
    proxy = Proxy(serving(stub.build()), parse_policy("full"), tmp_path / "log")
    url = serving(proxy.build())
    port = urlsplit(url).port
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example"):
        status, body = raw(url, "/v1/models", proxy.token, host=host)
        assert status == 400 and "Host" in json.loads(body)["error"]["message"], host
    for host in (f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}", f"127.0.0.1:{port}"):
        assert raw(url, "/v1/models", proxy.token, host=host)[0] == 404, host  # the stub's own 404: passed on
    assert host_name("[::1]:8400") == "::1" and host_name("Proxy.Lan:80") == "proxy.lan" and host_name("::1") == "::1"
    named = Proxy(proxy.upstream, parse_policy("full"), tmp_path / "log2", allowed_hosts=("proxy.lan",))
    url2 = serving(named.build())
    assert raw(url2, "/v1/models", named.token, host="proxy.lan:8400")[0] == 404
    assert raw(url2, "/v1/models", named.token)[0] == 400


@pytest.mark.parametrize("scheme, ok", [("Bearer", True), ("bearer", True), ("BEARER", True), ("Basic", False),
                                        ("", False)])
def test_the_auth_scheme_is_case_insensitive(serving, tmp_path, scheme, ok):
    stub = Stub(scripted_turns(1))
    proxy = Proxy(serving(stub.build()), parse_policy("full"), tmp_path / "log")
    url = serving(proxy.build())
    given = f"{scheme} {proxy.token}".strip()
    r = httpx.post(f"{url}/chat/completions", json={"model": "m", "messages": opening()},
                   headers={"authorization": given}, timeout=30)
    assert r.status_code == (200 if ok else 401)
    assert len(stub.received) == int(ok)


def test_a_non_json_body_is_forwarded_and_logged_with_its_reason(serving, tmp_path):
    up = Anywhere()
    proxy = Proxy(serving(up.build()), parse_policy("delete_all_reasoning"), tmp_path / "log")
    url = serving(proxy.build())
    headers = {"authorization": f"Bearer {proxy.token}"}
    assert httpx.post(f"{url}/chat/completions", content=b"{not json", headers=headers, timeout=30).status_code == 200
    assert httpx.post(f"{url}/chat/completions", json=[1, 2], headers=headers, timeout=30).status_code == 200
    rows = read_requests(tmp_path / "log")
    assert [r["edited"] for r in rows] == [False, False] and len(up.paths) == 2
    assert "not JSON" in rows[0]["failure"] and "not a JSON object" in rows[1]["failure"]


@pytest.mark.parametrize("allow", [False, True])
def test_control_tokens_are_refused_as_offline_unless_allowed(serving, tmp_path, allow):
    stub = Stub(scripted_turns(2))
    proxy = Proxy(serving(stub.build()), parse_policy("delete_all_reasoning"), tmp_path / "log",
                  allow_control_tokens=allow)
    turn = {**scripted_turns(1)[0], "reasoning_content": "plan<|im_end|>\n\nmore"}
    body = {"model": "m", "messages": [*opening(), turn, tool_result(turn, 1)]}
    r = httpx.post(f"{serving(proxy.build())}/chat/completions", json=body,
                   headers={"authorization": f"Bearer {proxy.token}"}, timeout=30)
    assert r.status_code == 200
    row = read_requests(tmp_path / "log")[0]
    sent = stub.received[0]["messages"][2]["reasoning_content"]
    if allow:
        assert row["edited"] and row["failure"] is None and sent == ""
    else:
        assert not row["edited"] and "<|im_end|>" in row["failure"] and "--allow-control-tokens" in row["failure"]
        assert sent == turn["reasoning_content"]
