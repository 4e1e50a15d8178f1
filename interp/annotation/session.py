"""One annotator's labelling session: the queue of labels to give, the journal that keeps every one, the CSV.

Queue. One *item* per label: ``(task_id, after_step, field)``. ``--task g``
asks G (``externalization_gap``) at every boundary 1..n of each trajectory,
``--task y`` asks y (``future_necessity``) at 1..n-1 (the final boundary has no
later step: y is undefined there, as in :mod:`probes.targets`), ``--task both``
asks, per trajectory, all its G items first and then its y items: G is judged
on the history up to b only, so the annotator meets the later steps of a
trajectory (shown for y) only after every G label of it is given.

Adjudication. With two annotators' CSVs, the queue keeps the items both
labelled and labelled differently; the output CSV holds their agreed labels
(``annotator`` = ``A+B``, ``adjudicated`` = 0) and the adjudicator's decisions
(``adjudicated`` = 1). Boundaries only one of them labelled are left out.

Review. With another annotator's CSV to review (a model judge's, annotator
``judge:<model>``), the queue keeps the items it labelled, the page shows its
label and note (the rationale) beside the question, and the person confirms
(the same label) or corrects it. The output CSV holds the person's labels and,
per row, whose labels were reviewed and what they were (``reviewed``,
``reviewed_<field>``): confirmations and corrections are recorded as such. A
reviewed file measures how often a person accepts the judge's label, not
independent agreement (the person saw it); label without ``--review`` for that.

Journal. ``<labels>.annotate/journal.jsonl``: one JSON object per line,
appended, flushed and fsynced before the page hears that a label is kept; the
CSV is rewritten atomically from it after every event and when a session
starts, so killing the server at any moment loses nothing but a line being
written (a torn last line is dropped on restart). The folder's writer lock
(:func:`interp.io.writer_lock`) refuses a second server on the same output.

Binding. Every item event carries :func:`shown_sha256`: the hash of what the
page showed for that item (the trajectory's setup and steps 1..b for G, every
step for y). On a restart, the events of an item whose shown text changed since
are set aside, never re-attached: the item is unlabelled again and
:attr:`Session.flags` holds one line per such item naming task, boundary and
label (``interp annotate`` prints them; the page marks the item). An edit to
step 2 thus sets aside G at b >= 2 and every y of that trajectory, and keeps G
at b = 1. Events of a trajectory no longer in the file (or of a boundary it no
longer has) are set aside with one flag line per trajectory; the other labels
are kept. Journals of older versions (a whole-trajectory ``trajectory_sha256``
only) are compared by that. A restart resumes at the first item neither
labelled nor skipped (then the first unlabelled one).
Fields of a journal line (``JOURNAL_FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``event`` | ``[]`` | str | - | start (a server started), label, skip, undo (the latest label still set is removed) or note |
| ``time`` | ``[]`` | str | UTC | when it happened, ISO 8601 (``2026-12-01T21:40:05Z``) |
| ``task_id`` | ``[]`` | str | - | the item's trajectory (every event but start) |
| ``after_step`` | ``[]`` | int | steps | the item's boundary b (every event but start) |
| ``field`` | ``[]`` | str | - | externalization_gap or future_necessity (every event but start) |
| ``value`` | ``[]`` | int | - | label: 0 or 1 |
| ``suggestions`` | ``[]`` | bool | - | label: whether the rule labelers' evidence was shown when it was given |
| ``note`` | ``[]`` | str | - | note: the free-text note of the item (empty clears it) |
| ``trajectory_sha256`` | ``[]`` | str | - | every event but start: :func:`trajectory_sha256` of the item's trajectory when it happened |
| ``shown_sha256`` | ``[]`` | str | - | every event but start: :func:`shown_sha256` of what the item's page showed when it happened |
| ``session`` | ``{...}`` | object | - | start: annotator, task, mode (label, adjudicate or review), trajectories (path and sha256), compared (the two CSVs of adjudication), reviewed (the CSV of review) |

The labels CSV has one row per boundary with a label; it is the format
:func:`interp.data.labels.read_labels_csv` reads, so ``interp externalize risk
--labels`` and ``interp probe --labels`` take it. Its columns (``CSV_FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``task_id`` | ``[n_rows]`` | str | - | the trajectory |
| ``after_step`` | ``[n_rows]`` | int | steps | the boundary b |
| ``externalization_gap`` | ``[n_rows]`` | int or null | - | G (task g or both); empty = not labelled |
| ``future_necessity`` | ``[n_rows]`` | int or null | - | y (task y or both); empty = not labelled |
| ``annotator`` | ``[n_rows]`` | str | - | who gave the row's labels (``A+B`` for an agreement in adjudication) |
| ``time`` | ``[n_rows]`` | str | UTC | the latest label of the row, ISO 8601 (empty for an agreement) |
| ``suggestions`` | ``[n_rows]`` | int | - | 1 when the rule evidence was shown for some label of the row |
| ``note`` | ``[n_rows]`` | str | - | the notes of the row's items (``G: ...; y: ...`` with both); a skipped item's note has a row with empty labels |
| ``trajectory_sha256`` | ``[n_rows]`` | str | - | :func:`trajectory_sha256` of the trajectory the row's labels were given on |
| ``adjudicated`` | ``[n_rows]`` | int | - | adjudication only: 1 when the adjudicator decided a label of the row |
| ``reviewed`` | ``[n_rows]`` | str | - | review only: the annotator whose labels were reviewed (``judge:<model>``) |
| ``reviewed_<field>`` | ``[n_rows]`` | int or null | - | review only: that annotator's label of the field, as shown |
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interp.data.labels import Labels, labels_from_table, read_label_table, write_labels_csv
from interp.data.trajectory import Trajectory
from interp.schema import Field

JOURNAL_FIELDS = (
    Field("event", "[]", "str", "-",
          "start (a server started), label, skip, undo (the latest label still set is removed) or note"),
    Field("time", "[]", "str", "UTC", "when it happened, ISO 8601 (``2026-12-01T21:40:05Z``)"),
    Field("task_id", "[]", "str", "-", "the item's trajectory (every event but start)"),
    Field("after_step", "[]", "int", "steps", "the item's boundary b (every event but start)"),
    Field("field", "[]", "str", "-", "externalization_gap or future_necessity (every event but start)"),
    Field("value", "[]", "int", "-", "label: 0 or 1"),
    Field("suggestions", "[]", "bool", "-", "label: whether the rule labelers' evidence was shown when it was given"),
    Field("note", "[]", "str", "-", "note: the free-text note of the item (empty clears it)"),
    Field("trajectory_sha256", "[]", "str", "-",
          "every event but start: :func:`trajectory_sha256` of the item's trajectory when it happened"),
    Field("shown_sha256", "[]", "str", "-",
          "every event but start: :func:`shown_sha256` of what the item's page showed when it happened"),
    Field("session", "{...}", "object", "-",
          "start: annotator, task, mode (label, adjudicate or review), trajectories (path and sha256), compared "
          "(the two CSVs of adjudication), reviewed (the CSV of review)"),
)
CSV_FIELDS = (
    Field("task_id", "[n_rows]", "str", "-", "the trajectory"),
    Field("after_step", "[n_rows]", "int", "steps", "the boundary b"),
    Field("externalization_gap", "[n_rows]", "int or null", "-", "G (task g or both); empty = not labelled"),
    Field("future_necessity", "[n_rows]", "int or null", "-", "y (task y or both); empty = not labelled"),
    Field("annotator", "[n_rows]", "str", "-", "who gave the row's labels (``A+B`` for an agreement in adjudication)"),
    Field("time", "[n_rows]", "str", "UTC", "the latest label of the row, ISO 8601 (empty for an agreement)"),
    Field("suggestions", "[n_rows]", "int", "-", "1 when the rule evidence was shown for some label of the row"),
    Field("note", "[n_rows]", "str", "-", "the notes of the row's items (``G: ...; y: ...`` with both); a skipped "
          "item's note has a row with empty labels"),
    Field("trajectory_sha256", "[n_rows]", "str", "-",
          ":func:`trajectory_sha256` of the trajectory the row's labels were given on"),
    Field("adjudicated", "[n_rows]", "int", "-",
          "adjudication only: 1 when the adjudicator decided a label of the row"),
    Field("reviewed", "[n_rows]", "str", "-",
          "review only: the annotator whose labels were reviewed (``judge:<model>``)"),
    Field("reviewed_<field>", "[n_rows]", "int or null", "-",
          "review only: that annotator's label of the field, as shown"),
)
TASKS = {"g": ("externalization_gap",), "y": ("future_necessity",),
         "both": ("externalization_gap", "future_necessity")}
SHORT = {"externalization_gap": "G", "future_necessity": "y"}
EVENTS = ("start", "label", "skip", "undo", "note")
JOURNAL_NAME = "journal.jsonl"


@dataclass(frozen=True)
class Item:
    """One label to give: ``field`` at boundary ``after_step`` of trajectory ``task_id``."""

    task_id: str
    after_step: int
    field: str

    @property
    def boundary(self) -> tuple[str, int]:
        """The ``(task_id, after_step)`` key of :mod:`interp.data.labels`."""
        return self.task_id, self.after_step


def task_fields(task: str) -> tuple[str, ...]:
    """The label fields of ``--task`` g, y or both."""
    if task not in TASKS:
        raise ValueError(f"--task: unknown task {task!r}; use g, y or both")
    return TASKS[task]


def build_queue(trajectories: Iterable[Trajectory], task: str) -> list[Item]:
    """Every item of ``task`` in labelling order: per trajectory, its G items (b = 1..n), then its y items (1..n-1)."""
    fields = task_fields(task)
    queue = []
    for traj in trajectories:
        for name in fields:
            last = traj.n_steps if name == "externalization_gap" else traj.n_steps - 1
            queue += [Item(traj.task_id, b, name) for b in range(1, last + 1)]
    return queue


def folder_for(labels_csv: Path) -> Path:
    """The session folder of an output CSV (journal and writer lock): ``<labels>.annotate`` beside it."""
    labels_csv = Path(labels_csv)
    return labels_csv.parent / f"{labels_csv.name}.annotate"


def shown_sha256(traj: Trajectory, item: Item) -> str:
    """SHA-256 of what the page shows for one item: the trajectory's setup (domain, system prompt, tools, task) and
    steps 1..b for G, every step for y (the later steps are shown for y); canonical JSON. A label stays bound
    to it: an edit after b leaves the G labels at b valid."""
    steps = traj.steps if item.field == "future_necessity" else traj.steps[:item.after_step]
    seen = {"domain": traj.domain, "system_prompt": traj.system_prompt, "tools": [dict(t) for t in traj.tools],
            "task": traj.task, "field": item.field, "after_step": item.after_step,
            "steps": [s.to_json() for s in steps]}
    return hashlib.sha256(json.dumps(seen, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def trajectory_sha256(traj: Trajectory) -> str:
    """SHA-256 of what an annotator sees of a trajectory (domain, system prompt, tools, task, steps; canonical JSON)."""
    seen = {"domain": traj.domain, "system_prompt": traj.system_prompt, "tools": [dict(t) for t in traj.tools],
            "task": traj.task, "steps": [s.to_json() for s in traj.steps]}
    return hashlib.sha256(json.dumps(seen, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def now() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class AnnotatorLabels:
    """One annotator's CSV as read for agreement and adjudication: labels per field, name, notes, suggestion flags."""

    path: Path
    annotator: str
    labels: dict[str, Labels]
    notes: dict[tuple[str, int], str] = field(default_factory=dict)
    suggestions: dict[tuple[str, int], int] = field(default_factory=dict)
    confidence: dict[tuple[str, int], str] = field(default_factory=dict)


def read_annotator_csv(path: Path, fields: Sequence[str], trajectories: Iterable[Trajectory] | None = None
                       ) -> AnnotatorLabels:
    """An annotator's labels CSV (each of ``fields`` required; errors name FILE:LINE: field), with its annotator
    name (the ``annotator`` column, else the file stem), notes (a judge's: its ``rationale``), confidence (a
    ``confidence`` column, when there is one) and suggestion flags, every text as written."""
    trajs = list(trajectories) if trajectories is not None else None
    header, rows = read_label_table(path)
    labels = {name: labels_from_table(header, rows, path, name, trajs) for name in fields}
    names, notes, shown, confidence = set(), {}, {}, {}
    for _, row in rows:
        key = (row["task_id"], int(row["after_step"]))
        if row.get("annotator"):
            names.add(row["annotator"])
        if row.get("note") or row.get("rationale"):
            notes[key] = row.get("note") or row["rationale"]
        if row.get("confidence"):
            confidence[key] = row["confidence"]
        shown[key] = int(row.get("suggestions", "").strip() in ("1", "1.0", "True", "true"))
    return AnnotatorLabels(Path(path), "+".join(sorted(names)) or Path(path).stem, labels, notes, shown,
                           confidence)


def note_of(text: str, name: str) -> str:
    """The part of a row's note (or a judge's rationale) about label ``name``: rows with both labels write
    ``G: ...; y: ...``, so a G item never shows the reasons given for y (which saw the later steps)."""
    if text.startswith("G: ") and "; y: " in text:
        g, y = text[3:].split("; y: ", 1)
        return g if name == "externalization_gap" else y
    if text.startswith(("G: ", "y: ")):
        return text[3:] if text[0] == SHORT[name] else ""
    return text


def review_queue(queue: Sequence[Item], reviewed: AnnotatorLabels) -> list[Item]:
    """The items of ``queue`` the reviewed annotator labelled (its missing labels are not asked)."""
    return [item for item in queue if reviewed.labels[item.field].get(item.boundary) is not None]


def disagreement_queue(queue: Sequence[Item], first: AnnotatorLabels, second: AnnotatorLabels) -> list[Item]:
    """The items of ``queue`` both annotators labelled, differently (the adjudication walk)."""
    out = []
    for item in queue:
        a, b = first.labels[item.field].get(item.boundary), second.labels[item.field].get(item.boundary)
        if a is not None and b is not None and a != b:
            out.append(item)
    return out


class Journal:
    """The append-only journal of a session: every event is one line, flushed and fsynced before it counts."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def read(self) -> list[dict[str, Any]]:
        """Every event; a torn last line (a kill while writing) is cut off the file; other bad lines are errors."""
        if not self.path.exists():
            return []
        raw = self.path.read_bytes()
        keep = raw.rfind(b"\n") + 1
        if keep < len(raw):  # the last line has no end: it was being written when the process died
            with open(self.path, "r+b") as fh:
                fh.truncate(keep)
                fh.flush()
                os.fsync(fh.fileno())
        events = []
        for line, text in enumerate(raw[:keep].decode("utf-8", "replace").split("\n")[:-1], start=1):
            try:
                event = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{self.path}:{line}: not JSON ({exc.msg}); the journal was edited by hand?") \
                    from None
            if not isinstance(event, dict) or event.get("event") not in EVENTS:
                raise ValueError(f"{self.path}:{line}: event: expected one of {', '.join(EVENTS)}")
            event["_line"] = line
            events.append(event)
        return events

    def append(self, event: Mapping[str, Any]) -> None:
        """Append one event and force it to disk (flush + fsync) before returning."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = (json.dumps(dict(event), ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        with open(self.path, "ab") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())


class Session:
    """The labels of one output CSV: the queue, the state replayed from the journal, and the rules that change it.

    Every change is journaled first, then applied, then the CSV is rewritten; a
    restart replays the journal (setting aside the events of trajectories whose
    ``hashes`` changed) and resumes at the first item neither labelled nor skipped.
    """

    def __init__(self, queue: Sequence[Item], labels_csv: Path, annotator: str, task: str,
                 start: Mapping[str, Any], compared: tuple[AnnotatorLabels, AnnotatorLabels] | None = None,
                 full_queue: Sequence[Item] | None = None, hashes: Mapping[str, str] | None = None,
                 reviewed: AnnotatorLabels | None = None, shown: Mapping[Item, str] | None = None):
        self.queue = list(queue)
        self.hashes = dict(hashes or {})  # task_id -> trajectory_sha256 of the trajectory served now
        self.shown = dict(shown or {})  # item -> shown_sha256: what its page shows now
        self.index = {item: i for i, item in enumerate(self.queue)}
        self.labels_csv = Path(labels_csv)
        self.annotator, self.task, self.fields = annotator.strip(), task, task_fields(task)
        self.compared = compared
        self.full_queue = list(full_queue if full_queue is not None else queue)
        self.journal = Journal(folder_for(labels_csv) / JOURNAL_NAME)
        self.values: dict[Item, list[tuple[int, str, bool]]] = {}  # item -> stack of (value, time, suggestions)
        self.order: list[Item] = []  # label events still set, oldest first (undo pops the last)
        self.notes: dict[Item, str] = {}
        self.skipped: set[Item] = set()
        self.changed: dict[Item, int] = {}  # item -> journal line of its latest set-aside event (trajectory changed)
        self.unbound = 0  # replayed events without a trajectory hash (journals of older versions)
        self.removed: dict[str, list[int]] = {}  # task_id no longer served -> journal lines of its events
        self.position = 0
        self.reviewed = reviewed
        self.mode = "adjudicate" if compared else "review" if reviewed else "label"
        for event in self.journal.read():
            self._replay(event)
        self.position = self.resume_position()
        self.journal.append({"event": "start", "time": now(),
                             "session": {**start, "annotator": self.annotator, "task": task, "mode": self.mode}})
        self.write_csv()

    # ---- replay and changes -------------------------------------------------------------------------------
    def _item(self, event: Mapping[str, Any]) -> Item | None:
        """The item of a journal event; None (set aside in ``removed``) when its trajectory is no longer served or
        no longer has that boundary."""
        where = f"{self.journal.path}:{event.get('_line', '?')}"
        try:
            item = Item(str(event["task_id"]), int(event["after_step"]), str(event["field"]))
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{where}: task_id/after_step/field: missing or malformed") from None
        if self.hashes and (item.task_id not in self.hashes or
                            (self.shown and item not in self.shown and item.field in self.fields)):
            self.removed.setdefault(item.task_id, []).append(event["_line"])
            return None
        if item not in self.index:
            raise ValueError(f"{where}: {item.task_id}@{item.after_step} {item.field} is not an item of this "
                             f"session (other trajectories or --task?); use another --labels file")
        return item

    def _replay(self, event: dict[str, Any]) -> None:
        kind, where = event["event"], f"{self.journal.path}:{event['_line']}"
        if kind == "start":
            prior = event.get("session") or {}
            for key, mine in (("annotator", self.annotator), ("task", self.task), ("mode", self.mode)):
                if prior.get(key) != mine:
                    raise ValueError(f"{where}: session.{key}: this output was started with {key} "
                                     f"{prior.get(key)!r}, not {mine!r}; use another --labels file")
            return
        item = self._item(event)
        if item is None:
            return
        if self._changed(event, item):
            self.changed[item] = event["_line"]  # labelled on other text: set aside, never re-attached
            return
        if kind == "label":
            if event.get("value") not in (0, 1):
                raise ValueError(f"{where}: value: {event.get('value')!r} is not 0 or 1")
            self._set(item, int(event["value"]), str(event.get("time", "")), bool(event.get("suggestions")))
        elif kind == "skip":
            self.skipped.add(item)
            self.position = self._after(item)
        elif kind == "undo":
            if not self.order or self.order[-1] != item:
                raise ValueError(f"{where}: undo of {item.task_id}@{item.after_step} {item.field}, which is not "
                                 "the latest label")
            self._pop()
        else:
            self.notes[item] = str(event.get("note", ""))

    def _changed(self, event: Mapping[str, Any], item: Item) -> bool:
        """Whether what ``item``'s page shows changed since ``event``: its ``shown_sha256`` (the history up to b for
        G, the whole trajectory for y), else (older journals) the whole trajectory's hash; unstamped events count
        in ``unbound``."""
        if "shown_sha256" in event and item in self.shown:
            return bool(event["shown_sha256"] != self.shown[item])
        stamped = event.get("trajectory_sha256")
        if stamped is None:
            self.unbound += 1
            return False
        return item.task_id in self.hashes and stamped != self.hashes[item.task_id]

    def _after(self, item: Item) -> int:
        return min(self.index[item] + 1, len(self.queue) - 1)

    def _set(self, item: Item, value: int, when: str, suggestions: bool) -> None:
        self.values.setdefault(item, []).append((value, when, suggestions))
        self.changed.pop(item, None)
        self.order.append(item)
        self.position = self._after(item)

    def _pop(self) -> Item:
        item = self.order.pop()
        self.values[item].pop()
        if not self.values[item]:
            del self.values[item]
        self.position = self.index[item]
        return item

    def item_at(self, index: int) -> Item:
        """The item at queue position ``index``; ValueError outside the queue."""
        if not 0 <= index < len(self.queue):
            raise ValueError(f"index {index} outside 0..{len(self.queue) - 1}")
        return self.queue[index]

    def _event(self, kind: str, item: Item, **extra: Any) -> dict[str, Any]:
        stamp = {"trajectory_sha256": self.hashes[item.task_id]} if item.task_id in self.hashes else {}
        if item in self.shown:
            stamp["shown_sha256"] = self.shown[item]
        return {"event": kind, "time": now(), "task_id": item.task_id, "after_step": item.after_step,
                "field": item.field, **extra, **stamp}

    def resume_position(self) -> int:
        """Where a restart opens: the first item neither labelled nor skipped, else the first unlabelled, else 0."""
        open_items = [i for i, item in enumerate(self.queue) if item not in self.values]
        return next((i for i in open_items if self.queue[i] not in self.skipped), open_items[0] if open_items else 0)

    @property
    def flags(self) -> list[str]:
        """One line per item whose earlier labels were set aside because its trajectory changed since."""
        where = self.journal.path
        return [f"{item.task_id}@{item.after_step} {SHORT[item.field]}: what this item shows of trajectory "
                f"{item.task_id!r} changed since it was labelled ({where}:{line}); its earlier label and note are "
                "set aside, label it again" for item, line in self.changed.items()] + \
               [f"{task_id!r}: {len(lines)} journal event(s) of boundaries no longer in the trajectory file "
                f"({where}:{', '.join(map(str, lines[:5]))}{', ...' if len(lines) > 5 else ''}); set aside, the rest "
                "of the labels are kept" for task_id, lines in self.removed.items()]

    def marks(self) -> str:
        """One character per queue item: its label ``0``/``1``, ``s`` skipped, ``c`` changed, ``.`` open."""
        return "".join(str(self.value(item)) if item in self.values else "c" if item in self.changed
                       else "s" if item in self.skipped else "." for item in self.queue)

    def label(self, index: int, value: int, suggestions: bool) -> None:
        """Give ``value`` (the int 0 or 1, not 1.0 or True) to the item at ``index``: journaled (fsync), applied,
        CSV rewritten."""
        if type(value) is not int or value not in (0, 1):
            raise ValueError(f"value: {value!r} is not 0 or 1")
        item = self.item_at(index)
        event = self._event("label", item, value=value, suggestions=bool(suggestions))
        self.journal.append(event)
        self._set(item, value, event["time"], bool(suggestions))
        self.write_csv()

    def skip(self, index: int) -> None:
        """Move past the item at ``index`` without a label (journaled, so a restart resumes after it)."""
        item = self.item_at(index)
        self.journal.append(self._event("skip", item))
        self.skipped.add(item)
        self.position = self._after(item)

    def undo(self) -> int | None:
        """Remove the latest label still set; the queue index of its item (None when there is none)."""
        if not self.order:
            return None
        self.journal.append(self._event("undo", self.order[-1]))
        item = self._pop()
        self.write_csv()
        return self.index[item]

    def note(self, index: int, text: str) -> None:
        """Set (empty: clear) the free-text note of the item at ``index``."""
        item = self.item_at(index)
        self.journal.append(self._event("note", item, note=text))
        self.notes[item] = text
        self.write_csv()

    # ---- reading ------------------------------------------------------------------------------------------
    def value(self, item: Item) -> int | None:
        """The label of ``item`` now (None when unlabelled)."""
        stack = self.values.get(item)
        return stack[-1][0] if stack else None

    def labelled(self) -> int:
        """How many items of the queue have a label."""
        return len(self.values)

    def others(self, item: Item) -> list[dict[str, Any]]:
        """The compared annotators' labels and notes of ``item`` (adjudication; review: the reviewed one's), else
        ``[]``."""
        shown = [*(self.compared or ()), *((self.reviewed,) if self.reviewed else ())]
        return [{"annotator": c.annotator, "value": c.labels[item.field].get(item.boundary),
                 "note": note_of(c.notes.get(item.boundary, ""), item.field),
                 "confidence": c.confidence.get(item.boundary, "")} for c in shown]

    def csv_rows(self) -> list[dict[str, Any]]:
        """The CSV rows (``CSV_FIELDS``): one per boundary with a label, in queue order."""
        rows: dict[tuple[str, int], dict[str, Any]] = {}
        for item in self.full_queue:
            value, when, shown, who, decided = self._row_value(item)
            if value is None and not self.notes.get(item):
                continue
            row = rows.setdefault(item.boundary, {"task_id": item.task_id, "after_step": item.after_step,
                                                  "annotator": who or self.annotator, "time": "", "suggestions": 0,
                                                  "notes": [], "adjudicated": 0,
                                                  "trajectory_sha256": self.hashes.get(item.task_id, "")})
            if value is not None:
                row[item.field] = value
            if self.reviewed:
                row["reviewed"] = self.reviewed.annotator
                row[f"reviewed_{item.field}"] = self.reviewed.labels[item.field].get(item.boundary)
            row["time"] = max(row["time"], when)
            row["suggestions"] = max(row["suggestions"], int(shown))
            if decided:
                row["annotator"], row["adjudicated"] = who, 1
            if self.notes.get(item):
                row["notes"].append((item.field, self.notes[item]))
        for row in rows.values():
            notes = row.pop("notes")
            row["note"] = notes[0][1] if len(self.fields) == 1 and notes else \
                "; ".join(f"{SHORT[f]}: {n}" for f, n in notes)
            if not self.compared:
                del row["adjudicated"]
        return list(rows.values())

    def _row_value(self, item: Item) -> tuple[int | None, str, bool, str, bool]:
        """``(value, time, suggestions, annotator, adjudicated)`` of one item for the CSV."""
        stack = self.values.get(item)
        if stack:
            value, when, shown = stack[-1]
            return value, when, shown, self.annotator, self.compared is not None
        if self.compared:
            first, second = self.compared
            a, b = (c.labels[item.field].get(item.boundary) for c in self.compared)
            if a is not None and a == b:
                shown = bool(first.suggestions.get(item.boundary) or second.suggestions.get(item.boundary))
                return a, "", shown, f"{first.annotator}+{second.annotator}", False
        return None, "", False, "", False

    def write_csv(self) -> Path:
        """Rewrite the labels CSV atomically from the state (``CSV_FIELDS``)."""
        extra = [*self.fields[1:], "annotator", "time", "suggestions", "note", "trajectory_sha256"]
        extra += ["adjudicated"] if self.compared else []
        extra += ["reviewed", *(f"reviewed_{f}" for f in self.fields)] if self.reviewed else []
        return write_labels_csv(self.labels_csv, self.csv_rows(), self.fields[0], extra)
