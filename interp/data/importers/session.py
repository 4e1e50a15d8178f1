"""Session files: event-stream logs (Claude Code, Codex CLI, OpenHands) read whole, one run per file.

An agent CLI appends one JSON event per line to a session file (Claude Code's
``~/.claude/projects/PROJECT/SESSION.jsonl``, Codex CLI's
``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``), or saves its events as one
JSON list (an OpenHands trajectory). Such a file is ONE run: the registry
passes every record through :func:`whole_files`, which looks at the first
record of each JSON Lines file or JSON array and, when a session format claims
it (its ``claims_line``), gathers the file's records into one record
:func:`session_record` for that format; files no format claims stream on
record by record as before (a huge file of runs is never held whole). A problem inside
a session names its own line (:class:`LineProblem`), so it reports as
``FILE:LINE: field: message`` like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from interp.data.importers.common import RunProblem
from interp.data.importers.reader import Record

SESSION = "$session"  # the key of a gathered session record: the format that claimed the file
LINES = "lines"  # the session's entries: [[line number, parsed value], ...]

# a session format's test on the first record of a JSON Lines file (the record's value)
Claims = Callable[[Any], str | None]


class LineProblem(RunProblem):
    """A problem at one line of a session file: ``line`` replaces the run's first line in the report."""

    def __init__(self, line: int, where: str, message: str):
        self.line = line
        super().__init__(where, message)


@dataclass(frozen=True)
class Entry:
    """One line of a session file: its number and parsed value."""

    line: int
    value: Any


def session_record(fmt: str, entries: list[Entry]) -> dict[str, Any]:
    """The record a session format converts: ``{"$session": FORMAT, "lines": [[line, value], ...]}``."""
    return {SESSION: fmt, LINES: [[e.line, e.value] for e in entries]}


def entries_of(record: object, fmt: str) -> list[Entry] | None:
    """The entries of a session record gathered for ``fmt``; None for any other record."""
    if not isinstance(record, dict) or record.get(SESSION) != fmt:
        return None
    return [Entry(line, value) for line, value in record[LINES]]


def whole_files(records: Iterator[Record], claims: Claims | None) -> Iterator[Record]:
    """``records`` with each claimed JSON Lines file gathered into one session record (see the module docstring).

    A line that could not be parsed inside a claimed file is a problem of the
    whole session (one run), reported at that line.
    """
    pending: list[Record] = []  # the records of the claimed file being gathered
    fmt: str | None = None
    last_file = None
    for rec in records:
        if pending and rec.file != pending[0].file:
            yield _gathered(pending, fmt)
            pending, fmt = [], None
        if pending:
            pending.append(rec)
            continue
        first_line = rec.file != last_file and not rec.single and rec.problem is None  # a line or an array item
        last_file = rec.file
        fmt = claims(rec.value) if claims is not None and first_line else None
        if fmt is None:
            yield rec
        else:
            pending = [rec]
    if pending:
        yield _gathered(pending, fmt)


def _gathered(records: list[Record], fmt: str | None) -> Record:
    first = records[0]
    bad = next((r for r in records if r.problem is not None), None)
    if bad is not None and bad.problem is not None:
        where, message = bad.problem
        return Record(first.file, bad.line, problem=(where, f"{message} (in a {fmt} session: the whole session is "
                                                            "skipped)"))
    return Record(first.file, first.line, session_record(str(fmt), [Entry(r.line, r.value) for r in records]),
                  single=True)


def claimer(modules: list[Any]) -> Claims | None:
    """The ``claims`` test of the given session format modules (each with ``FORMAT`` and ``claims_line``)."""
    if not modules:
        return None

    def claims(value: object) -> str | None:
        return next((str(m.FORMAT) for m in modules if m.claims_line(value)), None)
    return claims
