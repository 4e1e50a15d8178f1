"""Model-assisted labels: an OpenAI-compatible chat model labels G and y per boundary, with the guideline as rubric.

``interp labels judge`` (also ``interp label --judge``; :func:`run_judge`) sends one chat-completions request
per item (``task_id, after_step, field``, the queue of ``interp annotate``:
G at b = 1..n, y at b = 1..n-1) to any OpenAI-compatible endpoint (a local
vLLM, Ollama or llama.cpp server, a hosted API): ``POST {base_url}/chat/completions``
with the standard library's HTTP client (:mod:`http.client`, no SDK, no proxy).

The request. The system message is the labelling guideline
(:func:`interp.annotation.guideline.guideline_markdown`) and the answer
format (:data:`ANSWER_FORMAT`); the user message is the item
(:func:`item_prompt`): the task, the agent's system prompt and tools, steps
1..b and, for y only, the later steps b+1..n (a G request never holds a
later step, as on the page). Every text longer than ``max_chars`` is cut in
the middle with a marker. ``temperature`` 0 by default.

The answer states the label first, alone on its first line (``G: 0`` or
``G: 1``; ``y: 0`` or ``y: 1``), then the rationale (:func:`parse_answer`).
Label first, because a small model follows that far better than a JSON
object (SmolLM2-135M gave prose for every JSON request), and because a reply
cut off by the token limit still holds its label. Anything else (a first line
that is not exactly one such label, a reply that also states the other label,
an empty or malformed response, an HTTP error, a timeout) is recorded as
**missing** with the reason, never as 0.

Retries and pacing. HTTP 429, 5xx, timeouts and connection errors are retried
up to ``max_retries`` times, waiting ``Retry-After`` (seconds or an HTTP date)
when the server sends it, at most ``max_wait_s`` (``--max-wait``; every such
wait is logged), else ``backoff_s * 2**attempt``; other 4xx are not retried.
Requests start at least ``min_interval_s`` apart (rate limit). Each request
has a total deadline of ``timeout_s``: connect, send and the whole reply, a
reply trickled a byte at a time included (:func:`http_post`). A run whose
every request failed (nothing answered) raises :class:`JudgeEndpointError`
with the endpoint's error (``interp labels judge`` exits non-zero).

Cache and resume. ``<labels>.judge/journal.jsonl`` beside the output CSV
gets one line per answer, flushed and fsynced before the next request; the
CSV is rewritten atomically after each, from every answer the journal holds
for the current requests (a ``--max-items`` pilot after a full run keeps every
row). A re-run (also after a kill) reads the
journal and asks only the items without an answer for the same request (same
model, rubric, item text and settings: ``request_sha256``): a failed request
(HTTP error, timeout, malformed response) is asked again, an unusable reply
the model gave (no label line, both labels) only with ``retry_missing``
(``--retry-missing``; at temperature 0 the same prompt gives the same reply). The folder's writer lock refuses a second judge on
the same output. The API key is sent, never written.

Fields of a journal line (``JOURNAL_FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``event`` | ``[]`` | str | - | start (a run began) or answer (one item's outcome) |
| ``time`` | ``[]`` | str | UTC | when, ISO 8601 |
| ``settings`` | ``{...}`` | object | - | start: base_url, model, trajectories (path, sha256), task, the request settings (never the key) |
| ``task_id`` | ``[]`` | str | - | answer: the item's trajectory |
| ``after_step`` | ``[]`` | int | steps | answer: the boundary b |
| ``field`` | ``[]`` | str | - | answer: externalization_gap or future_necessity |
| ``model`` | ``[]`` | str | - | answer: the model asked for |
| ``served_model`` | ``[]`` | str | - | answer: the model the server says answered (empty when it did not say) |
| ``prompt_sha256`` | ``[]`` | str | - | answer: sha256 of the system message (guideline + answer format): the rubric's version |
| ``request_sha256`` | ``[]`` | str | - | answer: sha256 of model, messages and settings: the cache key |
| ``label`` | ``[]`` | int or null | - | answer: 0 or 1; null = missing |
| ``rationale`` | ``[]`` | str | - | answer: the model's short reason (at most 500 characters) |
| ``problem`` | ``[]`` | str | - | answer: why the label is missing (empty when there is one) |
| ``attempts`` | ``[]`` | int | requests | answer: requests sent for this answer (1 + retries) |
| ``answered`` | ``[]`` | bool | - | answer: the model replied (a missing label then means an unusable reply, not a failed request) |

The labels CSV is the project's format (:func:`interp.data.labels.write_labels_csv`;
``interp probe --labels``, ``interp externalize risk --labels`` and ``interp
labels agree`` read it). Its columns (``CSV_FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``task_id`` | ``[n_rows]`` | str | - | the trajectory |
| ``after_step`` | ``[n_rows]`` | int | steps | the boundary b |
| ``externalization_gap`` | ``[n_rows]`` | int or null | - | G (task g or both); empty = missing or not asked |
| ``future_necessity`` | ``[n_rows]`` | int or null | - | y (task y or both); empty = missing or not asked |
| ``annotator`` | ``[n_rows]`` | str | - | ``judge:<model>`` |
| ``model`` | ``[n_rows]`` | str | - | the model the server says answered (else the one asked for) |
| ``prompt_sha256`` | ``[n_rows]`` | str | - | the rubric's sha256 (journal ``prompt_sha256``) |
| ``time`` | ``[n_rows]`` | str | UTC | the row's latest answer, ISO 8601 |
| ``rationale`` | ``[n_rows]`` | str | - | the model's reasons (``G: ...; y: ...`` with both) |
| ``missing`` | ``[n_rows]`` | str | - | the row's missing labels with why (``G: timeout after 120 s after 5 attempts``), else empty |
"""

from __future__ import annotations

import email.utils
import hashlib
import http.client
import json
import os
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from interp.annotation.guideline import guideline_markdown
from interp.annotation.session import SHORT, Item, build_queue, task_fields
from interp.data.labels import read_label_table, write_labels_csv
from interp.data.trajectory import Step, Trajectory, load_trajectories
from interp.io import file_sha256, writer_lock
from interp.params import REQUIRED, Check, Integer, Maybe, Real, Text, param, validate
from interp.schema import Field

JOURNAL_FIELDS = (
    Field("event", "[]", "str", "-", "start (a run began) or answer (one item's outcome)"),
    Field("time", "[]", "str", "UTC", "when, ISO 8601"),
    Field("settings", "{...}", "object", "-", "start: base_url, model, trajectories (path, sha256), task, the "
          "request settings (never the key)"),
    Field("task_id", "[]", "str", "-", "answer: the item's trajectory"),
    Field("after_step", "[]", "int", "steps", "answer: the boundary b"),
    Field("field", "[]", "str", "-", "answer: externalization_gap or future_necessity"),
    Field("model", "[]", "str", "-", "answer: the model asked for"),
    Field("served_model", "[]", "str", "-", "answer: the model the server says answered (empty when it did not say)"),
    Field("prompt_sha256", "[]", "str", "-", "answer: sha256 of the system message (guideline + answer format): "
          "the rubric's version"),
    Field("request_sha256", "[]", "str", "-", "answer: sha256 of model, messages and settings: the cache key"),
    Field("label", "[]", "int or null", "-", "answer: 0 or 1; null = missing"),
    Field("rationale", "[]", "str", "-", "answer: the model's short reason (at most 500 characters)"),
    Field("problem", "[]", "str", "-", "answer: why the label is missing (empty when there is one)"),
    Field("attempts", "[]", "int", "requests", "answer: requests sent for this answer (1 + retries)"),
    Field("answered", "[]", "bool", "-", "answer: the model replied (a missing label then means an unusable reply, "
          "not a failed request)"),
)
CSV_FIELDS = (
    Field("task_id", "[n_rows]", "str", "-", "the trajectory"),
    Field("after_step", "[n_rows]", "int", "steps", "the boundary b"),
    Field("externalization_gap", "[n_rows]", "int or null", "-", "G (task g or both); empty = missing or not asked"),
    Field("future_necessity", "[n_rows]", "int or null", "-", "y (task y or both); empty = missing or not asked"),
    Field("annotator", "[n_rows]", "str", "-", "``judge:<model>``"),
    Field("model", "[n_rows]", "str", "-", "the model the server says answered (else the one asked for)"),
    Field("prompt_sha256", "[n_rows]", "str", "-", "the rubric's sha256 (journal ``prompt_sha256``)"),
    Field("time", "[n_rows]", "str", "UTC", "the row's latest answer, ISO 8601"),
    Field("rationale", "[n_rows]", "str", "-", "the model's reasons (``G: ...; y: ...`` with both)"),
    Field("missing", "[n_rows]", "str", "-", "the row's missing labels with why "
          "(``G: timeout after 120 s after 5 attempts``), else empty"),
)
JOURNAL_NAME = "journal.jsonl"
RATIONALE_CHARS = 500
QUESTIONS = {
    "externalization_gap": "Is some live derived state at this boundary held only in the agent's reasoning "
                           "(G = 1), or is every live derived state in a carrier at or before b (G = 0)?",
    "future_necessity": "Do the later steps re-derive, add reasoning to, or re-plan state the agent had at this "
                        "boundary (y = 1), or not (y = 0)?",
}
ANSWER_FORMAT = (
    "You are an annotator applying the labelling guideline above to one boundary of an agent trajectory. "
    "Judge only the label you are asked for, by the guideline's definitions. Reply with the label first, alone on "
    "the first line: exactly G: 0 or G: 1 (y: 0 or y: 1 when asked for y). Then, on the next line, one or two "
    "sentences naming the state and where it is."
)
Post = Callable[[str, bytes, Mapping[str, str], float], tuple[int, Mapping[str, str], bytes]]


def check_base_url(value: str) -> str:
    """An http(s) API root (ValueError saying what is expected otherwise)."""
    if not re.match(r"^https?://[^/\s]+", value):
        raise ValueError("not an http(s) URL (e.g. http://127.0.0.1:8000/v1; or set OPENAI_BASE_URL)")
    return value


@dataclass(frozen=True)
class JudgeConfig:
    """Where to ask and how (``interp labels judge``): the endpoint, the model, the key (sent, never written),
    the deadline, retries, pacing and the prompt's limits."""

    base_url: str = param(REQUIRED, Check(check_base_url, "an http(s) URL", bad="ftp://x"),
                          "OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1 (vLLM), "
                          "http://127.0.0.1:11434/v1 (Ollama).", envvar="OPENAI_BASE_URL")
    model: str = param(REQUIRED, Text("a model name"), "Model name the endpoint serves; labels get annotator "
                       "judge:<model>.", envvar="OPENAI_MODEL")
    api_key: str | None = param(None, Maybe(Text("a key"), "no key sent"), "Bearer key (sent, never written or "
                                "printed).", envvar="OPENAI_API_KEY")
    timeout_s: float = param(120.0, Real(0, low_open=True), "Deadline per request, all of it: connect, send and the "
                             "whole reply, however slowly it comes.", "seconds", option="--timeout")
    max_retries: int = param(4, Integer(0), "Retries on 429, 5xx, timeouts, connection errors.",
                             option="--retries")
    backoff_s: float = param(2.0, Real(0), "First retry wait, doubling (a Retry-After header wins).", "seconds",
                             option="--backoff")
    min_interval_s: float = param(0.0, Real(0), "Rate limit: time between request starts.", "seconds",
                                  option="--min-interval")
    max_tokens: int = param(200, Integer(1), "Answer token limit.", "tokens")
    temperature: float = param(0.0, Real(0), "Sampling temperature of the judge.")
    max_chars: int = param(4000, Integer(200), "Longest text (reasoning, argument, observation) sent whole; longer "
                           "ones are cut in the middle.", "characters")
    max_wait_s: float = param(60.0, Real(0), "The longest Retry-After honoured (a longer one is cut to this; every "
                              "wait is printed).", "seconds", option="--max-wait")

    def __post_init__(self) -> None:
        validate(self)

    @property
    def endpoint(self) -> str:
        """The chat-completions URL of ``base_url``."""
        return self.base_url.rstrip("/") + "/chat/completions"

    def settings(self) -> dict[str, Any]:
        """Every setting but the key (what the journal records)."""
        return {k: v for k, v in asdict(self).items() if k != "api_key"}


@dataclass(frozen=True)
class Answer:
    """One item's outcome: ``label`` 0/1 or None (missing, with ``problem``), the rationale, requests sent."""

    label: int | None
    rationale: str
    problem: str
    attempts: int
    served_model: str = ""
    answered: bool = False


def _cut(text: str, limit: int) -> str:
    """``text`` cut in the middle to at most about ``limit`` characters, with a marker saying how much went."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


def _step_text(step: Step, t: int, limit: int) -> str:
    """Step ``t`` as text: reasoning, action (each argument on its own, code as written) and observations."""
    parts = [f"### Step {t}", "Reasoning:", _cut(step.reasoning.strip() or "(none)", limit), "Action:"]
    if step.action.is_text:
        parts.append(_cut(step.action.text or "", limit))
    for call in step.action.calls:
        parts.append(f"tool call {call.tool}")
        for key, value in dict(call.arguments).items():
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            parts.append(f"  {key}: " + _cut(shown, limit).replace("\n", "\n    "))
    for obs in step.observations:
        parts += ["Observation:", _cut(obs, limit)]
    return "\n".join(parts)


def item_prompt(traj: Trajectory, item: Item, max_chars: int = 4000) -> str:
    """The user message of one item: header, task, agent setup, steps 1..b, and steps b+1..n for y only."""
    b, name = item.after_step, SHORT[item.field]
    tools = "\n".join(f"- {t.get('name', '?')}: {t.get('description', '')}" for t in traj.tools) or "(none)"
    parts = [f"Label {name} ({item.field}) at boundary b = {b} of trajectory {traj.task_id} ({traj.n_steps} steps).",
             "## Task", _cut(traj.task, max_chars), "## The agent's system prompt", _cut(traj.system_prompt, max_chars),
             "## The agent's tools", _cut(tools, max_chars), "## Steps 1..b"]
    parts += [_step_text(s, t, max_chars) for t, s in enumerate(traj.steps[:b], start=1)]
    if item.field == "future_necessity":
        parts.append(f"===== BOUNDARY b = {b}: the steps above are the history; the later steps follow =====")
        parts += [_step_text(s, t, max_chars) for t, s in enumerate(traj.steps[b:], start=b + 1)]
    else:
        parts.append(f"===== BOUNDARY b = {b}: the history ends here (later steps are not shown for G) =====")
    parts.append(f"Question ({name} at b = {b}): {QUESTIONS[item.field]}\n"
                 f"Reply with {name}: 0 or {name}: 1 on the first line, then why.")
    return "\n\n".join(parts)


def system_prompt() -> str:
    """The system message: the guideline, then the answer format."""
    return guideline_markdown() + "\n\n" + ANSWER_FORMAT


def sha256_text(text: str) -> str:
    """Hex sha256 of a text's UTF-8 bytes."""
    return hashlib.sha256(text.encode()).hexdigest()


def request_body(config: JudgeConfig, messages: Sequence[Mapping[str, str]]) -> dict[str, Any]:
    """The chat-completions request (OpenAI's fields only, so every compatible server takes it)."""
    return {"model": config.model, "messages": list(messages), "temperature": config.temperature,
            "max_tokens": config.max_tokens, "stream": False}


def parse_answer(content: str, name: str) -> tuple[int | None, str, str]:
    """``(label, rationale, problem)`` from a reply whose first line is the label (``G: 1``) and whose rest is the
    rationale; label None with the problem when the first line is not exactly one ``<name>: 0|1`` or the reply
    states both values (an answer that does not state exactly one label is missing, never 0)."""
    lines = content.strip().splitlines()
    if not lines:
        return None, "", "empty answer"
    rationale = " ".join(" ".join(lines[1:]).split())[:RATIONALE_CHARS]
    first = re.fullmatch(rf"[\s*`_]*{re.escape(name)}\s*:\s*([01])[\s*`_.]*", lines[0], re.IGNORECASE)
    if first is None:
        snippet = " ".join(content.split())[:80]
        return None, rationale, f"unparseable answer (first line is not {name}: 0 or {name}: 1): {snippet!r}"
    stated = set(re.findall(rf"(?<![\w]){re.escape(name)}\s*[:=]\s*([01])(?![\w.])", content, re.IGNORECASE))
    if len(stated) > 1:
        return None, rationale, f"the answer states both {name}: 0 and {name}: 1"
    return int(first.group(1)), rationale, ""


def http_post(url: str, body: bytes, headers: Mapping[str, str], timeout: float
              ) -> tuple[int, Mapping[str, str], bytes]:
    """POST with a total deadline of ``timeout`` seconds for connect, send and the whole reply (a reply trickled a
    byte at a time included: a watchdog shuts the socket at the deadline); ``(status, headers, body)`` for every
    HTTP status. A deadline passed raises ``TimeoutError``; a connection failure ``OSError`` or
    ``http.client.HTTPException``. No proxy is used (the endpoint is asked directly)."""
    parts = urllib.parse.urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname or "", parts.port, timeout=timeout)
    expired = threading.Event()

    def cut() -> None:
        expired.set()
        if conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)  # a blocked read returns at once
            except OSError:
                pass

    watchdog = threading.Timer(timeout, cut)
    watchdog.daemon = True
    watchdog.start()
    try:
        conn.connect()
        if expired.is_set():
            raise TimeoutError
        conn.request("POST", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), body=body,
                     headers=dict(headers))
        response = conn.getresponse()
        data = response.read()
        if expired.is_set():
            raise TimeoutError
        return response.status, dict(response.headers), data
    except (OSError, http.client.HTTPException):
        if expired.is_set():
            raise TimeoutError(f"no complete reply within {timeout:g} s") from None
        raise
    finally:
        watchdog.cancel()
        conn.close()


class JudgeClient:
    """Asks the endpoint one item at a time: pacing, retries with backoff, timeouts, strict answer parsing."""

    def __init__(self, config: JudgeConfig, post: Post = http_post, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, log: Callable[[str], None] = lambda line: None):
        self.config, self.post, self.sleep, self.clock, self.log = config, post, sleep, clock, log
        self.last_start: float | None = None

    def _pace(self) -> None:
        """Wait until ``min_interval_s`` has passed since the previous request began."""
        if self.last_start is not None:
            wait = self.config.min_interval_s - (self.clock() - self.last_start)
            if wait > 0:
                self.sleep(wait)
        self.last_start = self.clock()

    def _wait(self, status: int | None, headers: Mapping[str, str], attempt: int) -> float:
        """Seconds before retry ``attempt + 1``: the server's Retry-After (seconds or an HTTP date) up to
        ``max_wait_s`` (logged), else the backoff."""
        backoff = self.config.backoff_s * 2 ** attempt
        raw = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
        if raw is None:
            return backoff
        try:
            asked = float(raw)
        except ValueError:
            try:
                asked = email.utils.parsedate_to_datetime(raw).timestamp() - time.time()
            except (TypeError, ValueError):
                self.log(f"HTTP {status}: Retry-After {raw!r} is neither seconds nor a date; waiting the backoff "
                         f"{backoff:g} s")
                return backoff
        asked = asked if asked == asked else 0.0  # NaN
        wait = min(max(0.0, asked), self.config.max_wait_s)
        if asked > 0:
            self.log(f"HTTP {status}: the server asks to wait {asked:g} s (Retry-After); waiting {wait:g} s"
                     + (f" (the cap, --max-wait {self.config.max_wait_s:g})" if wait < asked else "")
                     + f" before retry {attempt + 1} of {self.config.max_retries}")
        return wait

    def ask(self, messages: Sequence[Mapping[str, str]], name: str) -> Answer:
        """One item's answer to label ``name`` (G or y); a failure after every retry or an unusable reply is
        missing (label None), never 0."""
        c = self.config
        body = json.dumps(request_body(c, messages)).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if c.api_key:
            headers["Authorization"] = f"Bearer {c.api_key}"
        problem = ""
        for attempt in range(c.max_retries + 1):
            self._pace()
            reply: Mapping[str, str] = {}
            status: int | None = None
            try:
                status, reply, raw = self.post(c.endpoint, body, headers, c.timeout_s)
            except (TimeoutError, socket.timeout):
                problem = f"timeout after {c.timeout_s:g} s"
            except (OSError, http.client.HTTPException) as exc:
                problem = f"connection failed: {getattr(exc, 'reason', None) or exc}"
            else:
                if status == 200:
                    return self._answer(raw, attempt + 1, name)
                problem = f"HTTP {status}: {' '.join(raw.decode('utf-8', 'replace').split())[:120]!r}"
                if status != 429 and status < 500:
                    return Answer(None, "", problem, attempt + 1)
            if attempt < c.max_retries:
                self.sleep(self._wait(status, reply, attempt))
        return Answer(None, "", f"{problem} after {c.max_retries + 1} attempts", c.max_retries + 1)

    def _answer(self, raw: bytes, attempts: int, name: str) -> Answer:
        """The answer in a 200 response body; a body that is not a chat completion is missing with the reason."""
        try:
            doc = json.loads(raw)
            content = doc["choices"][0]["message"]["content"]
            if not isinstance(content, str):
                raise TypeError("content is not a string")
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            snippet = " ".join(raw.decode("utf-8", "replace").split())[:80]
            return Answer(None, "", f"malformed response ({type(exc).__name__}: {exc}): {snippet!r}", attempts)
        label, rationale, problem = parse_answer(content, name)
        served = doc.get("model") if isinstance(doc.get("model"), str) else ""
        return Answer(label, rationale, problem, attempts, served, answered=True)


def folder_for(labels_csv: Path) -> Path:
    """The judge's folder of an output CSV (journal and writer lock): ``<labels>.judge`` beside it."""
    labels_csv = Path(labels_csv)
    return labels_csv.parent / f"{labels_csv.name}.judge"


def now() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def read_journal(path: Path) -> list[dict[str, Any]]:
    """The journal's lines; a torn last line (a kill while writing) is cut off; other bad lines are errors."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    keep = raw.rfind(b"\n") + 1
    if keep < len(raw):
        with open(path, "r+b") as fh:
            fh.truncate(keep)
    out = []
    for line, text in enumerate(raw[:keep].decode("utf-8", "replace").split("\n")[:-1], start=1):
        try:
            event = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{line}: not JSON ({exc.msg}); the journal was edited by hand?") from None
        if not isinstance(event, dict) or event.get("event") not in ("start", "answer"):
            raise ValueError(f"{path}:{line}: event: expected start or answer")
        out.append(event)
    return out


def append_line(path: Path, event: Mapping[str, Any]) -> None:
    """Append one JSON line and force it to disk (flush + fsync) before returning."""
    with open(path, "ab") as fh:
        fh.write((json.dumps(dict(event), ensure_ascii=False, separators=(",", ":")) + "\n").encode())
        fh.flush()
        os.fsync(fh.fileno())


def csv_rows(queue: Sequence[Item], answers: Mapping[Item, Mapping[str, Any]], model: str) -> list[dict[str, Any]]:
    """The CSV rows (``CSV_FIELDS``): one per boundary with an answer (a label or a missing one), in queue order."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for item in queue:
        rec = answers.get(item)
        if rec is None:
            continue
        row = rows.setdefault(item.boundary, {"task_id": item.task_id, "after_step": item.after_step,
                                              "annotator": f"judge:{model}", "model": rec["served_model"] or model,
                                              "prompt_sha256": rec["prompt_sha256"], "time": "", "_why": [],
                                              "_missing": []})
        row[item.field] = "" if rec["label"] is None else rec["label"]
        row["time"] = max(row["time"], rec["time"])
        if rec["rationale"]:
            row["_why"].append(f"{SHORT[item.field]}: {rec['rationale']}")
        if rec["label"] is None:
            row["_missing"].append(f"{SHORT[item.field]}: {rec['problem']}")
    for row in rows.values():
        row["rationale"] = "; ".join(row.pop("_why"))
        row["missing"] = "; ".join(row.pop("_missing"))
    return list(rows.values())


class JudgeEndpointError(ValueError):
    """A judge run that labelled nothing because every request to the endpoint failed (its error is the message)."""


def run_judge(trajectories: Path, labels_csv: Path, config: JudgeConfig, task: str = "both",
              client: JudgeClient | None = None, allow_control_tokens: bool = False, retry_missing: bool = False,
              on_answer: Callable[[int, int, Item, Mapping[str, Any], bool], None] | None = None,
              max_items: int | None = None, log: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Label every item of ``task`` with the judge, resuming from the journal; returns counts per field.

    ``max_items`` (a pilot, or a test on a slow model): only that many items,
    those with the shortest prompts, shortest first; a later run without it
    asks the rest (the answers are cached). The CSV holds every item the journal
    answered for the current request, asked in this run or before, so a run
    with ``max_items`` never drops rows an earlier run wrote.
    ``on_answer(i, n, item, record, cached)`` is called after each item; ``log``
    gets the client's waits (Retry-After). Returns ``{n_items, n_asked,
    n_cached, fields: {field: {labelled, positive, missing}}, prompt_sha256,
    csv}`` (counts of this run's items). When requests were sent and every one
    failed (no reply: connection refused, timeouts, HTTP errors), raises
    :class:`JudgeEndpointError` with the endpoint's error, after the journal and
    CSV record the items as missing.
    """
    trajectories, labels_csv = Path(trajectories), Path(labels_csv)
    trajs = load_trajectories(trajectories, allow_control_tokens=allow_control_tokens)
    fields = task_fields(task)
    if max_items is not None and max_items < 1:
        raise ValueError(f"--max-items: must be >= 1, got {max_items}")
    queue = build_queue(trajs, task)
    by_id = {t.task_id: t for t in trajs}
    prompts = {item: item_prompt(by_id[item.task_id], item, config.max_chars) for item in queue}
    asked = (queue if max_items is None else
             sorted(queue, key=lambda it: len(prompts[it]))[:max_items])  # stable: ties keep queue order
    client = client or JudgeClient(config, log=log)
    system = system_prompt()
    rubric = sha256_text(system)
    keys = {item: sha256_text(json.dumps([config.model, _messages(system, prompts[item]), config.temperature,
                                          config.max_tokens])) for item in queue}
    folder = folder_for(labels_csv)
    columns = [*fields[1:], "annotator", "model", "prompt_sha256", "time", "rationale", "missing"]
    with writer_lock(folder, command="labels judge"):
        journal = folder / JOURNAL_NAME
        cached: dict[str, dict[str, Any]] = {}
        for event in read_journal(journal):
            if event["event"] == "answer":
                cached[event["request_sha256"]] = event
        append_line(journal, {"event": "start", "time": now(), "settings": {
            **config.settings(), "task": task, "trajectories": {"path": str(trajectories),
                                                                "sha256": file_sha256(trajectories)}}})
        known = {item: cached[keys[item]] for item in queue if keys[item] in cached}  # earlier runs' answers
        answers: dict[Item, dict[str, Any]] = {}
        n_asked = n_cached = 0
        failures: list[str] = []
        for i, item in enumerate(asked):
            rec = cached.get(keys[item])
            hit = rec is not None and (rec["label"] is not None or (rec.get("answered", False) and not retry_missing))
            if not hit:
                answer = client.ask(_messages(system, prompts[item]), SHORT[item.field])
                rec = {"event": "answer", "time": now(), "task_id": item.task_id, "after_step": item.after_step,
                       "field": item.field, "model": config.model, "served_model": answer.served_model,
                       "prompt_sha256": rubric, "request_sha256": keys[item], "label": answer.label,
                       "rationale": answer.rationale, "problem": answer.problem, "attempts": answer.attempts,
                       "answered": answer.answered}
                append_line(journal, rec)
                n_asked += 1
                if not answer.answered:
                    failures.append(answer.problem)
            else:
                n_cached += 1
            assert rec is not None
            answers[item] = known[item] = rec
            write_labels_csv(labels_csv, csv_rows(queue, known, config.model), fields[0], columns)
            if on_answer is not None:
                on_answer(i, len(asked), item, rec, hit)
    if n_asked and len(failures) == n_asked:
        raise JudgeEndpointError(f"--base-url {config.base_url}: every one of {n_asked} requests failed, nothing "
                                 f"labelled; the last: {failures[-1]} (recorded as missing; fix the endpoint and "
                                 "re-run: failed requests are asked again)")
    counts = {f: {"labelled": sum(1 for it, r in answers.items() if it.field == f and r["label"] is not None),
                  "positive": sum(1 for it, r in answers.items() if it.field == f and r["label"] == 1),
                  "missing": sum(1 for it, r in answers.items() if it.field == f and r["label"] is None)}
              for f in fields}
    return {"n_items": len(asked), "n_asked": n_asked, "n_cached": n_cached, "fields": counts,
            "prompt_sha256": rubric, "csv": str(labels_csv)}


def _messages(system: str, user: str) -> list[dict[str, str]]:
    """The chat messages of one item: the rubric as system message, the item as user message."""
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def missing_counts(labels_csv: Path) -> dict[str, int]:
    """``{field: items}`` a judge's CSV records as missing (its ``missing`` column); ``{}`` for a CSV without one."""
    names = {short: name for name, short in SHORT.items()}
    header, rows = read_label_table(labels_csv)
    out: dict[str, int] = {}
    if "missing" not in header:
        return {}
    for _, row in rows:
        for part in filter(None, row["missing"].split("; ")):
            field = names.get(part.split(":", 1)[0])
            if field:
                out[field] = out.get(field, 0) + 1
    return out
