"""``interp serve``'s settings, declared once (``interp.params``): the command's options are generated from
:class:`ServeConfig` and every value is range-checked before the socket is bound (``--port -5`` is a one-line
error naming the option, never a traceback at bind)."""

from __future__ import annotations

from dataclasses import dataclass

from interp.params import Check, Flag, Integer, Items, Maybe, Options, Real, Text, param, validate
from interp.sensor.limits import DEFAULT_MAX_TOKENS
from interp.serve.app import LOCAL_HOSTS, MAX_BODY_BYTES
from interp.serve.policy import parse_serve_policy
from interp.serve.providers import KINDS


@dataclass(frozen=True)
class ServeConfig:
    """The proxy's settings (``interp.serve.app.Proxy`` documents each mode)."""

    policy: str = param("full", Check(parse_serve_policy, "a serve policy", "hide_observation"),
                        "The history policy: full, interleaved, iclr[:rho=R], iclr_step_only, keep_latest_reasoning, "
                        "keep_last_k_reasoning:k=K, delete_all_reasoning, random:r=R, observation_masking:m=M, "
                        "sliding_window:k=K, keep_last_m_tool_exchanges:m=M, drsr_gate (with --gate-scorer).")
    host: str = param("127.0.0.1", Text("a host name or address"), "Address to listen on (loopback unless told "
                      "otherwise).")
    port: int = param(8400, Integer(0, 65535), "Port to listen on (0: any free one, printed).")
    max_sessions: int = param(8, Integer(1), "Agent runs held at once (the least recently used is dropped first).",
                              "sessions")
    session_ttl: float = param(3600.0, Real(0, low_open=True), "An idle session is dropped after this long (a "
                               "background sweep, also when no request comes).", "s")
    timeout: float = param(600.0, Real(0, low_open=True), "Seconds to wait for the upstream.", "s")
    max_tokens: int = param(DEFAULT_MAX_TOKENS, Integer(1), "The sensor scores no input longer than this (such a "
                            "step is left whole, logged).", "tokens")
    threads: int | None = param(None, Maybe(Integer(1), "torch's default"), "torch threads for the sensor (1 on a "
                                "busy machine: torch's default oversubscribes it).", "threads")
    decide: str = param("sync", Options(("sync", "async")), "sync: a request waits for its newest step's scoring; "
                        "async: a step is scored as soon as the answer holding it is complete, while its tool runs, "
                        "and applied at the next request when ready, else left whole there (no added latency; the "
                        "lag is logged).")
    memory_budget: int | None = param(None, Maybe(Integer(1), "no budget"), "Bytes of sensor KV-cache snapshots "
                                      "held over all sessions at most (least recently used dropped first, logged).",
                                      "bytes")
    max_body_bytes: int = param(MAX_BODY_BYTES, Integer(1), "Largest request body accepted (larger: 413).", "bytes")
    allowed_hosts: tuple[str, ...] = param(LOCAL_HOSTS, Items(Text("a host name")), "Host header names answered "
                                           "(others: 400; * for any); --host is added when it is not a wildcard.")
    provider: str = param("auto", Options(KINDS), "The upstream kind whose rules limit the edits "
                          "(interp.serve.providers): auto (/v1/messages anthropic, /v1/responses openai-responses, "
                          "chat completions deepseek when the upstream URL or the request's model names DeepSeek, "
                          "else openai-chat), or one kind for every request of its API.")
    allow_control_tokens: bool = param(False, Flag(), "Edit histories holding chat-template control tokens "
                                       "(<|im_end|>, </think>, ...) as written; refused by default (forwarded "
                                       "unedited, logged), as the offline tools refuse them.")

    def __post_init__(self) -> None:
        validate(self)
