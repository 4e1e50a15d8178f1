"""Reading runs from an input path, each with the file and line it starts on (for ``FILE:LINE`` errors).

* ``.parquet``/``.arrow`` (and a directory's): one run per row, streamed
  (:mod:`.dataset`: the known datasets' column mappings, ``--filter``,
  ``--sample``);
* a directory: every run file under it (recursively, sorted): ``*.traj`` and
  ``*.traj.json`` (SWE-agent, mini-swe-agent) and ATIF's ``trajectory.json``
  (Harbor's ``TRIAL/agent/trajectory.json``, or a producer's output folder
  such as OpenAgents' tbench), one run each, and Inspect AI ``*.eval`` logs;
  its other data files are not read and are listed (:func:`unread_files`);
* ``.eval`` (Inspect AI's binary log): one record naming the file, which the
  ``inspect`` importer reads with ``inspect_ai``'s own reader;
* ``.jsonl``/``.ndjson``: one run per line, streamed line by line (a huge file
  is never held whole); a file whose first line is a lone ``{`` holds indented
  JSON values one after another (OpenTelemetry's console exporter), read whole;
* ``.json``/``.traj``: one JSON value: an array of runs (each item with the line
  it starts on), or one run (an object, or an array of chat messages);
* another suffix: JSON Lines when its first non-blank line is a JSON value on
  its own, else one JSON value (or several, one after another).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interp.data.importers.dataset import (
    DATA_SUFFIXES, Selection, dataset_files, hf_metadata, is_dataset_file, rows,
)
from interp.data.jsonl import read_lines

EVAL_FILE = "$inspect_eval_file"  # the record of a .eval file (the inspect importer's marker)

LINE_SUFFIXES = (".jsonl", ".ndjson")
WHOLE_SUFFIXES = (".json", ".traj")
DIR_PATTERNS = ("*.traj", "*.traj.json", "trajectory.json", "*.eval")  # the run files read from a directory
EVAL_SUFFIX = ".eval"  # Inspect AI's binary log: read by its own reader (interp.data.importers.inspect_log)


@dataclass(frozen=True)
class Record:
    """One parsed input value, or why it could not be parsed (``problem``: field, message)."""

    file: Path
    line: int
    value: Any = None
    single: bool = False  # the file holds only this run
    problem: tuple[str, str] | None = None


def read_records(path: Path, selection: Selection = Selection()) -> Iterator[Record]:
    """Every record under ``path`` (a file, or a directory of run files and dataset files), in order;
    ``selection``: the rows of Parquet and Arrow files to read (:mod:`.dataset`)."""
    path = Path(path)
    if path.is_dir():
        files = sorted({f for pattern in DIR_PATTERNS for f in path.rglob(pattern) if f.is_file()}
                       | set(dataset_files(path)))
        if not files:
            raise FileNotFoundError(f"{path}: directory holds no run files ({', '.join(DIR_PATTERNS)}) and no "
                                    f"dataset files ({', '.join(DATA_SUFFIXES)})")
        for file in files:
            yield from read_records(file, selection)
    elif not path.is_file():
        raise FileNotFoundError(f"{path}: input not found")
    elif is_dataset_file(path):
        yield from _dataset(path, selection)
    elif path.suffix == EVAL_SUFFIX:
        yield Record(path, 1, {EVAL_FILE: str(path)}, single=True)
    elif path.suffix in LINE_SUFFIXES or (path.suffix not in WHOLE_SUFFIXES and _first_line_is_json(path)):
        yield from _sequence(path) if _opens_an_object(path) else _lines(path)
    else:
        yield from _whole(path)


def _dataset(path: Path, selection: Selection) -> Iterator[Record]:
    """The rows of a Parquet or Arrow file as records (row numbers as lines); an unreadable file is a problem."""
    import pyarrow as pa

    number = 0
    try:
        for number, record in rows(path, selection):
            yield Record(path, number, record)
    except (pa.ArrowException, OSError) as exc:
        yield Record(path, number + 1, problem=("(file)", f"unreadable {path.suffix[1:]} file: {exc}"))


def unread_files(path: Path) -> list[Path]:
    """The data files (``.json``, ``.jsonl``, ``.ndjson``) under a directory that :func:`read_records` does not
    read (no run-file name), outside Harbor trial folders (whose ``result.json``, ``config.json``, ... go with
    their ``agent/trajectory.json``); empty for a file. Listed in the import summary so nothing is skipped
    silently."""
    path = Path(path)
    if not path.is_dir():
        return []
    read = {f for pattern in DIR_PATTERNS for f in path.rglob(pattern) if f.is_file()} | hf_metadata(path)
    trials = {f.parent.parent for f in read if f.name == "trajectory.json" and f.parent.name == "agent"}
    return sorted(f for suffix in (".json", *LINE_SUFFIXES) for f in path.rglob(f"*{suffix}")
                  if f.is_file() and f not in read and not any(t in f.parents for t in trials))


def _first_line_is_json(path: Path) -> bool:
    with path.open("rb") as fh:
        for raw in fh:
            if raw.strip():
                try:
                    json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                    return False
                return True
    return True


def _opens_an_object(path: Path) -> bool:
    """Whether the first non-blank line is a lone ``{``: pretty-printed JSON values one after another."""
    with path.open("rb") as fh:
        return next((raw.strip() == b"{" for raw in fh if raw.strip()), False)


def _sequence(path: Path) -> Iterator[Record]:
    """Each of the JSON values written one after another in ``path`` (OpenTelemetry's console exporter prints
    each span as indented JSON), with the line it starts on; read whole."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        yield Record(path, 1, problem=("(file)", f"not UTF-8 (byte {exc.start + 1})"))
        return
    decoder, pos, line, counted = json.JSONDecoder(), 0, 1, 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        if pos >= len(text):
            return
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            yield Record(path, exc.lineno, problem=("(file)", f"invalid JSON: {exc.msg} at column {exc.colno}"))
            return
        yield Record(path, line, value)


def _lines(path: Path) -> Iterator[Record]:
    for entry in read_lines(path):
        if entry.problem:
            where, message = entry.problem.split(": ", 1)
            yield Record(path, entry.number, problem=(where, message))
        else:
            yield Record(path, entry.number, entry.value)


def _whole(path: Path) -> Iterator[Record]:
    try:
        text = path.read_text(encoding="utf-8")
        value = json.loads(text)
    except UnicodeDecodeError as exc:
        yield Record(path, 1, problem=("(file)", f"not UTF-8 (byte {exc.start + 1})"))
        return
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # several JSON values one after another (OpenTelemetry's console exporter)
            yield from _sequence(path)
            return
        yield Record(path, exc.lineno, problem=("(file)", f"invalid JSON: {exc.msg} at column {exc.colno}"))
        return
    except RecursionError:
        yield Record(path, 1, problem=("(file)", "JSON nested too deeply to read"))
        return
    if isinstance(value, list) and value and not (isinstance(value[0], dict) and "role" in value[0]):
        for line, item in _array_items(text):  # an array of runs (not one run's message list)
            yield Record(path, line, item)
    else:
        yield Record(path, 1, value, single=True)


def _array_items(text: str) -> Iterator[tuple[int, Any]]:
    """``(line, item)`` for each item of the (valid) JSON array ``text``."""
    decoder, pos, line, counted = json.JSONDecoder(), text.index("[") + 1, 1, 0
    while True:
        while text[pos] in " \t\r\n,":
            pos += 1
        if text[pos] == "]":
            return
        item, end = decoder.raw_decode(text, pos)
        line += text.count("\n", counted, pos)
        counted = pos
        yield line, item
        pos = end
