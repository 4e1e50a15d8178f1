"""The labelling page's web server (Starlette on uvicorn), bound to 127.0.0.1 only, answering only with the token.

Safety with real logs:

- the socket is bound to ``127.0.0.1`` (no option changes it) and the
  ``Host`` header must be ``127.0.0.1`` or ``localhost`` (DNS rebinding);
  ``behind_proxy`` (a notebook behind jupyter-server-proxy, whose requests
  keep the Jupyter server's own ``Host``) also admits requests carrying the
  proxy's ``X-Forwarded-Context`` header, the token still required;
- every request must carry the per-session token (``secrets.token_urlsafe``,
  as Jupyter does): the ``X-Annotate-Token`` header (the page's own calls) or
  a ``token`` query parameter (the URL printed at start); else 403;
- no request parameter becomes a file path: the page, its script and its
  style sheet are three fixed package files, items are queue indices;
- trajectory text travels as JSON strings and the page inserts it with
  ``textContent``; the Content-Security-Policy allows only the page's own
  script and style (no inline script, no images, no other origin), so markup
  that slipped through would still not run;
- the API is strict: a body over ``MAX_BODY`` bytes is a 413, a body that is
  not a flat JSON object of the route's fields (malformed, nested, an unknown
  field, a label other than the integer 0 or 1) a 400 with a one-line message.

Every URL the page uses is relative (``api/state``, ``app.js``), so it works
under a path prefix: jupyter-server-proxy serves it at
``{base_url}proxy/{port}/`` and strips the prefix before forwarding.
``frame-ancestors`` admits the page's own origin (a notebook behind the
proxy), notebooks on loopback (``http``/``https``, any port: an SSH tunnel to
a remote Jupyter) and any origins given (``frame_ancestors``, ``interp
annotate --frame-ancestor``).

Routes: ``GET /`` (the page, with the guideline), ``GET /app.js``, ``GET
/app.css``, ``GET /api/state``, ``GET /api/item/{index}?suggestions=0|1``,
``POST /api/label`` ``{index, value, suggestions}``, ``POST /api/skip``
``{index}``, ``POST /api/undo`` ``{}``, ``POST /api/note`` ``{index, note}``.
"""

from __future__ import annotations

import hmac
import html
import json
import re
import secrets
import shlex
import socket
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from interp.annotation.guideline import guideline_html
from interp.annotation.session import (
    AnnotatorLabels,
    Item,
    Session,
    build_queue,
    disagreement_queue,
    folder_for,
    read_annotator_csv,
    review_queue,
    shown_sha256,
    task_fields,
    trajectory_sha256,
)
from interp.annotation.views import item_view
from interp.data.trajectory import Trajectory, load_trajectories
from interp.externalization.labeler import GapLabelerConfig, Sources
from interp.io import check_output_dir, file_sha256, writer_lock

if TYPE_CHECKING:
    import uvicorn

    from interp.annotation.notebook import AnnotationFrame

HOST = "127.0.0.1"
LOOPBACK = (HOST, "localhost")
TOKEN_HEADER = "x-annotate-token"
PROXY_HEADER = "x-forwarded-context"  # set by jupyter-server-proxy on every request it forwards
MAX_BODY = 64 * 1024  # bytes of a POST body (a note is at most 10000 characters)
NOTE_CHARS = 10_000
# frame-ancestors: the page's own origin (behind jupyter-server-proxy) and notebooks on loopback, any port
FRAME_ANCESTORS = ("'self'", "http://127.0.0.1:*", "http://localhost:*", "https://127.0.0.1:*", "https://localhost:*")
ORIGIN = re.compile(r"https?://(\*\.)?[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*(:(\d{1,5}|\*))?")
STATIC = {"/app.js": ("app.js", "text/javascript"), "/app.css": ("app.css", "text/css")}
BODIES: dict[str, dict[str, tuple[type, bool]]] = {  # route -> field -> (type, required); nothing else is accepted
    "label": {"index": (int, True), "value": (int, True), "suggestions": (bool, False)},
    "skip": {"index": (int, True)},
    "undo": {},
    "note": {"index": (int, True), "note": (str, True)},
}


def security_headers(frame_ancestors: Sequence[str] = ()) -> dict[str, str]:
    """The headers of every response: the CSP (own script and style only; frames by the given origins), no sniffing,
    no referrer, no caching. An origin is ``scheme://host[:port]`` (``*.`` and ``:*`` allowed); else ValueError."""
    for origin in frame_ancestors:
        if not ORIGIN.fullmatch(origin):
            raise ValueError(f"--frame-ancestor {origin!r}: expected an origin like https://hub.example.org[:PORT]")
    csp = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'none'; "
           "base-uri 'none'; form-action 'none'; frame-ancestors " + " ".join([*FRAME_ANCESTORS, *frame_ancestors]))
    return {"content-security-policy": csp, "x-content-type-options": "nosniff", "referrer-policy": "no-referrer",
            "cache-control": "no-store"}


class BadRequest(ValueError):
    """A request the API refuses: ``status`` (400 or 413) and a one-line message."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


async def read_body(request: Request) -> bytes:
    """The request body, at most ``MAX_BODY`` bytes (else a 413 :class:`BadRequest`, read no further)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise BadRequest(f"body: {declared} bytes, more than the {MAX_BODY} allowed", 413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise BadRequest(f"body: more than the {MAX_BODY} bytes allowed", 413)
        chunks.append(chunk)
    return b"".join(chunks)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_body(raw: bytes, route: str) -> dict[str, Any]:
    """The body of a POST to ``route`` as a flat object of exactly its fields (``BODIES``), else :class:`BadRequest`.

    Types are exact: an index or label is a JSON integer (``1.0`` and ``true`` are refused), ``suggestions`` a
    boolean, a note a string of at most ``NOTE_CHARS`` characters; an empty body is ``{}``.
    """
    try:
        body = json.loads(raw.decode("utf-8"), parse_constant=_no_constant) if raw.strip() else {}
    except RecursionError:
        raise BadRequest("body: JSON nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"body: not JSON ({str(exc).splitlines()[0][:120]})") from None
    if not isinstance(body, dict):
        raise BadRequest(f"body: expected a JSON object, got {type(body).__name__}")
    spec = BODIES[route]
    unknown = sorted(set(body) - set(spec))
    if unknown:
        raise BadRequest(f"body: unknown field(s) {', '.join(repr(k[:40]) for k in unknown[:5])} for {route}")
    for name, (kind, required) in spec.items():
        if name not in body:
            if required:
                raise BadRequest(f"{name}: missing")
            continue
        value = body[name]
        if type(value) is not kind:
            raise BadRequest(f"{name}: expected a JSON {'integer' if kind is int else kind.__name__}, got "
                             f"{json.dumps(value)[:40] if not isinstance(value, (dict, list)) else type(value).__name__}")
    if route == "label" and body["value"] not in (0, 1):
        raise BadRequest(f"value: {body['value']} is not 0 or 1")
    if route == "note" and len(body["note"]) > NOTE_CHARS:
        raise BadRequest(f"note: {len(body['note'])} characters, more than {NOTE_CHARS}")
    return body


class HostGuard:
    """ASGI middleware: 400 unless the ``Host`` is loopback (DNS rebinding); ``behind_proxy`` also admits requests
    that jupyter-server-proxy forwarded (they carry ``X-Forwarded-Context``; the token is checked all the same)."""

    def __init__(self, app: ASGIApp, behind_proxy: bool = False):
        self.app, self.behind_proxy = app, behind_proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = Request(scope).headers
            host = headers.get("host", "").rsplit(":", 1)[0] if not headers.get("host", "").startswith("[") else ""
            proxied = self.behind_proxy and PROXY_HEADER in headers
            if host not in LOOPBACK and not proxied:
                await PlainTextResponse("400: Invalid host header", status_code=400)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class TokenGuard:
    """ASGI middleware: 403 unless the request carries the session token; security headers on every response."""

    def __init__(self, app: ASGIApp, token: str, headers: Mapping[str, str]):
        self.app, self.token, self.headers = app, token.encode(), dict(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        given = request.headers.get(TOKEN_HEADER) or request.query_params.get("token") or ""

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"],
                                      *((k.encode(), v.encode()) for k, v in self.headers.items())]
            await send(message)

        if not hmac.compare_digest(given.encode(), self.token):
            await PlainTextResponse("403: this page needs the session token printed by `interp annotate`",
                                    status_code=403)(scope, receive, send_secured)
            return
        await self.app(scope, receive, send_secured)


def _static(name: str) -> str:
    return resources.files("interp.annotation").joinpath("static", name).read_text(encoding="utf-8")


@dataclass
class AnnotationApp:
    """The state behind the routes: the session, the trajectories by id, the token."""

    session: Session
    trajectories: Mapping[str, Trajectory]
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    sources: dict[str, Sources] = field(default_factory=dict)  # per-trajectory carriers of the G evidence
    restart: str = ""  # the command that restarts this session (shown when the server is gone)
    frame_ancestors: tuple[str, ...] = ()  # more origins that may frame the page (a remote Jupyter)
    behind_proxy: bool = False  # admit requests forwarded by jupyter-server-proxy whatever their Host

    def state(self) -> dict[str, Any]:
        """What the page needs once: progress, position, mode, task, annotator, where labels go, how to restart."""
        s = self.session
        return {"total": len(s.queue), "labelled": s.labelled(), "position": s.position, "mode": s.mode,
                "task": s.task, "fields": list(s.fields), "annotator": s.annotator, "marks": s.marks(),
                "compared": [c.annotator for c in s.compared or ()], "labels_csv": str(s.labels_csv),
                "reviewed": s.reviewed.annotator if s.reviewed else None,
                "journal": str(s.journal.path), "restart": self.restart, "flags": s.flags}

    def item(self, index: int, suggestions: bool) -> dict[str, Any]:
        """The payload of queue item ``index`` with its current label, note and (adjudication) the two others'."""
        s = self.session
        item = s.item_at(index)
        traj = self.trajectories[item.task_id]
        if suggestions and item.field == "externalization_gap" and item.task_id not in self.sources:
            self.sources[item.task_id] = Sources.of(traj, GapLabelerConfig().carriers)
        view = item_view(traj, item, suggestions, self.sources.get(item.task_id))
        view.update(index=index, total=len(s.queue), labelled=s.labelled(), value=s.value(item),
                    note=s.notes.get(item, ""), others=s.others(item), changed=item in s.changed)
        return view

    def build(self) -> Starlette:
        """The Starlette application: token guard outside, trusted hosts inside, the routes."""
        page = (_static("index.html").replace("$GUIDELINE", guideline_html())
                .replace("$TOKEN", html.escape(self.token, quote=True)))
        headers = security_headers(self.frame_ancestors)

        async def index(request: Request) -> Response:
            return Response(page, media_type="text/html")

        async def static(request: Request) -> Response:
            name, kind = STATIC[request.url.path]
            return Response(_static(name), media_type=kind)

        async def state(request: Request) -> Response:
            return JSONResponse(self.state())

        async def item(request: Request) -> Response:
            try:  # in a worker thread: the rule evidence of a late boundary of a long run can take seconds
                return JSONResponse(await run_in_threadpool(self.item, int(request.path_params["index"]),
                                                            request.query_params.get("suggestions") == "1"))
            except ValueError as exc:
                return JSONResponse({"error": str(exc)}, status_code=404)

        async def change(request: Request) -> Response:
            route = request.url.path.rsplit("/", 1)[-1]
            try:
                reply = self.change(route, parse_body(await read_body(request), route))
            except BadRequest as exc:
                return JSONResponse({"error": str(exc)}, status_code=exc.status)
            except ValueError as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
            s = self.session
            return JSONResponse({**reply, "labelled": s.labelled(), "total": len(s.queue), "marks": s.marks()})

        routes = [Route("/", index), *(Route(p, static) for p in STATIC), Route("/api/state", state),
                  Route("/api/item/{index:int}", item),
                  *(Route(f"/api/{name}", change, methods=["POST"]) for name in BODIES)]
        return Starlette(routes=routes, middleware=[Middleware(TokenGuard, token=self.token, headers=headers),
                                                    Middleware(HostGuard, behind_proxy=self.behind_proxy)])

    def change(self, kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Apply one change (label, skip, undo, note; ``body`` checked by :func:`parse_body`) to the session; the
        reply the page reads."""
        s = self.session
        if kind == "undo":
            return {"index": s.undo()}
        if kind == "label":
            s.label(body["index"], body["value"], body.get("suggestions", False))
        elif kind == "skip":
            s.skip(body["index"])
        else:
            s.note(body["index"], body["note"])
        return {"index": s.position}


def bind(port: int) -> socket.socket:
    """A listening TCP socket on 127.0.0.1:``port`` (0: any free port); a port in use is a ValueError naming it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as exc:
        sock.close()
        raise ValueError(f"--port {port}: cannot listen on {HOST}:{port} ({exc.strerror}); pick another") from None
    sock.listen(64)
    return sock


def url_of(sock: socket.socket, token: str) -> str:
    """The page's URL with the token, as printed at start."""
    return f"http://{HOST}:{sock.getsockname()[1]}/?token={token}"


def make_server(app: AnnotationApp) -> uvicorn.Server:
    """A uvicorn server for ``app`` (quiet: warnings only, no access log; the URL is printed by the caller)."""
    import uvicorn

    return uvicorn.Server(uvicorn.Config(app.build(), log_level="warning", access_log=False, lifespan="off"))


@dataclass
class Plan:
    """Everything a session needs, read and checked before anything is written (trajectories, queue, the CSVs)."""

    labels_csv: Path
    annotator: str
    task: str
    trajectories: dict[str, Trajectory]
    queue: list[Item]
    full_queue: list[Item]
    start: dict[str, Any]
    compared: tuple[AnnotatorLabels, AnnotatorLabels] | None = None
    restart: str = ""
    reviewed: AnnotatorLabels | None = None


def restart_command(trajectories: Path, labels_csv: Path, annotator: str, task: str,
                    adjudicate: Sequence[Path] = (), review: Path | None = None, allow_control_tokens: bool = False,
                    ) -> str:
    """The ``interp annotate`` command line that resumes this session (shell-quoted); :func:`open_app` adds the
    serving options (``--frame-ancestor``, ``--behind-proxy``, ``--port``)."""
    args = ["interp", "annotate", "--trajectories", str(trajectories), "--labels", str(labels_csv),
            "--annotator", annotator, "--task", task, *(a for p in adjudicate for a in ("--adjudicate", str(p))),
            *(("--review", str(review)) if review is not None else ()),
            *(("--allow-control-tokens",) if allow_control_tokens else ())]
    return " ".join(shlex.quote(a) for a in args)


def plan(trajectories: Path, labels_csv: Path, annotator: str, task: str = "g",
         adjudicate: Sequence[Path] = (), allow_control_tokens: bool = False, review: Path | None = None) -> Plan:
    """Load and check the inputs of a session (no side effect): the queue, the disagreements of two CSVs, or the
    labels of one CSV to review (a judge's)."""
    fields = task_fields(task)
    if not annotator.strip():
        raise ValueError("--annotator: empty name")
    if adjudicate and len(adjudicate) != 2:
        raise ValueError(f"--adjudicate: give exactly two annotators' CSVs, got {len(adjudicate)}")
    labels_csv = Path(labels_csv)
    if labels_csv.is_dir():
        raise ValueError(f"--labels {labels_csv}: is a folder; give the CSV file to write")
    if adjudicate and review is not None:
        raise ValueError("--review: give either --adjudicate (two annotators) or --review (one), not both")
    if any(Path(p).resolve() == labels_csv.resolve() for p in [*adjudicate, *([review] if review else [])]):
        raise ValueError(f"--labels {labels_csv}: is one of the --adjudicate inputs; write the adjudication "
                         "to a new file")
    check_output_dir(labels_csv.parent, "--labels")
    trajs = load_trajectories(trajectories, allow_control_tokens=allow_control_tokens)
    full = build_queue(trajs, task)
    compared = ((read_annotator_csv(Path(adjudicate[0]), fields, trajs),
                 read_annotator_csv(Path(adjudicate[1]), fields, trajs)) if adjudicate else None)
    reviewed = read_annotator_csv(Path(review), fields, trajs) if review is not None else None
    queue = (disagreement_queue(full, *compared) if compared else review_queue(full, reviewed) if reviewed
             else full)
    if not queue:
        raise ValueError(f"--adjudicate: {adjudicate[0]} and {adjudicate[1]} agree on every item they share; "
                         "nothing to adjudicate" if compared else f"--review {review}: no label of --task {task} "
                         "to review" if reviewed else f"--trajectories {trajectories}: no item to label")
    start = {"trajectories": {"path": str(trajectories), "sha256": file_sha256(Path(trajectories))},
             "compared": [str(p) for p in adjudicate], **({"reviewed": str(review)} if review is not None else {})}
    return Plan(labels_csv, annotator.strip(), task, {t.task_id: t for t in trajs}, queue, full, start, compared,
                restart_command(Path(trajectories), labels_csv, annotator.strip(), task, adjudicate, review,
                                allow_control_tokens),
                reviewed)


def open_app(p: Plan, frame_ancestors: Sequence[str] = (), behind_proxy: bool = False, port: int | None = None
             ) -> AnnotationApp:
    """The app of a plan: replays (and appends a start to) the journal, rewrites the CSV. Call under the lock.
    Its restart command is the plan's plus the serving options given here (``port``: the ``--port`` asked for)."""
    security_headers(frame_ancestors)  # a bad origin is refused before the journal is touched
    hashes = {task_id: trajectory_sha256(t) for task_id, t in p.trajectories.items()}
    shown = {item: shown_sha256(p.trajectories[item.task_id], item) for item in p.full_queue}
    session = Session(p.queue, p.labels_csv, p.annotator, p.task, p.start, p.compared, p.full_queue, hashes,
                      p.reviewed, shown)
    serving = [*(a for f in frame_ancestors for a in ("--frame-ancestor", f)),
               *(("--behind-proxy",) if behind_proxy else ()), *(("--port", str(port)) if port else ())]
    restart = " ".join([p.restart, *(shlex.quote(a) for a in serving)])
    return AnnotationApp(session, p.trajectories, restart=restart, frame_ancestors=tuple(frame_ancestors),
                         behind_proxy=behind_proxy)


def session_lock(labels_csv: Path) -> AbstractContextManager[Path]:
    """The writer lock of an output CSV's session folder: a second server on the same output is refused."""
    return writer_lock(folder_for(labels_csv), command="annotate")


def jupyter_proxy_available() -> bool:
    """True when jupyter-server-proxy is installed here (a notebook's page is then reachable through Jupyter)."""
    import importlib.util

    return importlib.util.find_spec("jupyter_server_proxy") is not None


@dataclass
class RunningAnnotation:
    """A labelling server running in a background thread (for notebooks): ``url``, :meth:`frame`, :meth:`stop`."""

    url: str
    app: AnnotationApp
    server: Any
    thread: threading.Thread
    lock: ExitStack
    port: int = 0

    def proxy_url(self, prefix: str | None = None) -> str:
        """The page's path through jupyter-server-proxy: ``{prefix}proxy/{port}/?token=...``; ``prefix`` is the
        Jupyter server's base URL (default: ``$JUPYTERHUB_SERVICE_PREFIX`` on JupyterHub, else ``/``)."""
        import os

        base = prefix if prefix is not None else os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/")
        return f"{base.rstrip('/')}/proxy/{self.port}/?token={self.app.token}"

    def frame(self, width: str = "100%", height: int = 640, via: str = "auto", prefix: str | None = None) -> AnnotationFrame:
        """An IFrame of the page for a notebook cell: ``via`` ``proxy`` (through jupyter-server-proxy: remote kernels,
        JupyterHub), ``direct`` (``http://127.0.0.1:PORT``: the browser on this machine or an SSH tunnel of the
        port) or ``auto`` (proxy when jupyter-server-proxy is installed)."""
        from interp.annotation.notebook import annotation_iframe

        if via not in ("auto", "proxy", "direct"):
            raise ValueError(f"via: {via!r}; use auto, proxy or direct")
        proxied = via == "proxy" or (via == "auto" and jupyter_proxy_available())
        return annotation_iframe(self.proxy_url(prefix) if proxied else self.url, width, height)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server, wait for its thread and release the output's writer lock."""
        self.server.should_exit = True
        self.thread.join(timeout)
        self.lock.close()


def start_annotation(trajectories: Path, labels_csv: Path, annotator: str, task: str = "g", port: int = 0,
                     adjudicate: Sequence[Path] = (), allow_control_tokens: bool = False,
                     frame_ancestors: Sequence[str] = (), behind_proxy: bool | None = None,
                     review: Path | None = None) -> RunningAnnotation:
    """Serve the labelling page from a background thread (a notebook's way of ``interp annotate``);
    ``behind_proxy`` (default: when jupyter-server-proxy is installed) admits requests forwarded by it."""
    p = plan(trajectories, labels_csv, annotator, task, adjudicate, allow_control_tokens, review)
    proxied = jupyter_proxy_available() if behind_proxy is None else behind_proxy
    sock = bind(port)
    lock = ExitStack()
    try:
        lock.enter_context(session_lock(p.labels_csv))
        app = open_app(p, frame_ancestors, proxied)
    except BaseException:
        sock.close()
        lock.close()
        raise
    server = make_server(app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="interp-annotate", daemon=True)
    thread.start()
    return RunningAnnotation(url_of(sock, app.token), app, server, thread, lock, sock.getsockname()[1])
