"""Trajectory datasets as they ship: Parquet and Arrow files, and local Hugging Face ``datasets`` folders.

The largest public sets of agent runs are tables, one run per row. This
module reads them offline (no hub call; a dataset is a local file or folder)
and streams them: rows are read a batch at a time from each Parquet row group
or Arrow record batch (:data:`BATCH_ROWS` rows), so memory is bounded by one
row group, never the file. Each row becomes the record of a format the
importers already read (its :class:`Schema`), with the row number as its
``LINE`` in problems (``FILE:ROW: field: message``, rows counted from 1 in
each file).

Inputs:

* a ``.parquet`` file (a hub snapshot's ``data/train-00000-of-00012.parquet``);
* an ``.arrow`` file (Arrow IPC, stream or file format: what ``datasets``
  writes);
* a folder: its ``.parquet`` and ``.arrow`` files (sorted); a ``save_to_disk``
  folder (``state.json`` names its data files) reads those files only, and the
  ``cache-*.arrow`` files of a ``datasets`` cache (results of ``map``) are
  never rows of the dataset.

The column mapping of each known dataset is detected from the file's columns
(or named: ``--dataset-schema``):

=====================  ======================================================  ==========  =========================
schema                 columns (published schema)                              format      mapping
=====================  ======================================================  ==========  =========================
``open-swe-traces``    nvidia/Open-SWE-Traces: ``instance_id, repo, license,   openai      ``messages`` (or
                       language, trajectory_id, messages, tools (JSON                      ``trajectory``) the chat,
                       strings), resolved (-1/0/1), metadata,                              ``tools`` parsed,
                       hf_dataset_name``                                                   id ``trajectory_id``
``nebius-openhands``   nebius/SWE-rebench-openhands-trajectories (and          openai      ``trajectory`` the chat,
                       nvidia/SWE-Zero-openhands-trajectories):                            ``tools``, id
                       ``trajectory_id, instance_id, repo, trajectory,                     ``trajectory_id``,
                       tools, model_patch, exit_status, resolved, ...``                    ``resolved`` the reward
``nebius-swe-agent``   nebius/SWE-agent-trajectories: ``instance_id,           openai      ``trajectory``
                       model_name, target, trajectory ({role: system | user               (:func:`swe_agent_chat`),
                       | ai, text, system_prompt, mask, cutoff_date}),                     ``target`` the reward
                       exit_status, generated_patch, eval_logs``
``records``            any other table: each row is a run record as a JSON     (sniffed)   the format's own (OpenAI
                       file would hold it (``messages``; an OpenHands                      ``messages``, OpenHands
                       ``history``; a SWE-agent ``trajectory``)                            ``history``, ...)
=====================  ======================================================  ==========  =========================

In the three named schemas a row's reward is kept when the dataset says
resolved (1) or not (0), never for ``-1`` (unknown); the row's other columns go
to ``metadata.dataset_row`` (passed through). ``--filter COLUMN=VALUE``
(repeatable: all must hold; values compared as text) and ``--sample N
--seed S`` take a reproducible subset: a first pass reads only the filter
columns, the N rows are drawn from the matching ones with NumPy's generator
seeded ``S``, and the second pass reads those rows, in input order.
"""

from __future__ import annotations

import datetime
import decimal
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA_SUFFIXES = (".parquet", ".arrow")
BATCH_ROWS = 64  # rows per batch read: the unit of memory besides one row group
READ_BUFFER = 1 << 20  # bytes: Parquet column chunks are read through a buffer this size, never pre-buffered whole
HF_META = frozenset({"state.json", "dataset_info.json", "dataset_dict.json"})  # a datasets folder's own files
FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)  # a fenced block: SWE-agent 0.x writes its action in the last


@dataclass(frozen=True)
class Selection:
    """Which rows to read: the column mapping (None: detect), ``--filter`` pairs and ``--sample N --seed S``."""

    schema: str | None = None
    filters: tuple[tuple[str, str], ...] = ()
    sample: int | None = None
    seed: int = 0


@dataclass(frozen=True)
class Schema:
    """A dataset's column mapping: the columns that identify it, and a row -> run record function."""

    name: str
    columns: frozenset[str]  # all present: this schema (detection)
    record: Callable[[dict[str, Any]], dict[str, Any]]
    any_of: frozenset[str] = field(default_factory=frozenset)  # at least one of these present too (when given)

    def matches(self, names: set[str]) -> bool:
        """Whether a file with these columns has this schema."""
        return self.columns <= names and (not self.any_of or bool(self.any_of & names))


def parse_filter(text: str) -> tuple[str, str]:
    """``COLUMN=VALUE`` as a pair; a ``ValueError`` naming the option otherwise."""
    column, sep, value = text.partition("=")
    if not sep or not column.strip():
        raise ValueError(f"--filter {text!r}: expected COLUMN=VALUE (a top-level column of the dataset)")
    return column.strip(), value


def is_dataset_file(path: Path) -> bool:
    """Whether ``path`` is a Parquet or Arrow file (read by this module, not as JSON)."""
    return path.suffix in DATA_SUFFIXES


def dataset_files(folder: Path) -> list[Path]:
    """The data files of a folder: those ``state.json`` names in a ``save_to_disk`` folder, else every
    ``.parquet``/``.arrow`` file under it except ``cache-*.arrow`` (a ``datasets`` cache's ``map`` results)."""
    found: list[Path] = []
    saved = {f.parent for f in folder.rglob("state.json") if f.is_file()}
    for state in sorted(saved):
        doc = json.loads((state / "state.json").read_text(encoding="utf-8"))
        names = [d.get("filename") for d in doc.get("_data_files", []) if isinstance(d, dict)]
        found += [state / n for n in names if isinstance(n, str)]
    found += [f for suffix in DATA_SUFFIXES for f in folder.rglob(f"*{suffix}")
              if f.is_file() and f.parent not in saved and not f.name.startswith("cache-")]
    return sorted(set(found))


def hf_metadata(folder: Path) -> set[Path]:
    """A ``datasets`` folder's own JSON files (state, info, split dict): part of the dataset, not unread runs."""
    return {f for name in HF_META for f in folder.rglob(name)
            if f.is_file() and any(g.suffix in DATA_SUFFIXES for g in f.parent.rglob("*"))}


def columns_of(path: Path) -> list[str]:
    """The top-level column names of a Parquet or Arrow file (read from its schema, no rows)."""
    import pyarrow.parquet as pq

    if path.suffix == ".parquet":
        return list(pq.ParquetFile(path).schema_arrow.names)
    with _arrow_reader(path) as batches:
        return list(batches.schema.names)


def detect(names: list[str], wanted: str | None, path: Path) -> Schema:
    """The schema of a file with columns ``names``: the one named (checked), else the first that matches."""
    have = set(names)
    if wanted is not None:
        schema = SCHEMAS.get(wanted)
        if schema is None:
            raise ValueError(f"--dataset-schema {wanted!r}: expected one of {', '.join(SCHEMAS)}")
        if not schema.matches(have):
            missing = sorted(schema.columns - have) or sorted(schema.any_of)
            raise ValueError(f"{path}: --dataset-schema {wanted}: the file lacks column(s) {', '.join(missing)} "
                             f"(it has {', '.join(names)})")
        return schema
    return next(s for s in SCHEMAS.values() if s.matches(have))


def rows(path: Path, selection: Selection) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(row number from 1, run record)`` of each selected row of one Parquet or Arrow file, streamed."""
    schema = detect(columns_of(path), selection.schema, path)
    chosen = _chosen(path, selection)
    for number, row in _stream(path, None):
        if chosen is None or number in chosen:
            yield number, schema.record(_plain(row))


def _chosen(path: Path, selection: Selection) -> set[int] | None:
    """The row numbers ``--filter`` and ``--sample`` keep (None: every row), from a pass over the filter columns
    only."""
    if not selection.filters and selection.sample is None:
        return None
    import numpy as np

    names = set(columns_of(path))
    unknown = sorted({c for c, _ in selection.filters} - names)
    if unknown:
        raise ValueError(f"{path}: --filter: no column {', '.join(unknown)} (it has {', '.join(sorted(names))})")
    wanted = sorted({c for c, _ in selection.filters}) or None
    keep = [n for n, row in _stream(path, wanted)
            if all(_as_text(row.get(c)) == v for c, v in selection.filters)]
    if selection.sample is not None and selection.sample < len(keep):
        picked = np.random.default_rng(selection.seed).choice(len(keep), size=selection.sample, replace=False)
        keep = [keep[i] for i in sorted(picked)]
    return set(keep)


def _as_text(value: object) -> str:
    """A cell as ``--filter`` compares it: text as is, booleans ``true``/``false``, numbers and others as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(_plain(value), ensure_ascii=False)


def _stream(path: Path, columns: list[str] | None) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(row number, row)`` of a file, a batch of :data:`BATCH_ROWS` rows at a time (``columns``: only those)."""
    import pyarrow.parquet as pq

    number = 0
    if path.suffix == ".parquet":
        parquet = pq.ParquetFile(path, pre_buffer=False, buffer_size=READ_BUFFER)  # pre-buffering holds the file
        batches: Iterator[Any] = parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns)
        for batch in batches:
            for row in batch.to_pylist():
                number += 1
                yield number, row
        return
    with _arrow_reader(path) as reader:
        for batch in reader:
            for start in range(0, batch.num_rows, BATCH_ROWS):
                part = batch.slice(start, BATCH_ROWS)
                for row in (part.select(columns) if columns else part).to_pylist():
                    number += 1
                    yield number, row


@contextmanager
def _arrow_reader(path: Path) -> Iterator[Any]:  # Any: pyarrow's stream reader, or a file's batches
    """The record batches of an Arrow IPC file (stream or file format), memory-mapped, with their schema."""
    import pyarrow as pa

    with pa.memory_map(str(path)) as source:
        reader: Any  # the stream reader, or the file's batches
        try:
            reader = pa.ipc.open_stream(source)
        except pa.ArrowInvalid:  # not a stream: the IPC file format
            source.seek(0)
            reader = _FileBatches(pa.ipc.open_file(source))
        yield reader


class _FileBatches:
    """An Arrow IPC file reader as an iterator over its batches, with its schema."""

    def __init__(self, reader: Any):  # Any: pyarrow.ipc.RecordBatchFileReader
        self.reader, self.schema = reader, reader.schema

    def __iter__(self) -> Iterator[Any]:
        return (self.reader.get_batch(i) for i in range(self.reader.num_record_batches))


def _plain(value: Any) -> Any:  # Any: a cell of any Arrow type, as JSON
    """A row's value as plain JSON: dates and times as ISO text, decimals as numbers, binary as UTF-8 text."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


# ---- the known datasets' column mappings


def _reward(value: object) -> dict[str, Any]:
    """``{reward}`` when a dataset says resolved (1, true) or not (0, false); nothing for -1 or null (unknown)."""
    if isinstance(value, bool):
        return {"reward": float(value)}
    if isinstance(value, (int, float)) and value in (0, 1):
        return {"reward": float(value)}
    return {}


def _tools(raw: object) -> object:
    """A tools column: OpenAI tool objects, or (nvidia/Open-SWE-Traces) the same as JSON strings, parsed."""
    if isinstance(raw, list):
        return [json.loads(t) if isinstance(t, str) else t for t in raw]
    return raw


def _chat(row: dict[str, Any], messages: str, task_id: str, reward: str) -> dict[str, Any]:
    """An OpenAI-style run record from a row: the chat column, the tools, the id column, the reward column; the
    other columns under ``dataset_row`` (kept in the trajectory's ``metadata``)."""
    used = {messages, "tools", task_id, reward}
    return {"task_id": row[task_id], "messages": row[messages], "tools": _tools(row.get("tools")),
            **_reward(row.get(reward)), "dataset_row": {k: v for k, v in row.items() if k not in used}}


def _open_swe_traces(row: dict[str, Any]) -> dict[str, Any]:
    return _chat(row, "messages" if "messages" in row else "trajectory", "trajectory_id", "resolved")


def _nebius_openhands(row: dict[str, Any]) -> dict[str, Any]:
    return _chat(row, "trajectory", "trajectory_id", "resolved")


def swe_agent_chat(trajectory: list[Any]) -> list[dict[str, Any]]:
    """nebius/SWE-agent-trajectories' turns as OpenAI messages: ``system`` the system prompt, ``user`` the task
    then each observation, ``ai`` a turn whose last fenced block is its action (SWE-agent 0.x's thought-action
    parse: a ``bash`` call of the block's text, the text around the block, verbatim, its thought) answered by the
    next ``user`` turn, or with
    no block a text action. The turns' ``mask``, ``cutoff_date`` and ``system_prompt`` are kept apart
    (:func:`_turn_fields`)."""
    out: list[dict[str, Any]] = []
    pending: str | None = None  # the call id the next user turn answers
    for k, turn in enumerate(trajectory):
        if not isinstance(turn, dict):
            out.append(turn)
            continue
        role, text = turn.get("role"), turn.get("text")
        if role == "ai":
            blocks = list(FENCE.finditer(text)) if isinstance(text, str) else []
            if isinstance(text, str) and blocks:
                last = blocks[-1]
                pending = f"call_{k}"
                out.append({"role": "assistant", "content": text[:last.start()] + text[last.end():],
                            "tool_calls": [{"id": pending, "type": "function", "function": {
                                "name": "bash", "arguments": {"command": last.group(1)}}}]})
            else:
                out.append({"role": "assistant", "content": text})
        elif role == "user" and pending is not None:
            out.append({"role": "tool", "tool_call_id": pending, "content": text})
            pending = None
        else:
            out.append({"role": role, "content": text})
    return out


def _turn_fields(trajectory: list[Any]) -> dict[str, list[Any]]:
    """The per-turn fields of nebius/SWE-agent-trajectories beside role and text (``mask``: the turn trained
    on; ``cutoff_date``; ``system_prompt``), one list per field with a value per turn, when any is set."""
    turns = [t for t in trajectory if isinstance(t, dict)]
    return {key: [t.get(key) for t in turns] for key in ("mask", "cutoff_date", "system_prompt")
            if any(t.get(key) is not None for t in turns)}


def _nebius_swe_agent(row: dict[str, Any]) -> dict[str, Any]:
    used = {"instance_id", "trajectory", "target"}
    trajectory = row["trajectory"] or []
    return {"instance_id": row["instance_id"], "messages": swe_agent_chat(trajectory), **_reward(row.get("target")),
            "dataset_row": {**{k: v for k, v in row.items() if k not in used},
                            "trajectory_fields": _turn_fields(trajectory)}}


def _records(row: dict[str, Any]) -> dict[str, Any]:
    return row


SCHEMAS = {s.name: s for s in (
    Schema("open-swe-traces", frozenset({"instance_id", "trajectory_id", "tools", "resolved", "language",
                                         "metadata"}), _open_swe_traces, frozenset({"messages", "trajectory"})),
    Schema("nebius-openhands", frozenset({"trajectory_id", "instance_id", "trajectory", "model_patch"}),
           _nebius_openhands),
    Schema("nebius-swe-agent", frozenset({"instance_id", "model_name", "target", "trajectory", "generated_patch"}),
           _nebius_swe_agent),
    Schema("records", frozenset(), _records),
)}
