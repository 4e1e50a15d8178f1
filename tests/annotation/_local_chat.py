"""A minimal OpenAI-compatible chat endpoint serving a real local model (the judge's end-to-end test).

``LocalChat(spec)`` loads ``spec`` with :func:`interp.sensor.models.load_model`
and serves ``POST /v1/chat/completions`` on 127.0.0.1: the messages go
through the model's chat template, the answer is greedy
(``temperature`` 0 only), at most ``max_tokens`` new tokens. Requests are
answered one at a time (a lock). The system message is the same for every
request of a judge run (the guideline), so its key/value cache is computed
once and reused, as vLLM's prefix caching does; it changes nothing in the
output (greedy decoding on the same tokens).

Run as a script it serves until killed (``python -m tests.annotation._local_chat smollm2-135m PORT``).
"""

from __future__ import annotations

import copy
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch


class LocalChat:
    """The endpoint (see the module docstring); a context manager that starts and stops it."""

    def __init__(self, spec: str, port: int = 0):
        from interp.sensor.models import load_model

        sensor = load_model(spec)
        self.spec, self.model, self.tokenizer = spec, sensor.hf_model, sensor.tokenizer
        self.lock = threading.Lock()
        self.prefix: tuple[list[int], Any] | None = None
        self.served = 0
        chat = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if body.get("temperature", 0) != 0:
                    return self._send(400, {"error": {"message": "only temperature 0 (greedy) is served"}})
                with chat.lock:
                    text = chat.complete(body["messages"], int(body.get("max_tokens", 64)))
                self._send(200, {"id": f"local-{chat.served}", "object": "chat.completion", "model": chat.spec,
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": text}}]})

            def _send(self, status: int, doc: dict[str, Any]) -> None:
                payload = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _prefix_cache(self, ids: list[int], system: list[int]) -> Any:
        """A copy of the key/value cache of the system message's tokens when ``ids`` starts with them, else None."""
        if not system or ids[:len(system)] != system:
            return None
        if self.prefix is None or self.prefix[0] != system:
            with torch.no_grad():
                out = self.model(torch.tensor([system]), use_cache=True)
            self.prefix = (system, out.cache)
        return copy.deepcopy(self.prefix[1])

    def complete(self, messages: list[dict[str, str]], max_tokens: int) -> str:
        """The model's greedy reply to ``messages`` (chat template applied)."""
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                 return_dict=True)["input_ids"]
        system = [m for m in messages if m["role"] == "system"][:1]
        head = (self.tokenizer.apply_chat_template(system, tokenize=True, return_dict=True)["input_ids"]
                if system else [])
        cache = self._prefix_cache(ids, head)
        with torch.no_grad():
            out = self.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                      cache=cache, max_new_tokens=max_tokens, do_sample=False,
                                      pad_token_id=self.tokenizer.eos_token_id)
        self.served += 1
        return str(self.tokenizer.decode(out[0, len(ids):], skip_special_tokens=True))

    @property
    def base_url(self) -> str:
        """The API root to give the judge."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> LocalChat:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    with LocalChat(sys.argv[1], int(sys.argv[2])) as served:
        print(f"serving {served.spec} at {served.base_url}", flush=True)
        served.thread.join()
