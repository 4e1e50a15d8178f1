"""``interp serve``: a proxy that applies a history policy to every model request of an agent.

``POST /v1/messages`` (Anthropic Messages: Claude Code) and ``POST /v1/responses`` (OpenAI Responses: Codex CLI,
the OpenAI Agents SDK) are edited as chat completions are (below), each through its own mapping
(:mod:`interp.serve.anthropic`, :mod:`interp.serve.responses`) and under the upstream's rules
(:mod:`interp.serve.providers`: what may be edited; an edit the upstream refuses with HTTP 400/422 is sent again
unedited, once, both attempts logged).

``POST /v1/chat/completions`` (streamed or not): the request's messages are mapped to a trajectory
(:func:`interp.serve.messages.history_of`, the openai importer's mapping), the session's policy edits its
completed steps (:class:`interp.serve.policy.PolicyState`), the edit is written back into the messages
(:func:`interp.serve.messages.write_back`: only reasoning or the policy's units change) and the request is
forwarded to ``{upstream}/chat/completions``; the upstream's answer (status, body, SSE stream) is returned
unchanged. Every other ``/v1/...`` request is passed through as is.

- **Sessions.** A request belongs to the session named by its ``X-Interp-Session`` header, else to the hash
  of its messages up to the first user message (the run's system prompt and task; two concurrent runs of one
  task then share a session: give them the header). A session holds the policy's state; at most
  ``max_sessions`` are held (the least recently used is dropped first) and one unused for ``session_ttl``
  seconds is dropped. Memory: each held session of an ICLR policy keeps the sensor's KV-cache snapshots of its
  latest compressed history (logged per request as ``cache_bytes``; for a full-attention model about
  2 x layers x kv_heads x head_dim x 4 bytes per token in float32), so the bound is ``max_sessions`` times that
  at the longest history.
- **Fail safe.** When mapping, the sensor, the policy or the write-back fails, the request is forwarded
  unedited and the failure is logged (``failure`` in the run log, and a warning on the ``interp.serve`` logger).
  Upstream errors pass through with their status and body; an unreachable upstream is a 502, its timeout a 504
  (an OpenAI-style error body).
- **Access.** The proxy listens on 127.0.0.1 unless told otherwise and answers only requests that carry its
  token (``Authorization: Bearer TOKEN``, the scheme in any case, the agent's API key); the upstream gets the
  key given for it. Before any route runs (:class:`Gatekeeper`): the ``Host`` header must name one of
  ``allowed_hosts`` (default the loopback names: a web page cannot reach the proxy by DNS rebinding), the path
  must stay under ``/v1`` (a ``.`` or ``..`` segment, also percent-encoded as ``%2e%2e``, and an encoded ``/`` or
  ``\\`` are refused with 400, so nothing reaches the upstream outside its base URL with the upstream key
  attached) and the body may hold at most ``max_body_bytes`` (413).
- **Isolation.** Each session has its own lock; the sensor has one lock, taken only around a forward, so a
  request answered from memory (or needing no forward) never waits for another session's scoring. Idle sessions
  are dropped by a background sweep every ``sweep_interval`` seconds (eager, not at the next request), and
  ``memory_budget`` bounds the KV-cache snapshots held over all sessions: the least recently used sessions'
  snapshots are dropped first (their decisions are kept; logged as ``evicted``).
- **Decide modes.** ``decide="sync"``: a request waits for the scoring of its newest step. ``"async"`` (ICLR
  policies): step t is scored in the background as soon as the upstream's answer holding it is complete (while
  the agent's tool runs; the scorer reads step t up to its reasoning, not its observation), and a request is
  edited with the decisions ready and forwarded at once: step t's decision applies at request t+1 when its
  scoring ended before that request came, else the step is left whole there (``lag`` in the run log: steps
  left whole) and decided from a later request on; no added latency. The answer is read at once on chat
  completions only: a Messages or Responses step is queued for the background when the next request brings it
  (one request more of lag).
- **Control tokens.** A history whose text holds chat-template control tokens (``<|im_end|>``, ``</think>``) is
  forwarded unedited with the reason logged, as the offline tools refuse such a trajectory, unless
  ``allow_control_tokens``.
- **Run log.** :mod:`interp.serve.runlog`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import httpx
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from interp.accounting.tokens import ICLR_CONTEXT, Policy
from interp.data.trajectory import control_token_problems
from interp.sensor.limits import DEFAULT_MAX_TOKENS
from interp.serve import messages as chat_messages
from interp.serve.apis import MESSAGES, RESPONSES, Api
from interp.serve.messages import History
from interp.serve.policy import GateFactory, PolicyState
from interp.serve.providers import KINDS, capability_for
from interp.serve.runlog import RunLog, direct_removal

if TYPE_CHECKING:
    import uvicorn

LOG = logging.getLogger("interp.serve")
SESSION_HEADER = "x-interp-session"
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")  # the Host names answered by default
MAX_BODY_BYTES = 64 * 2**20  # the default body limit: far above any agent's request, far below a memory problem
# hop-by-hop and recomputed headers: never copied between the two connections
HOP = frozenset({"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "trailer",
                 "upgrade", "proxy-authorization", "proxy-connection", "content-encoding", "authorization",
                 SESSION_HEADER, "accept-encoding", "x-api-key"})
RETRIED = (400, 422)  # upstream answers to an edited request that send it again, unedited (an edit may cause them)


def session_of(body: object, header: str | None, items: str = "messages") -> str:
    """The session id of a request: its header, else sha256 of its history (``items``: ``messages``, or a
    Responses request's ``input``) up to the first user message."""
    if header:
        return header
    messages = body.get(items) if isinstance(body, dict) else None
    opening: list[Any] = []
    for m in messages if isinstance(messages, list) else []:
        opening.append(m)
        if isinstance(m, dict) and m.get("role") == "user":
            break
    return hashlib.sha256(json.dumps(opening, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:32]


def usage_of(answer: object) -> dict[str, int | None]:
    """Token usage of an answer (a chat completion or its last stream chunk), as the upstream reported it."""
    found = answer.get("usage") if isinstance(answer, dict) else None
    usage: dict[str, Any] = found if isinstance(found, dict) else {}
    details: dict[str, Any] = usage["prompt_tokens_details"] if isinstance(usage.get("prompt_tokens_details"),
                                                                           dict) else {}

    def num(v: object) -> int | None:
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    write = num(usage.get("cache_creation_input_tokens"))
    return {"prompt_tokens": num(usage.get("prompt_tokens")), "cached_tokens": num(details.get("cached_tokens")),
            "cache_write_tokens": write if write is not None else num(details.get("cache_write_tokens")),
            "completion_tokens": num(usage.get("completion_tokens"))}


def accumulate(message: dict[str, Any], chunk: object) -> None:
    """Add one chat stream chunk's delta (content, reasoning, tool calls by index) to ``message``."""
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    delta = choices[0].get("delta") if isinstance(choices, list) and choices and isinstance(choices[0], dict) \
        else None
    if not isinstance(delta, dict):
        return
    for key in ("role", "content", "reasoning_content", "reasoning"):
        if isinstance(delta.get(key), str):
            message[key] = delta[key] if key == "role" else message.get(key, "") + delta[key]
    for pos, call in enumerate(delta.get("tool_calls") or []):
        if not isinstance(call, dict):
            continue
        calls = message.setdefault("tool_calls", [])
        i = call.get("index", pos) if isinstance(call.get("index", pos), int) else pos
        while len(calls) <= i:
            calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        if call.get("id"):
            calls[i]["id"] = call["id"]
        found = call.get("function")
        fn: dict[str, Any] = found if isinstance(found, dict) else {}
        for key in ("name", "arguments"):
            if isinstance(fn.get(key), str):
                calls[i]["function"][key] += fn[key]


class SSEUsage:
    """Reads the ``usage`` of an SSE stream as its bytes pass (the stream itself is not changed): each event's
    usage read by ``reader`` (chat completions by default), the values an event reports replacing earlier ones;
    and the assistant message a chat stream's deltas make (``message``)."""

    def __init__(self, reader: Callable[[object], dict[str, int | None]] = usage_of) -> None:
        self.buffer, self.reader, self.usage = b"", reader, usage_of(None)
        self.message: dict[str, Any] = {}

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the stream."""
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            data = line.strip()
            if not data.startswith(b"data:") or data == b"data: [DONE]":
                continue
            try:
                chunk = json.loads(data[5:])
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            accumulate(self.message, chunk)
            found = self.reader(chunk)
            if found["prompt_tokens"] is not None:
                self.usage = found
            elif found["completion_tokens"] is not None:  # Anthropic: output counted in a later event
                self.usage = {**self.usage, "completion_tokens": found["completion_tokens"]}


@dataclass
class Session:
    """One agent run: its policy state, its request count, when it was last used; ``behind`` (``decide="async"``)
    is the background scorer's state, sharing the session's score memory."""

    state: PolicyState
    requests: int = 0
    last_used: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)
    behind: PolicyState | None = None
    behind_lock: threading.Lock = field(default_factory=threading.Lock)

    def cache_bytes(self) -> int:
        """Bytes of the KV-cache snapshots the session's scorers hold."""
        return self.state.cache_bytes() + (self.behind.cache_bytes() if self.behind is not None else 0)

    def evict(self) -> bool:
        """Drop the session's snapshots unless one of its scorers is running (then False: nothing dropped)."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            if not self.behind_lock.acquire(blocking=False):
                return False
            try:
                self.state.evict()
                if self.behind is not None:
                    self.behind.evict()
                return True
            finally:
                self.behind_lock.release()
        finally:
            self.lock.release()


@dataclass
class Edited:
    """What the proxy did to one request before forwarding it."""

    content: bytes
    history: History[Any] | None = None
    record: dict[str, Any] | None = None
    log: dict[str, Any] | None = None
    failure: str | None = None
    edited: bool = False
    removed_tokens: int | None = 0
    removed_measure: str = "unedited"
    sensor_seconds: float = 0.0
    provider: str = ""  # the capability kind whose rules applied (interp.serve.providers)
    coarsened: list[str] = field(default_factory=list)  # edits the provider's rules coarsened
    lag: int = 0


@dataclass
class Proxy:
    """The proxy's state and routes (module docstring); :meth:`build` makes the Starlette app."""

    upstream: str
    policy: Policy
    log_dir: Path
    sensor: Any = None
    tokenizer: Any = None  # counts removed tokens (default: the sensor's)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    upstream_key: str | None = None
    timeout: float = 600.0
    max_sessions: int = 8
    session_ttl: float = 3600.0
    gate_factory: GateFactory | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS  # the sensor's limit on a scorer input (longer: the step is left whole)
    decide: str = "sync"  # or "async" (module docstring)
    memory_budget: int | None = None  # bytes of KV-cache snapshots over all sessions (None: no bound)
    max_body_bytes: int = MAX_BODY_BYTES
    allowed_hosts: tuple[str, ...] = LOCAL_HOSTS  # "*": any
    allow_control_tokens: bool = False
    sweep_interval: float | None = None  # seconds between sweeps of idle sessions (None: ttl / 4, at most 60)
    clock: Callable[[], float] = time.time
    sessions: OrderedDict[str, Session] = field(default_factory=OrderedDict)
    provider: str = "auto"  # the upstream kind whose rules apply (interp.serve.providers: auto or a kind)

    def __post_init__(self) -> None:
        self.upstream = self.upstream.rstrip("/")
        if self.decide not in ("sync", "async"):
            raise ValueError(f"decide {self.decide!r}: expected sync or async")
        if self.provider not in KINDS:
            raise ValueError(f"provider {self.provider!r}: unknown; known: {', '.join(KINDS)}")
        if self.tokenizer is None and self.sensor is not None:
            self.tokenizer = self.sensor.tokenizer
        self.sensor_lock = threading.Lock()  # one forward at a time on the sensor (taken only around forwards)
        self.sessions_lock = threading.Lock()  # the session table (requests and the sweeper)
        self.runlog = RunLog(self.log_dir, {
            "policy": self.policy.label, "upstream": self.upstream,
            "model": getattr(getattr(self.sensor, "spec", None), "name", None) if self.sensor is not None else None,
            "max_sessions": self.max_sessions, "session_ttl": float(self.session_ttl), "started": self.clock(),
            "decide": self.decide, "memory_budget": self.memory_budget, "provider": self.provider})
        PolicyState(self.policy, "check", self.sensor, self.tokenizer, self._gate("check"))  # a policy it cannot run fails now
        self.background = ThreadPoolExecutor(1, "interp-serve-decide")  # async decisions, one at a time
        self.jobs: list[Future[None]] = []
        self.swept = threading.Event()  # set after each sweep (what a test waits on)
        self.stopping = threading.Event()
        interval = self.sweep_interval if self.sweep_interval is not None else min(self.session_ttl / 4, 60.0)
        self.sweeper = threading.Thread(target=self._sweep_loop, args=(interval,), name="interp-serve-sweep",
                                        daemon=True)
        self.sweeper.start()

    def _gate(self, session: str) -> Any:
        return self.gate_factory(session) if self.gate_factory is not None else None

    def _state(self, key: str, defer: bool = False) -> PolicyState:
        state = PolicyState(self.policy, key, self.sensor, self.tokenizer, self._gate(key), self.max_tokens,
                            forward_lock=self.sensor_lock)
        if state.scorer is not None:
            state.scorer.defer = defer
        return state

    def session(self, key: str) -> Session:
        """The session ``key`` (made when new), least-recently-used sessions dropped beyond ``max_sessions``."""
        now = self.clock()
        with self.sessions_lock:
            if key not in self.sessions:
                defer = self.decide == "async" and self.policy.condition in ICLR_CONTEXT
                made = Session(self._state(key, defer))
                if defer:  # the background scorer fills the memory the request's scorer reads
                    made.behind = self._state(key)
                    assert made.behind.scorer is not None and made.state.scorer is not None  # an ICLR policy
                    made.state.scorer.memory = made.behind.scorer.memory
                self.sessions[key] = made
            self.sessions.move_to_end(key)
            while len(self.sessions) > self.max_sessions:
                self.sessions.popitem(last=False)
            s = self.sessions[key]
            s.last_used = now
        return s

    def sweep(self) -> list[str]:
        """Drop the sessions idle for longer than ``session_ttl`` (not one serving a request); their keys."""
        now = self.clock()
        with self.sessions_lock:
            gone = [k for k, s in self.sessions.items() if now - s.last_used > self.session_ttl and not s.lock.locked()]
            for k in gone:
                del self.sessions[k]
        return gone

    def _sweep_loop(self, interval: float) -> None:
        while not self.stopping.wait(interval):
            gone = self.sweep()
            if gone:
                LOG.info("dropped %d idle session(s): %s", len(gone), ", ".join(gone))
            self.swept.set()

    def keep_budget(self, current: str) -> list[str]:
        """Drop KV-cache snapshots, least recently used sessions first, until all sessions hold at most
        ``memory_budget`` bytes (the current session's last); the sessions whose snapshots were dropped."""
        if self.memory_budget is None:
            return []
        with self.sessions_lock:
            held = [(k, s) for k, s in self.sessions.items() if k != current]
            held += [(current, self.sessions[current])] if current in self.sessions else []
        sizes = {k: s.cache_bytes() for k, s in held}
        total, evicted = sum(sizes.values()), []
        for k, s in held:
            if total <= self.memory_budget:
                break
            if sizes[k] and s.evict():
                total -= sizes[k]
                evicted.append(k)
        if evicted:
            LOG.info("memory budget %d bytes: dropped the KV-cache snapshots of %s", self.memory_budget,
                     ", ".join(evicted))
        return evicted

    def drain(self) -> None:
        """Wait for the background decisions queued so far (``decide="async"``)."""
        with self.sessions_lock:
            jobs = list(self.jobs)
        wait(jobs)

    def close(self) -> None:
        """Stop the sweeper and the background scorer."""
        self.stopping.set()
        self.background.shutdown(wait=True)

    def _behind(self, session: Session, key: str, traj: Any) -> None:
        """The background decision of ``decide="async"``: the policy run in full on a request's history, so the
        steps it left whole are in the session's memory at its next request."""
        assert session.behind is not None
        try:
            with session.behind_lock:
                session.behind.begin()
                session.behind.apply(traj)
            self.keep_budget(key)
        except Exception as exc:  # the next request leaves those steps whole again, and says so
            LOG.warning("session %s: background decision failed: %s: %s", key, type(exc).__name__, exc)

    def ahead(self, session: Session, key: str, body: dict[str, Any], api: Api | None = None) -> None:
        """``decide="async"``: queue the background decision of a history of ``api`` (chat completions by default:
        the agent's messages and the answer just received, its newest step's tool not run yet), so its decision is
        ready at the next request."""
        try:
            history = (api or CHAT).history_of(body, key)
        except Exception as exc:  # the next request leaves the step whole and queues it again
            LOG.warning("session %s: the answer could not be mapped for an early decision: %s", key, exc)
            return
        if history is not None:
            with self.sessions_lock:
                self.jobs = [j for j in self.jobs if not j.done()]
                self.jobs.append(self.background.submit(self._behind, session, key, history.trajectory))

    def edit(self, raw: bytes, body: object, session: Session, key: str, api: Api | None = None) -> Edited:
        """Apply the session's policy to one request body of ``api`` (chat completions by default) under its
        provider's rules (fail safe: the raw body on any failure)."""
        api = api or CHAT
        rules = capability_for(self.provider, api.name, self.upstream,
                               body.get("model") if isinstance(body, dict) else None)
        out = Edited(raw, provider=rules.kind)
        if self.policy.condition == "full":
            return out
        if not isinstance(body, dict):
            out.failure = "the request body is not a JSON object" if body is not None else \
                "the request body is not JSON (forwarded as received; the upstream answers it)"
            return out
        reason = api.unedited(body)
        if reason is not None:
            LOG.warning("session %s: %s", key, reason)
            return Edited(raw, failure=reason, provider=rules.kind)
        scorer = session.state.scorer
        before = scorer.seconds if scorer is not None else 0.0
        try:
            with session.lock:
                session.state.begin()
                if scorer is not None:
                    scorer.pending.clear()
                out.history = api.history_of(body, key)
                if out.history is None:
                    return out
                if not self.allow_control_tokens:
                    found = control_token_problems(out.history.trajectory.to_json())
                    if found:
                        raise ValueError(f"{found[0][0]}: {found[0][1]} (interp serve --allow-control-tokens)")
                edited, log = session.state.apply(out.history.trajectory)
                new_body = api.write_back(body, out.history, edited, log, rules, out.coarsened)
                out.lag = len(scorer.pending) if scorer is not None else 0
            if out.lag:
                self.ahead(session, key, body, api)
            out.log, out.record = log.to_json(), edited.to_json()
            if out.coarsened:  # the trajectory as sent: the policy's, coarsened by the provider's rules
                sent_history = api.history_of(new_body, key)
                out.record = sent_history.trajectory.to_json() if sent_history is not None else None
            history = api.items
            if new_body[history] != body[history]:
                out.content, out.edited = json.dumps(new_body, ensure_ascii=False).encode(), True
            # in the upstream's terms where the tokenizer's template is the upstream's (runlog.direct_removal); the
            # Messages and Responses APIs' templates are the hosted models' own: the strings measure
            out.removed_tokens, out.removed_measure = direct_removal(
                self.tokenizer, session.state.counter, body[history], new_body[history], rules.opaque,
                render=api is CHAT)
        except Exception as exc:  # fail safe: never a broken agent
            LOG.warning("session %s: forwarded unedited: %s: %s", key, type(exc).__name__, exc)
            out = Edited(raw, out.history, failure=f"{type(exc).__name__}: {exc}", provider=rules.kind)
            if out.history is not None:
                out.record = out.history.trajectory.to_json()
        out.sensor_seconds = (scorer.seconds - before) if scorer is not None else 0.0
        return out

    def upstream_headers(self, request: Request) -> dict[str, str]:
        """The agent's headers for the upstream: hop-by-hop, auth and the session header dropped, its key added."""
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        if self.upstream_key and request.url.path.startswith("/v1/messages"):  # Anthropic's key header
            headers["x-api-key"] = self.upstream_key
        elif self.upstream_key:
            headers["authorization"] = f"Bearer {self.upstream_key}"
        return headers

    def authorized(self, request: Request) -> bool:
        """Whether the request carries the proxy's token (``Authorization: Bearer TOKEN``, the scheme in any case,
        or ``x-api-key: TOKEN`` as the Anthropic SDKs send an API key)."""
        scheme, _, given = request.headers.get("authorization", "").strip().partition(" ")
        key = request.headers.get("x-api-key", "")
        return ((scheme.lower() == "bearer" and secrets.compare_digest(given.strip().encode(), self.token.encode()))
                or secrets.compare_digest(key.strip().encode(), self.token.encode()))

    def build(self) -> ASGIApp:
        """The app: chat completions through the policy, every other /v1 path passed through, behind the
        :class:`Gatekeeper` (Host, path, body size)."""

        async def chat(request: Request) -> Response:
            return await self.chat(request)

        async def messages(request: Request) -> Response:
            return await self.chat(request, MESSAGES)

        async def responses(request: Request) -> Response:
            return await self.chat(request, RESPONSES)

        async def passthrough(request: Request) -> Response:
            if not self.authorized(request):
                return _error(401, "this proxy needs its token as the API key (Authorization: Bearer TOKEN)")
            path = request.scope.get("raw_path", request.url.path.encode()).decode("latin-1")  # as the agent wrote it
            return await self.forward(request, await request.body(), path.removeprefix("/v1"), on_done=None)

        app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                                Route("/v1/messages", messages, methods=["POST"]),
                                Route("/v1/responses", responses, methods=["POST"]),
                                Route("/v1/{rest:path}", passthrough, methods=["GET", "POST", "DELETE"])])
        return Gatekeeper(app, self.allowed_hosts, self.max_body_bytes)

    async def chat(self, request: Request, api: Api | None = None) -> Response:
        """One request of an edited API (chat completions by default): policy, forward, log; an edited request
        the upstream refuses with a ``RETRIED`` status is sent again unedited, each attempt logged."""
        api = api or CHAT
        arrived, t0 = self.clock(), time.perf_counter()
        if not self.authorized(request):
            return _error(401, "this proxy needs its token as the API key (Authorization: Bearer TOKEN)")
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None  # the upstream answers a malformed request itself
        own = api.session(body) if isinstance(body, dict) else None
        key = session_of(body, request.headers.get(SESSION_HEADER) or own, api.items)
        session = self.session(key)
        session.requests += 1
        number = session.requests
        done = await run_in_threadpool(self.edit, raw, body, session, key, api)
        proxy_seconds = time.perf_counter() - t0
        evicted = self.keep_budget(key) if done.edited or done.sensor_seconds else []
        messages = body.get(api.items) if isinstance(body, dict) else None
        n_steps = 0 if done.history is None else done.history.trajectory.n_steps

        def logger(attempt: int, edited: bool, failure: str | None, log: dict[str, Any] | None,
                   removed: tuple[int | None, str], record: dict[str, Any] | None
                   ) -> Callable[[int, dict[str, int | None], float], None]:
            def on_done(status: int, usage: dict[str, int | None], upstream_seconds: float) -> None:
                self.runlog.request({
                    "session": key, "request": number, "time": arrived, "policy": self.policy.label,
                    "api": api.name, "provider": done.provider, "attempt": attempt,
                    "stream": bool(isinstance(body, dict) and body.get("stream")), "status": status,
                    "n_messages": len(messages) if isinstance(messages, list) else 0, "n_steps": n_steps,
                    "edited": edited, "failure": failure, "coarsened": done.coarsened, **usage,
                    "removed_tokens": removed[0], "removed_measure": removed[1], "edit_log": log,
                    "sensor_seconds": done.sensor_seconds, "proxy_seconds": proxy_seconds,
                    "upstream_seconds": upstream_seconds, "cache_bytes": session.cache_bytes(),
                    "sessions": len(self.sessions), "lag": done.lag, "evicted": evicted})
                if record is not None:
                    self.runlog.trajectory(key, record)
            return on_done

        def on_answer(message: dict[str, Any]) -> None:  # decide=async: score the new step while its tool runs
            if isinstance(body, dict) and isinstance(body.get("messages"), list):
                self.ahead(session, key, {**body, "messages": [*body["messages"], message]})

        # the answer's message read as a chat completion's: the other APIs' steps are decided from their next
        # request's history (lag), not at answer time
        early = on_answer if api is CHAT and session.behind is not None and done.failure is None else None
        first = logger(1, done.edited, done.failure, done.log, (done.removed_tokens, done.removed_measure), done.record)
        if not done.edited or done.history is None:
            return await self.forward(request, done.content, api.path, first, usage=api.usage, on_answer=early)
        retry = logger(2, False, "retried unedited: the upstream refused the edited request", None, (0, "unedited"),
                       done.history.trajectory.to_json())
        return await self.forward(request, done.content, api.path, first, (raw, retry), api.usage, early)

    async def forward(self, request: Request, content: bytes, path: str,
                      on_done: Callable[[int, dict[str, int | None], float], None] | None,
                      fallback: tuple[bytes, Callable[[int, dict[str, int | None], float], None]] | None = None,
                      usage: Callable[[object], dict[str, int | None]] | None = None,
                      on_answer: Callable[[dict[str, Any]], None] | None = None) -> Response:
        """Send ``content`` to the upstream's ``path``; its answer unchanged (streamed as it comes). With a
        ``fallback`` (the unedited body, its logger), an answer of a ``RETRIED`` status is logged and the
        fallback sent instead, once. ``on_answer`` gets the assistant message of a complete 200 chat answer
        (``decide="async"`` scores it at once)."""
        t0 = time.perf_counter()
        usage = usage or usage_of
        target = httpx.URL(self.upstream + path)
        base = httpx.URL(self.upstream + "/")
        if (target.scheme, target.host, target.port) != (base.scheme, base.host, base.port) or \
                not target.path.startswith(base.path):  # never reached past the Gatekeeper; a second fence
            return self._failed(400, f"path {path!r}: outside the upstream's base URL", on_done, t0)
        client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout))
        upstream = client.build_request(request.method, target, content=content,
                                        headers=self.upstream_headers(request), params=request.query_params)
        try:
            answer = await client.send(upstream, stream=True)
        except httpx.TimeoutException as exc:
            await client.aclose()
            return self._failed(504, f"upstream timed out: {exc}", on_done, t0)
        except httpx.HTTPError as exc:
            await client.aclose()
            return self._failed(502, f"upstream unreachable: {type(exc).__name__}: {exc}", on_done, t0)
        headers = {k: v for k, v in answer.headers.items() if k.lower() not in HOP}
        if fallback is not None and answer.status_code in RETRIED:
            refused = await answer.aread()
            await answer.aclose()
            await client.aclose()
            LOG.warning("upstream refused an edited request (%d: %s); retrying it unedited", answer.status_code,
                        refused[:300].decode("utf-8", "replace"))
            if on_done is not None:
                on_done(answer.status_code, usage_of(None), time.perf_counter() - t0)
            return await self.forward(request, fallback[0], path, fallback[1], None, usage, on_answer)
        if "text/event-stream" not in answer.headers.get("content-type", ""):
            try:
                data = await answer.aread()
            except httpx.TimeoutException as exc:
                return self._failed(504, f"upstream timed out: {exc}", on_done, t0)
            finally:
                await answer.aclose()
                await client.aclose()
            if on_done is not None:
                try:
                    parsed = json.loads(data) if answer.status_code == 200 else None
                except (json.JSONDecodeError, UnicodeDecodeError):
                    parsed = None
                on_done(answer.status_code, usage(parsed), time.perf_counter() - t0)
                choices = parsed.get("choices") if isinstance(parsed, dict) else None
                message = choices[0].get("message") if isinstance(choices, list) and choices and \
                    isinstance(choices[0], dict) else None
                if on_answer is not None and isinstance(message, dict):
                    on_answer(message)
            return Response(data, answer.status_code, headers)
        sse = SSEUsage(usage)

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in answer.aiter_bytes():
                    sse.feed(chunk)
                    yield chunk
            finally:
                await answer.aclose()
                await client.aclose()
                if on_done is not None:
                    sse.feed(b"\n")
                    on_done(answer.status_code, sse.usage, time.perf_counter() - t0)
                if on_answer is not None and answer.status_code == 200 and sse.message:
                    on_answer(sse.message)

        return StreamingResponse(relay(), answer.status_code, headers)

    def _failed(self, status: int, message: str, on_done: Callable[[int, dict[str, int | None], float], None] | None,
                t0: float) -> Response:
        LOG.warning(message)
        if on_done is not None:
            on_done(status, usage_of(None), time.perf_counter() - t0)
        return _error(status, message)


CHAT = Api("chat", "/chat/completions", "messages", chat_messages.history_of, chat_messages.write_back, usage_of,
           lambda body: None, lambda body: None)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "proxy_error", "code": status}}, status)


def path_refusal(raw_path: bytes) -> str | None:
    """Why a request path may not be forwarded (None: it may): a ``.`` or ``..`` segment, also percent-encoded
    (any depth: ``%252e``), an encoded ``/`` or ``\\`` or a NUL, or a path outside ``/v1``."""
    text = raw_path.decode("latin-1")
    for segment in text.split("/"):
        plain, prev = segment, None
        while plain != prev:  # decoded until it stops changing: %252e%252e is .. too
            prev, plain = plain, unquote(plain, errors="replace")
        if plain in (".", "..") or any(c in plain for c in "/\\\x00"):
            return f"path {text!r}: a segment {segment!r} would leave the upstream's base URL"
    if not (text == "/v1" or text.startswith("/v1/")):
        return f"path {text!r}: not under /v1"
    return None


def host_name(value: str) -> str:
    """The host name of a ``Host`` header (``[::1]:8400`` -> ``::1``, ``LocalHost:80`` -> ``localhost``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


@dataclass
class Gatekeeper:
    """ASGI middleware run before every route (module docstring, **Access**): the ``Host`` header, the path, the
    body size; a refusal is an OpenAI-style error and nothing is forwarded."""

    app: ASGIApp
    allowed_hosts: tuple[str, ...] = LOCAL_HOSTS
    max_body_bytes: int = MAX_BODY_BYTES

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = host_name(headers.get("host", ""))
        refused: tuple[int, str] | None = None
        if "*" not in self.allowed_hosts and host not in self.allowed_hosts:
            refused = (400, f"Host {headers.get('host', '')!r}: not one this proxy answers (interp serve "
                            f"--allowed-hosts; now {', '.join(self.allowed_hosts)})")
        elif (why := path_refusal(scope.get("raw_path") or scope["path"].encode())) is not None:
            refused = (400, why)
        elif headers.get("content-length", "0").isdigit() and int(headers.get("content-length", "0")) \
                > self.max_body_bytes:
            refused = (413, f"request body over {self.max_body_bytes} bytes (interp serve --max-body-bytes)")
        if refused is not None:
            LOG.warning("refused: %s", refused[1])
            await _error(*refused)(scope, receive, send)
            return
        body, more = b"", True
        while more:  # read here, bounded, whatever Content-Length said (chunked bodies have none)
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_body_bytes:
                await _error(413, f"request body over {self.max_body_bytes} bytes (interp serve "
                                  "--max-body-bytes)")(scope, receive, send)
                return
        given = False

        async def replay() -> Message:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: any free port); a port in use is a ValueError naming it."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ValueError(f"--host/--port: cannot listen on {host}:{port} ({exc.strerror})") from None
    sock.listen(128)
    return sock


@dataclass
class Running:
    """A server running in a background thread (tests, notebooks): ``url``, :meth:`stop`."""

    url: str
    server: Any
    thread: threading.Thread

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (open connections cut) and wait for its thread."""
        self.server.should_exit = self.server.force_exit = True
        self.thread.join(timeout)


def make_server(app: ASGIApp) -> uvicorn.Server:
    """A quiet uvicorn server for an ASGI app (warnings only, no access log)."""
    import uvicorn

    return uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))


def start(app: ASGIApp, host: str = "127.0.0.1", port: int = 0) -> Running:
    """Serve ``app`` from a background thread on a socket already listening (requests queue until it runs)."""
    sock = bind(host, port)
    server = make_server(app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="interp-serve", daemon=True)
    thread.start()
    return Running(f"http://{host}:{sock.getsockname()[1]}/v1", server, thread)


def settings_line(proxy: Proxy, url: str) -> str:
    """What ``interp serve`` prints at start: where, the policy, the session bound."""
    memory = (" (each holds the sensor's KV-cache snapshots of its latest history: cache_bytes in the run log)"
              if proxy.policy.condition in ("iclr", "iclr_step_only") else "")
    budget = f", snapshots held at most {proxy.memory_budget} bytes" if proxy.memory_budget is not None else ""
    return (f"interp serve: {url} -> {proxy.upstream} under {proxy.policy.label} (decide {proxy.decide}; provider "
            f"rules: {proxy.provider}); at most {proxy.max_sessions} sessions{memory}, idle ones dropped after "
            f"{proxy.session_ttl:.0f} s{budget}; run log {proxy.log_dir}")


__all__ = ["Gatekeeper", "Proxy", "Running", "SSEUsage", "bind", "host_name", "make_server", "path_refusal",
           "session_of", "settings_line", "start", "usage_of"]
