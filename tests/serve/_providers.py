"""Recording stub upstreams that check requests as the providers do: Anthropic Messages (a thinking block must carry
the text its signature signed; the latest tool turn keeps its thinking when thinking is on), OpenAI Responses
(encrypted reasoning must be what the model wrote) and DeepSeek chat completions (``reasoning_content`` on
tool-call turns). Each answers a scripted turn with usage, streamed (SSE, in odd-sized pieces) or not."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


def sse(events: Iterable[tuple[str | None, dict[str, Any]]]) -> bytes:
    """An SSE stream of ``(event name, data)`` pairs."""
    return b"".join((f"event: {name}\n" if name else "").encode() + f"data: {json.dumps(data)}\n\n".encode()
                    for name, data in events)


def pieces(data: bytes) -> StreamingResponse:
    async def parts():
        for i in range(0, len(data), 41):  # odd-sized pieces: the proxy must not depend on the framing
            yield data[i:i + 41]

    return StreamingResponse(parts(), media_type="text/event-stream")


@dataclass
class Recording:
    """A stub upstream on one path: ``check(body)`` returns the provider's 400 message or None; ``answer(body,
    stream)`` the bytes to send. ``received`` holds every body, ``refused`` the 400 messages sent."""

    path: str
    check: Callable[[dict[str, Any]], str | None]
    answer: Callable[[dict[str, Any], bool], bytes]
    received: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    sent: list[bytes] = field(default_factory=list)

    def build(self) -> Starlette:
        async def handle(request: Request) -> Response:
            body = json.loads(await request.body())
            self.received.append(body)
            self.headers.append(dict(request.headers))
            problem = self.check(body)
            if problem is not None:
                self.refused.append(problem)
                return JSONResponse({"type": "error", "error": {"type": "invalid_request_error",
                                                                "message": problem}}, 400)
            data = self.answer(body, bool(body.get("stream")))
            self.sent.append(data)
            return pieces(data) if body.get("stream") else Response(data, media_type="application/json")

        return Starlette(routes=[Route(self.path, handle, methods=["POST"])])


def anthropic_check(signed: dict[str, str]) -> Callable[[dict[str, Any]], str | None]:
    """Anthropic's checks: each thinking block's text is the one its signature signed (``signed``: signature ->
    text); with thinking on, the last assistant message, when it calls tools, starts with a thinking block."""

    def check(body: dict[str, Any]) -> str | None:
        assistants = [m for m in body["messages"] if m["role"] == "assistant"]
        for i, m in enumerate(body["messages"]):
            for j, b in enumerate(m["content"] if isinstance(m["content"], list) else []):
                if b.get("type") == "thinking" and signed.get(b.get("signature")) != b.get("thinking"):
                    return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
        last = assistants[-1]["content"] if assistants else []
        if (body.get("thinking", {}).get("type") == "enabled" and any(b.get("type") == "tool_use" for b in last)
                and last[0].get("type") not in ("thinking", "redacted_thinking")):
            return ("Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, "
                    "a final `assistant` message must start with a thinking block.")
        return None

    return check


def anthropic_answer(body: dict[str, Any], stream: bool) -> bytes:
    """A scripted Claude answer (thinking, text, one Bash call) with usage."""
    usage = {"input_tokens": len(json.dumps(body["messages"])) // 4, "cache_creation_input_tokens": 5,
             "cache_read_input_tokens": 100, "output_tokens": 17}
    content = [{"type": "thinking", "thinking": "Next, list the files.", "signature": "sig-answer"},
               {"type": "text", "text": "Listing."},
               {"type": "tool_use", "id": "toolu_answer", "name": "Bash", "input": {"command": "ls"}}]
    message = {"id": "msg_answer", "type": "message", "role": "assistant", "model": body["model"],
               "content": content, "stop_reason": "tool_use", "stop_sequence": None, "usage": usage}
    if not stream:
        return json.dumps(message).encode()
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    return sse([("message_start", {"type": "message_start", "message": start}),
                ("content_block_start", {"type": "content_block_start", "index": 0,
                                         "content_block": {"type": "text", "text": ""}}),
                ("ping", {"type": "ping"}),
                ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                         "delta": {"type": "text_delta", "text": "Listing."}}),
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use",
                                                                       "stop_sequence": None},
                                   "usage": {"output_tokens": 17}}),
                ("message_stop", {"type": "message_stop"})])


def responses_check(written: dict[str, list[Any]], paired: dict[str, str] | None = None
                    ) -> Callable[[dict[str, Any]], str | None]:
    """OpenAI's checks of reasoning: each item's ``encrypted_content`` is one the model wrote, with the summary it
    wrote (``written``: encrypted_content -> summary); an item sent with the id of a stored output item comes with
    the reasoning item it followed (``paired``: item id -> reasoning item id)."""

    def check(body: dict[str, Any]) -> str | None:
        sent = {it.get("id") for it in body["input"] if it.get("type") == "reasoning"}
        for it in body["input"]:
            need = (paired or {}).get(it.get("id"))
            if need is not None and need not in sent:
                return (f"Item '{it['id']}' of type '{it['type']}' was provided without its required 'reasoning' "
                        f"item: '{need}'.")
        for i, item in enumerate(body["input"]):
            if item.get("type") == "reasoning" and item.get("encrypted_content") is not None:
                if written.get(item["encrypted_content"]) != item.get("summary"):
                    return f"input[{i}]: the encrypted content of a reasoning item could not be verified"
        return None

    return check


def responses_answer(body: dict[str, Any], stream: bool) -> bytes:
    """A scripted Responses answer (a reasoning item, one shell call) with usage."""
    prompt = len(json.dumps(body["input"])) // 4
    output = [{"id": "rs_answer", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Listing"}],
               "encrypted_content": "gAAAA-answer"},
              {"id": "fc_answer", "type": "function_call", "status": "completed", "call_id": "call_answer",
               "name": "shell", "arguments": json.dumps({"command": ["ls"]})}]
    response = {"id": "resp_answer", "object": "response", "status": "completed", "model": body["model"],
                "output": output, "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 64},
                                            "output_tokens": 23, "output_tokens_details": {"reasoning_tokens": 9},
                                            "total_tokens": prompt + 23}}
    if not stream:
        return json.dumps(response).encode()
    created = {**response, "status": "in_progress", "output": [], "usage": None}
    return sse([("response.created", {"type": "response.created", "sequence_number": 0, "response": created}),
                *[("response.output_item.done", {"type": "response.output_item.done", "sequence_number": k + 1,
                                                 "output_index": k, "item": it}) for k, it in enumerate(output)],
                ("response.completed", {"type": "response.completed", "sequence_number": 3, "response": response})])


def deepseek_check(body: dict[str, Any]) -> str | None:
    """DeepSeek's check in thinking mode: an assistant turn with tool calls carries its ``reasoning_content``."""
    for i, m in enumerate(body["messages"]):
        if m.get("role") == "assistant" and m.get("tool_calls") and not m.get("reasoning_content"):
            return f"Missing `reasoning_content` field in the assistant message at message index {i}"
    return None


def chat_answer(turns: list[dict[str, Any]]) -> Callable[[dict[str, Any], bool], bytes]:
    """Chat completions answers following a script: the answer to a history with k assistant turns is
    ``turns[k]`` (not streamed)."""

    def answer(body: dict[str, Any], stream: bool) -> bytes:
        done = sum(1 for m in body["messages"] if m.get("role") == "assistant")
        prompt = len(json.dumps(body["messages"])) // 4
        return json.dumps({"id": "c1", "object": "chat.completion", "model": body["model"],
                           "choices": [{"index": 0, "message": turns[min(done, len(turns) - 1)],
                                        "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": prompt, "completion_tokens": 7,
                                     "total_tokens": prompt + 7}}).encode()

    return answer
