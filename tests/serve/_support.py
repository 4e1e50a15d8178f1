"""A stub upstream (records what it receives, answers scripted messages with usage), a scripted agent, an upstream
answering every path and a raw HTTP request line (path-hygiene tests)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
                                           "parameters": {"type": "object",
                                                          "properties": {"cmd": {"type": "string"}}}}}]
WORDS = ("check", "the", "file", "list", "then", "open", "config", "and", "count", "lines", "maybe", "grep", "for",
         "errors", "in", "logs", "next", "step", "is", "clear")


def scripted_turns(n: int) -> list[dict[str, Any]]:
    """n assistant turns: reasoning_content of 1..4 blocks (\\n\\n-separated), one bash call each; a final answer."""
    turns = []
    for k in range(1, n + 1):
        blocks = [" ".join(WORDS[(k * 7 + j * 3 + i) % len(WORDS)] for i in range(4 + (k + j) % 5))
                  for j in range(1 + k % 4)]
        turns.append({"role": "assistant", "content": f"Step {k}: running a command.",
                      "reasoning_content": "\n\n".join(blocks),
                      "tool_calls": [{"id": f"call_{k}", "type": "function",
                                      "function": {"name": "bash", "arguments": json.dumps({"cmd": f"ls -l d{k}"})}}]})
    turns.append({"role": "assistant", "content": "Done: the answer is 42."})
    return turns


def tool_result(turn: dict[str, Any], k: int) -> dict[str, Any]:
    """The tool message answering a scripted turn's call."""
    return {"role": "tool", "tool_call_id": turn["tool_calls"][0]["id"], "content": f"total {k}\nfile_{k}.txt\n"}


def opening() -> list[dict[str, Any]]:
    return [{"role": "system", "content": "You are a careful agent. Use the bash tool."},
            {"role": "user", "content": "Find the answer in the files."}]


@dataclass
class Stub:
    """The stub upstream: ``received`` holds each request body; the answer to a history with k assistant turns
    is ``turns[k]`` (so concurrent runs each follow the script)."""

    turns: Sequence[dict[str, Any]]
    received: list[dict[str, Any]] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    sent: list[bytes] = field(default_factory=list)
    fail_status: int | None = None
    script: Callable[[dict[str, Any]], Sequence[dict[str, Any]]] | None = None  # per request body: its own turns

    def usage(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = len(json.dumps(body["messages"]))  # a deterministic stand-in for the provider's count
        return {"prompt_tokens": prompt, "completion_tokens": 7, "total_tokens": prompt + 7,
                "prompt_tokens_details": {"cached_tokens": prompt // 2}}

    def build(self) -> Starlette:
        async def chat(request: Request) -> Response:
            raw = await request.body()
            body = json.loads(raw)
            self.raw.append(raw)
            self.received.append(body)
            self.headers.append(dict(request.headers))
            if self.fail_status is not None:
                return JSONResponse({"error": {"message": "scripted failure"}}, self.fail_status)
            done = sum(1 for m in body["messages"] if m.get("role") == "assistant")  # turns the agent has had
            turns = self.script(body) if self.script is not None else self.turns
            turn = turns[min(done, len(turns) - 1)]
            if not body.get("stream"):
                answer = {"id": "c1", "object": "chat.completion", "model": body.get("model", "m"),
                          "choices": [{"index": 0, "message": turn, "finish_reason": "stop"}],
                          "usage": self.usage(body)}
                data = json.dumps(answer).encode()
                self.sent.append(data)
                return Response(data, media_type="application/json")
            chunks = [{"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": turn}]},
                      {"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": self.usage(body)}]
            data = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"
            self.sent.append(data)

            async def parts():
                for i in range(0, len(data), 37):  # odd-sized pieces: the proxy must not depend on line framing
                    yield data[i:i + 37]

            return StreamingResponse(parts(), media_type="text/event-stream")

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def run_agent(url: str, token: str, n: int, stream: bool = False, session: str | None = None
              ) -> tuple[list[dict[str, Any]], list[bytes]]:
    """The scripted agent: n tool steps and a final answer through ``url``; (the messages it sent per request,
    the raw answers it got)."""
    turns = scripted_turns(n)
    messages = opening()
    sent, answers = [], []
    headers = {"authorization": f"Bearer {token}", **({"x-interp-session": session} if session else {})}
    with httpx.Client(timeout=120) as client:
        for k in range(n + 1):
            body = {"model": "stub", "messages": messages, "tools": TOOLS, "stream": stream}
            sent.append(json.loads(json.dumps(body)))
            r = client.post(f"{url}/chat/completions", json=body, headers=headers)
            assert r.status_code == 200, r.text
            answers.append(r.content)
            if k < n:
                messages = [*messages, turns[k], tool_result(turns[k], k + 1)]
    return sent, answers


class Anywhere:
    """An upstream answering every path of its host (so a request that escapes its base would be answered)."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def build(self) -> Starlette:
        async def any_path(request: Request) -> JSONResponse:
            self.paths.append(request.scope["raw_path"].decode())
            return JSONResponse({"path": request.url.path})

        return Starlette(routes=[Route("/{rest:path}", any_path, methods=["GET", "POST", "DELETE"])])


def raw(url: str, target: str, token: str, host: str | None = None, method: str = "GET") -> tuple[int, bytes]:
    """Send a request line exactly as written (no client normalises it); (status, body)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(f"{method} {target} HTTP/1.1\r\nHost: {host or parts.netloc}\r\nAuthorization: Bearer {token}"
                     f"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body
