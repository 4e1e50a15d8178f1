"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1 for the judge's tests.

``StubLLM(script)`` serves ``POST /v1/chat/completions``. For every request it
reads the item from the user message's first line (``Label G (...) at boundary
b = 3 of trajectory web-002 ...``) and calls ``script(item, attempt)`` (attempt
counts that item's requests from 1), which returns what to do:

- ``("answer", text)``: 200 with a chat completion whose content is ``text``;
- ``("status", code)``: that HTTP status (``Retry-After: 0`` on 429; ``("status", 429, "15")``: that Retry-After);
- ``("raw", bytes)``: 200 with that body as is;
- ``("hold",)``: no reply until :meth:`release` (the client times out first);
- ``("block",)``: like hold, and sets ``blocked`` first (a test waits on it, then kills the client).

Every request is logged (``requests``: item, attempt, headers, user text).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ITEM_RE = re.compile(r"^Label (?:G|y) \((\w+)\) at boundary b = (\d+) of trajectory (\S+) ")
Script = Callable[[tuple[str, int, str], int], tuple[Any, ...]]


class StubLLM:
    """The scripted server (see the module docstring); a context manager that starts and stops it."""

    def __init__(self, script: Script, model: str = "stub-model"):
        self.script, self.model = script, model
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.blocked = threading.Event()
        self.released = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                user = next(m["content"] for m in body["messages"] if m["role"] == "user")
                match = ITEM_RE.match(user)
                assert match, user[:200]
                item = (match.group(3), int(match.group(2)), match.group(1))
                with stub.lock:
                    attempt = 1 + sum(1 for r in stub.requests if r["item"] == item)
                    stub.requests.append({"item": item, "attempt": attempt, "headers": dict(self.headers),
                                          "user": user, "body": body, "path": self.path})
                action = stub.script(item, attempt)
                if action[0] in ("hold", "block"):
                    if action[0] == "block":
                        stub.blocked.set()
                    stub.released.wait()
                    return
                if action[0] == "status":
                    payload = json.dumps({"error": {"message": f"scripted {action[1]}"}}).encode()
                    self.send_response(action[1])
                    if action[1] == 429:
                        self.send_header("Retry-After", action[2] if len(action) > 2 else "0")
                elif action[0] == "raw":
                    payload = action[1]
                    self.send_response(200)
                else:
                    payload = json.dumps({"id": "x", "object": "chat.completion", "model": stub.model,
                                          "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                              "role": "assistant", "content": action[1]}}]}).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """The API root to give the judge."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def release(self) -> None:
        """Let held and blocked requests end (without a reply)."""
        self.released.set()

    def asked(self) -> list[tuple[str, int, str]]:
        """The items of every request, in order."""
        with self.lock:
            return [r["item"] for r in self.requests]

    def __enter__(self) -> StubLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
