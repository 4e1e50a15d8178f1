"""The labelling page's web server (Starlette on uvicorn), bound to 127.0.0.1 only, answering only with the token.

Safety with real logs:

- the socket is bound to ``127.0.0.1`` (no option changes it) and the
  ``Host`` header must be ``127.0.0.1`` or ``localhost`` (DNS rebinding);
- every request must carry the per-session token (``secrets.token_urlsafe``,
  as Jupyter does): the ``X-Annotate-Token`` header (the page's own calls) or
  a ``token`` query parameter (the URL printed at start); else 403;
- no request parameter becomes a file path: the page, its script and its
  style sheet are three fixed package files, items are queue indices;
- trajectory text travels as JSON strings and the page inserts it with
  ``textContent``; the Content-Security-Policy allows only the page's own
  script and style (no inline script, no images, no other origin), so markup
  that slipped through would still not run.

Routes: ``GET /`` (the page), ``GET /app.js``, ``GET /app.css``, ``GET
/api/state``, ``GET /api/item/{index}?suggestions=0|1``, ``POST /api/label``
``{index, value, suggestions}``, ``POST /api/skip`` ``{index}``, ``POST
/api/undo``, ``POST /api/note`` ``{index, note}``.
"""

from __future__ import annotations

import hmac
import html
import json
import secrets
import socket
import threading
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from interp.annotation.rules import labelling_rules
from interp.annotation.session import (
    AnnotatorLabels,
    Item,
    Session,
    build_queue,
    disagreement_queue,
    folder_for,
    read_annotator_csv,
    task_fields,
)
from interp.annotation.views import item_view
from interp.data.trajectory import Trajectory, load_trajectories
from interp.externalization.labeler import GapLabelerConfig, Sources
from interp.io import check_output_dir, file_sha256, writer_lock

HOST = "127.0.0.1"
TOKEN_HEADER = "x-annotate-token"
# frame-ancestors: a notebook on this machine (any port) may show the page in an IFrame
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'none'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'self' http://127.0.0.1:* http://localhost:*")
SECURITY_HEADERS = {"content-security-policy": CSP, "x-content-type-options": "nosniff",
                    "referrer-policy": "no-referrer", "cache-control": "no-store"}
STATIC = {"/app.js": ("app.js", "text/javascript"), "/app.css": ("app.css", "text/css")}


class TokenGuard:
    """ASGI middleware: 403 unless the request carries the session token; security headers on every response."""

    def __init__(self, app: Any, token: str):
        self.app, self.token = app, token.encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        given = request.headers.get(TOKEN_HEADER) or request.query_params.get("token") or ""

        async def send_secured(message: dict) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"],
                                      *((k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items())]
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

    def state(self) -> dict[str, Any]:
        """What the page needs once: progress, position, mode, task, annotator and the labelling rules."""
        s = self.session
        return {"total": len(s.queue), "labelled": s.labelled(), "position": s.position, "mode": s.mode,
                "task": s.task, "fields": list(s.fields), "annotator": s.annotator, "rules": labelling_rules(),
                "compared": [c.annotator for c in s.compared or ()]}

    def item(self, index: int, suggestions: bool) -> dict[str, Any]:
        """The payload of queue item ``index`` with its current label, note and (adjudication) the two others'."""
        s = self.session
        item = s.item_at(index)
        traj = self.trajectories[item.task_id]
        if suggestions and item.field == "externalization_gap" and item.task_id not in self.sources:
            self.sources[item.task_id] = Sources.of(traj, GapLabelerConfig().carriers)
        view = item_view(traj, item, suggestions, self.sources.get(item.task_id))
        view.update(index=index, total=len(s.queue), labelled=s.labelled(), value=s.value(item),
                    note=s.notes.get(item, ""), others=s.others(item))
        return view

    def build(self) -> Starlette:
        """The Starlette application: token guard outside, trusted hosts inside, the routes."""
        page = _static("index.html").replace("$TOKEN", html.escape(self.token, quote=True))

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
            try:
                body = json.loads(await request.body() or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("body: expected a JSON object")
                reply = self.change(request.url.path.rsplit("/", 1)[-1], body)
            except (ValueError, TypeError) as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
            return JSONResponse({**reply, "labelled": self.session.labelled(), "total": len(self.session.queue)})

        routes = [Route("/", index), *(Route(p, static) for p in STATIC), Route("/api/state", state),
                  Route("/api/item/{index:int}", item),
                  *(Route(f"/api/{name}", change, methods=["POST"]) for name in ("label", "skip", "undo", "note"))]
        return Starlette(routes=routes, middleware=[Middleware(TokenGuard, token=self.token),
                                                    Middleware(TrustedHostMiddleware,
                                                               allowed_hosts=[HOST, "localhost"])])

    def change(self, kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Apply one POSTed change (label, skip, undo, note) to the session; the reply the page reads."""
        s = self.session
        if kind == "undo":
            return {"index": s.undo()}
        index = body.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise ValueError("index: expected an integer")
        if kind == "label":
            s.label(index, body.get("value"), bool(body.get("suggestions")))
        elif kind == "skip":
            s.skip(index)
        else:
            note = body.get("note")
            if not isinstance(note, str) or len(note) > 10_000:
                raise ValueError("note: expected a string of at most 10000 characters")
            s.note(index, note)
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


def make_server(app: AnnotationApp) -> Any:
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


def plan(trajectories: Path, labels_csv: Path, annotator: str, task: str = "g",
         adjudicate: Sequence[Path] = (), allow_control_tokens: bool = False) -> Plan:
    """Load and check the inputs of a session (no side effect): the queue, or the disagreements of two CSVs."""
    fields = task_fields(task)
    if not annotator.strip():
        raise ValueError("--annotator: empty name")
    if adjudicate and len(adjudicate) != 2:
        raise ValueError(f"--adjudicate: give exactly two annotators' CSVs, got {len(adjudicate)}")
    labels_csv = Path(labels_csv)
    if labels_csv.is_dir():
        raise ValueError(f"--labels {labels_csv}: is a folder; give the CSV file to write")
    if any(Path(p).resolve() == labels_csv.resolve() for p in adjudicate):
        raise ValueError(f"--labels {labels_csv}: is one of the --adjudicate inputs; write the adjudication "
                         "to a new file")
    check_output_dir(labels_csv.parent, "--labels")
    trajs = load_trajectories(trajectories, allow_control_tokens=allow_control_tokens)
    full = build_queue(trajs, task)
    compared = tuple(read_annotator_csv(Path(p), fields, trajs) for p in adjudicate) or None
    queue = disagreement_queue(full, *compared) if compared else full
    if not queue:
        raise ValueError(f"--adjudicate: {adjudicate[0]} and {adjudicate[1]} agree on every item they share; "
                         "nothing to adjudicate" if compared else f"--trajectories {trajectories}: no item to label")
    start = {"trajectories": {"path": str(trajectories), "sha256": file_sha256(Path(trajectories))},
             "compared": [str(p) for p in adjudicate]}
    return Plan(labels_csv, annotator.strip(), task, {t.task_id: t for t in trajs}, queue, full, start, compared)


def open_app(p: Plan) -> AnnotationApp:
    """The app of a plan: replays (and appends a start to) the journal, rewrites the CSV. Call under the lock."""
    session = Session(p.queue, p.labels_csv, p.annotator, p.task, p.start, p.compared, p.full_queue)
    return AnnotationApp(session, p.trajectories)


def session_lock(labels_csv: Path) -> Any:
    """The writer lock of an output CSV's session folder: a second server on the same output is refused."""
    return writer_lock(folder_for(labels_csv), command="annotate")


@dataclass
class RunningAnnotation:
    """A labelling server running in a background thread (for notebooks): ``url``, :meth:`frame`, :meth:`stop`."""

    url: str
    app: AnnotationApp
    server: Any
    thread: threading.Thread
    lock: ExitStack

    def frame(self, width: str = "100%", height: int = 720) -> Any:
        """An IFrame of the page for a notebook cell (:func:`interp.annotation.notebook.annotation_iframe`)."""
        from interp.annotation.notebook import annotation_iframe

        return annotation_iframe(self.url, width, height)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server, wait for its thread and release the output's writer lock."""
        self.server.should_exit = True
        self.thread.join(timeout)
        self.lock.close()


def start_annotation(trajectories: Path, labels_csv: Path, annotator: str, task: str = "g", port: int = 0,
                     adjudicate: Sequence[Path] = (), allow_control_tokens: bool = False) -> RunningAnnotation:
    """Serve the labelling page from a background thread (a notebook's way of ``interp annotate``)."""
    p = plan(trajectories, labels_csv, annotator, task, adjudicate, allow_control_tokens)
    sock = bind(port)
    lock = ExitStack()
    try:
        lock.enter_context(session_lock(p.labels_csv))
        app = open_app(p)
    except BaseException:
        sock.close()
        lock.close()
        raise
    server = make_server(app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="interp-annotate", daemon=True)
    thread.start()
    return RunningAnnotation(url_of(sock, app.token), app, server, thread, lock)
