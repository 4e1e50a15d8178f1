"""The importer registry and ``interp import``: runs in a framework's format -> a validated trajectory file.

:func:`import_runs` streams the input (:mod:`interp.data.importers.reader`),
converts each run with the format's importer, and checks every converted
trajectory with the validator of ``interp validate``
(:func:`interp.data.trajectory.iter_records`, duplicate task ids included).
The data files of an input directory that are no run files are listed in
the report (``not_read``), never skipped silently: a directory is a corpus,
so under ``strict`` each is a problem. Under a named format, a record another
format claims is refused naming that format first (a JSON Lines session file
of another format is one such problem, not one per line). Beside a written
output, the per-run table ``OUT.runs.csv`` (:data:`TABLE_COLUMNS`) lists each
run imported or refused (with its reason and its record's drops by path) and
each file not read. A run with a problem is
reported as ``FILE:LINE: field.path: message`` (the
input's file and line, the field of the input record, or of the converted
trajectory for a validator problem) and skipped; with ``strict`` any problem
means nothing is written. The output is written atomically (a reader never
sees half a file), one trajectory per line, text verbatim (UTF-8, non-ASCII as is).

==============  ======================================  =============================
format          input                                   importer
==============  ======================================  =============================
``openai``      chat messages with ``tool_calls``       :mod:`.openai`
``anthropic``   messages with content blocks            :mod:`.anthropic`
``swe-agent``   ``.traj`` files (``trajectory`` list)   :mod:`.swe_agent`
``tau2``        tau2-bench result files (simulations)   :mod:`.tau2`
``atif``        ATIF v1.x (Harbor, terminal-bench)      :mod:`.atif`
``inspect``     Inspect AI logs (``.eval``, ``.json``)  :mod:`.inspect_log`
``claude-code``  Claude Code session files (``.jsonl``)  :mod:`.claude_code`
``codex``       Codex CLI rollouts (``rollout-*.jsonl``)  :mod:`.codex`
``openhands``   OpenHands saved event streams (``.json``),  :mod:`.openhands`
                evaluation ``output.jsonl`` rows
``gemini``      Gemini CLI chat recordings (``.json``),  :mod:`.gemini`
                API histories (``contents``)
``otel``        OpenTelemetry GenAI / OpenInference     :mod:`.otel`
                spans (OTLP JSON, span JSON Lines)
``map``         anything, via ``--map`` or ``--hook``   :mod:`.mapping`
``auto``        sniffed per run: claude-code, codex, openhands, gemini, otel, swe-agent, atif, tau2, inspect, anthropic, openai
                (in that order)
==============  ======================================  =============================

A session format (claude-code, codex, openhands, otel) claims a JSON Lines file or
a JSON array by its first record and reads the file whole, as one run
(:mod:`.session`). Parquet and Arrow files (and ``datasets`` folders) are read
one run per row (:mod:`.dataset`), each row mapped to a record of a format above.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from interp.data.importers import (
    anthropic, atif, claude_code, codex, gemini, inspect_log, mapping, openai, openhands, otel, session, swe_agent,
    tau2,
)
from interp.data.importers.common import RunContext, RunProblem
from interp.data.importers.dataset import SCHEMAS, Selection
from interp.data.importers.reader import Record, read_records, unread_files
from interp.io import atomic_path, atomic_write_bytes

IMPORTERS = {m.FORMAT: m for m in (openai, anthropic, swe_agent, tau2, atif, inspect_log, claude_code, codex,
                                   openhands, gemini, otel)}
SNIFF_ORDER = (claude_code, codex, openhands, gemini, otel, swe_agent, atif, tau2, inspect_log, anthropic, openai)
SESSION_FORMATS = (claude_code, codex, openhands, otel)  # read whole: one run per file (interp.data.importers.session)
FORMATS = (*IMPORTERS, mapping.FORMAT, "auto")
NOT_READ_SHOWN = 5  # unread files named in the summary (the report holds all)
NOT_READ = "not read: no run-file name (name the file to import it)"  # a directory's file no pattern reads


@dataclass
class ImportReport:
    """What :func:`import_runs` did: runs converted and skipped, why, and what the formats could not keep."""

    input: Path
    out: Path
    converted: int = 0
    skipped: int = 0
    written: bool = False
    problems: list[str] = field(default_factory=list)  # FILE:LINE: field: message, in input order
    warnings: list[str] = field(default_factory=list)  # validator warnings of converted runs (undeclared tools)
    reasons: Counter = field(default_factory=Counter)  # why runs were skipped: problem kind -> runs
    formats: Counter = field(default_factory=Counter)  # converted runs per format (auto tells them apart)
    dropped: Counter = field(default_factory=Counter)  # what the importers left out, summed over runs
    not_read: list[Path] = field(default_factory=list)  # data files of an input directory with no run-file name
    rows: list[RunRow] = field(default_factory=list)  # one per run imported or refused, and per file not read
    table: Path | None = None  # where the per-run table went (beside the output, when it is written)

    def summary(self) -> str:
        """A few lines: converted, skipped and why, formats, dropped, where the output went."""
        where = f"-> {self.out}" if self.written else "(nothing written)"
        lines = [f"{self.input}: {self.converted} runs converted, {self.skipped} skipped {where}"]
        if self.reasons:
            lines.append("skipped: " + "; ".join(f"{r} ({n})" for r, n in self.reasons.most_common()))
        if self.formats:
            lines.append("formats: " + ", ".join(f"{f} {n}" for f, n in sorted(self.formats.items())))
        if self.dropped:
            lines.append("dropped: " + ", ".join(f"{d} x{n}" for d, n in sorted(self.dropped.items())))
        if self.not_read:
            shown = ", ".join(str(f) for f in self.not_read[:NOT_READ_SHOWN])
            more = f" and {len(self.not_read) - NOT_READ_SHOWN} more" if len(self.not_read) > NOT_READ_SHOWN else ""
            lines.append(f"not read (no run file name): {len(self.not_read)} file(s): {shown}{more} "
                         "(name a file to import it)")
        if self.table is not None:
            lines.append(f"per-run table: {self.table}")
        return "\n".join(lines)


@dataclass(frozen=True)
class RunRow:
    """One row of the per-run table (:data:`TABLE_COLUMNS`)."""

    file: str
    line: int
    format: str
    task_id: str
    status: str  # imported | refused | not read
    reason: str = ""  # the problem that refused the run ("where: message"), or why a file was not read
    drops: str = ""  # what the importer left out of the record the run came from: JSON {path: count}, sorted


# The per-run table ``OUT.runs.csv`` written beside the output (CSV, UTF-8, every field quoted, "\n" line ends,
# one header line),
# one row per run in input order, then the files of an input directory that were not read:
TABLE_COLUMNS = (
    "file",     # the input file the run is in
    "line",     # the line its record starts on
    "format",   # the format that read it (empty for a file not read, or a record no format claimed)
    "task_id",  # the converted run's task id (empty when refused before one was made)
    "status",   # imported | refused | not read
    "reason",   # for a refused run: "field.path: message", as the problem lines print it
    "drops",    # JSON object {dropped path: count} of the run's record (shared by the runs of one record)
)
TABLE_SUFFIX = ".runs.csv"


def write_table(rows: list[RunRow], path: Path) -> Path:
    """The per-run table (:data:`TABLE_COLUMNS`) at ``path``, written atomically; read back with
    :func:`read_table`."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL)  # every field quoted: "\r" survives
    writer.writerow(TABLE_COLUMNS)
    writer.writerows([r.file, r.line, r.format, r.task_id, r.status, r.reason, r.drops] for r in rows)
    atomic_write_bytes(path, buf.getvalue().encode("utf-8"))
    return path


def read_table(path: Path) -> list[RunRow]:
    """The rows of a per-run table written by :func:`write_table`."""
    with Path(path).open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        if tuple(header) != TABLE_COLUMNS:
            raise ValueError(f"{path}:1: expected the per-run table header {','.join(TABLE_COLUMNS)}")
        return [RunRow(file, int(line), fmt, task_id, status, reason, drops)
                for file, line, fmt, task_id, status, reason, drops in reader]


def _reason(message: str) -> str:
    """The kind of a problem, for the summary: names and numbers masked, cut before details."""
    kind = re.sub(r"'[^']*'|\"[^\"]*\"|(?<![\w-])\d+(?!\w)", "_", message)  # "UTF-8" stays
    return re.split(r"[:(;]", kind, maxsplit=1)[0].strip()


# (format used, one trajectory dict per run of the record, or the problem of a run that could not be converted)
Converter = Callable[[Any, RunContext], tuple[str, list[dict[str, Any] | RunProblem]]]


def converter(fmt: str, field_map: Path | None = None, hook: str | None = None) -> Converter:
    """``convert(record, ctx) -> (format used, trajectory dicts)`` for ``fmt``; option errors raise ``ValueError``."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown import format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if fmt == mapping.FORMAT:
        if (field_map is None) == (hook is None):
            raise ValueError("format map needs exactly one of --map MAP.json or --hook module:function")
        if hook is not None:
            fn = mapping.load_hook(hook)
            return lambda record, ctx: ("hook", list(mapping.run_hook(fn, record)))
        assert field_map is not None  # exactly one of the two, checked above
        spec = mapping.load_map(field_map)
        return lambda record, ctx: ("map", list(mapping.convert(record, ctx, spec)))
    if field_map is not None or hook is not None:
        raise ValueError(f"--map and --hook go with format map, not {fmt}")
    if fmt != "auto":
        module = IMPORTERS[fmt]
        return lambda record, ctx: (module.FORMAT, _runs(module, record, ctx))

    def sniffed(record: object, ctx: RunContext) -> tuple[str, list[dict[str, Any] | RunProblem]]:
        module = next((m for m in SNIFF_ORDER if m.looks_like(record)), None)
        if module is None:
            raise RunProblem("(record)", "format not recognised (auto): expected a .traj object, an ATIF trajectory, "
                                         "a tau2-bench result file, an Inspect log, or chat messages (openai, anthropic); name the "
                                         "format or use map")
        return module.FORMAT, _runs(module, record, ctx)
    return sniffed


def _runs(module: Any, record: Any, ctx: RunContext) -> list[dict[str, Any] | RunProblem]:
    """The runs of one record: a multi-run format (``convert_all``) gives each run or its problem."""
    if hasattr(module, "convert_all"):
        return module.convert_all(record, ctx)
    return [module.convert(record, ctx)]


def check_selection(selection: Selection) -> None:
    """Refuse a ``--dataset-schema``, ``--sample`` or ``--seed`` that cannot be used, before any work."""
    if selection.schema is not None and selection.schema not in SCHEMAS:
        raise ValueError(f"--dataset-schema {selection.schema!r}: expected one of {', '.join(SCHEMAS)}")
    if selection.sample is not None and selection.sample < 1:
        raise ValueError(f"--sample {selection.sample}: expected a number of rows >= 1")
    if selection.seed < 0:
        raise ValueError(f"--seed {selection.seed}: expected an integer >= 0")


@dataclass(frozen=True)
class IdOptions:
    """How task ids are made: ``prefix`` before every id (``--id-prefix``), ``field`` the run's id (``--id-from``)."""

    prefix: str = ""
    field: str | None = None


def import_runs(fmt: str, source: Path, out: Path, field_map: Path | None = None, hook: str | None = None,
                strict: bool = False, domain: str | None = None, ids: IdOptions = IdOptions(),
                selection: Selection = Selection()) -> ImportReport:
    """Convert every run of ``source`` to a trajectory file ``out``; see the module docstring. ``selection``:
    the rows of dataset (Parquet, Arrow) inputs to read and their column mapping (:mod:`.dataset`)."""
    source, out = Path(source), Path(out)
    check_selection(selection)
    if ids.field is not None and not ids.field.strip("."):
        raise ValueError("--id-from: expected a dotted field path such as instance_id or info.id")
    convert = converter(fmt, field_map, hook)  # option errors before any work
    sessions = session.claimer([m for m in SESSION_FORMATS if fmt in ("auto", m.FORMAT)])
    if not source.exists():
        raise FileNotFoundError(f"{source}: input not found")
    if out.exists() and out.resolve() == source.resolve():
        raise ValueError(f"--out {out}: is the input file; write the trajectories elsewhere")
    report = ImportReport(source, out, not_read=unread_files(source))
    found: list[tuple[str, int, str]] = []  # (file, line, "where: message") of every problem
    if strict:  # a directory is a corpus: a file of it that is not read is a problem
        found += [(str(f), 1, f"(file): {NOT_READ}") for f in report.not_read]
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".candidates")
    candidates = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            origins = _convert_all(convert, source, fh, Settings(domain, ids, strict, sessions, fmt, selection),
                                   report, found)
        valid = _check(candidates, origins, report, found, strict)
        report.problems = [f"{file}:{line}: {text}" for file, line, text in sorted(found, key=lambda p: p[:2])]
        report.rows = sorted(report.rows, key=lambda r: (r.file, r.line)) + [
            RunRow(str(f), 1, "", "", "not read", NOT_READ) for f in report.not_read]
        if report.converted and not (strict and report.problems):
            with atomic_path(out) as tmp, candidates.open("rb") as src, tmp.open("wb") as dst:
                for k, raw in enumerate(src, start=1):
                    if k in valid:
                        dst.write(raw)
            report.written = True
            report.table = write_table(report.rows, out.with_name(out.name + TABLE_SUFFIX))
    finally:
        candidates.unlink(missing_ok=True)
    return report


@dataclass(frozen=True)
class Settings:
    """The per-run options of one import."""

    domain: str | None
    ids: IdOptions
    strict: bool
    sessions: session.Claims | None = None  # which session formats may claim a JSON Lines file
    fmt: str = "auto"  # the format named (its refusals name the format a record looks like)
    selection: Selection = Selection()  # the rows of dataset inputs to read


@dataclass(frozen=True)
class Origin:
    """Where a candidate line (a converted run) came from: the input's file and line, the format, its task id and
    its record's drops (JSON, for the per-run table)."""

    file: str
    line: int
    format: str
    task_id: str
    drops: str


def _drops(ctx: RunContext) -> str:
    """A record's drops as a JSON object ``{path: count}`` (sorted; empty text when none), for the per-run table."""
    return json.dumps(dict(sorted(ctx.dropped.items())), ensure_ascii=False) if ctx.dropped else ""


def _detected(rec: Record, fmt: str) -> str | None:
    """The format a record refused by the named format ``fmt`` looks like (another one that claims it), or None."""
    if fmt not in IMPORTERS or rec.problem:
        return None
    found = next((m.FORMAT for m in SNIFF_ORDER if m.looks_like(rec.value)), None)
    return found if found != fmt else None


def _convert_all(convert: Converter, source: Path, fh: TextIO, settings: Settings, report: ImportReport,
                 found: list[tuple[str, int, str]]) -> list[Origin]:
    """Each record of ``source`` converted and written to ``fh`` (one candidate per line), problems to ``found``;
    returns the origin of each candidate line. Under a named format, a JSON Lines file another session format
    claims is one problem naming that format (not one per line), and a refused record another format claims
    names it first in its problem."""
    origins: list[Origin] = []
    claims_any = session.claimer(list(SESSION_FORMATS)) if settings.fmt in IMPORTERS else None
    other_session: tuple[Path, str] | None = None  # (file, format) of a session file given the wrong format
    last_file: Path | None = None

    def skip(rec: Record, exc: RunProblem, used: str = "", drops: str = "") -> None:
        line = getattr(exc, "line", rec.line)
        found.append((str(rec.file), line, f"{exc.where}: {exc.message}"))
        report.skipped += 1
        report.reasons[_reason(exc.message)] += 1
        report.rows.append(RunRow(str(rec.file), line, used, "", "refused", f"{exc.where}: {exc.message}", drops))

    for rec in session.whole_files(read_records(source, settings.selection), settings.sessions):
        first = rec.file != last_file
        last_file = rec.file
        if other_session is not None and other_session[0] == rec.file:
            continue  # the rest of a session file given the wrong format: its one problem is reported
        claimed = claims_any(rec.value) if claims_any and first and not rec.single and rec.problem is None else None
        if claimed is not None and claimed != settings.fmt:
            other_session = (rec.file, claimed)
            skip(rec, RunProblem("(file)", f"looks like {claimed!r}, not {settings.fmt!r}: a {claimed} session file "
                                           f"(one run); import it with {claimed} or auto"))
            continue
        ctx = RunContext(file=str(rec.file), line=rec.line, stem=_stem(rec.file), single=rec.single,
                         domain=settings.domain, id_from=settings.ids.field)
        try:
            if rec.problem:
                raise RunProblem(*rec.problem)
            used, runs = convert(rec.value, ctx)
        except RunProblem as exc:
            other = _detected(rec, settings.fmt)
            if other is not None:
                exc = RunProblem(exc.where, f"looks like {other!r}, not {settings.fmt!r} (import it with {other} or "
                                            f"auto): {exc.message}")
            skip(rec, exc, drops=_drops(ctx))
            continue
        if settings.strict and ctx.dropped_text:
            path = sorted(ctx.dropped_text)[0]
            skip(rec, RunProblem(path, f"field holding text, dropped ({used} does not map it; "
                                       f"{len(ctx.dropped_text)} such field(s)); --strict refuses a text it "
                                       "would lose"), used, _drops(ctx))
            continue
        report.dropped.update(ctx.dropped)
        for run in runs:
            try:
                if isinstance(run, RunProblem):
                    raise run
                if settings.ids.prefix and isinstance(run, dict) and isinstance(run.get("task_id"), str):
                    run["task_id"] = settings.ids.prefix + run["task_id"]
                line = json.dumps(run, ensure_ascii=False, allow_nan=False) + "\n"
            except (TypeError, ValueError) as exc:
                skip(rec, exc if isinstance(exc, RunProblem)
                     else RunProblem("(record)", f"converted run is not plain JSON ({exc})"), used, _drops(ctx))
                continue
            fh.write(line)
            task_id = run.get("task_id") if isinstance(run, dict) else None
            origins.append(Origin(str(rec.file), rec.line, used, task_id if isinstance(task_id, str) else "",
                                  _drops(ctx)))
    return origins


def _check(candidates: Path, origins: list[Origin], report: ImportReport,
           found: list[tuple[str, int, str]], strict: bool = False) -> set[int]:
    """Validate the candidate lines as ``interp validate`` does (streaming); problems go back to the input's lines."""
    from interp.data.trajectory import ValidationReport, iter_records

    checked = ValidationReport(candidates)
    # control tokens are for the commands that render to refuse (they take --allow-control-tokens), not the import
    valid = {line for line, _ in iter_records(candidates, checked, strict=strict, allow_control_tokens=True)}
    failed: dict[int, list[str]] = {}
    for problem in checked.problems:
        line, rest = _candidate_line(candidates, problem)
        failed.setdefault(line, []).append(rest)
    for warning in checked.warnings:
        line, rest = _candidate_line(candidates, warning)
        report.warnings.append(f"{origins[line - 1].file}:{origins[line - 1].line}: {rest} (in the converted "
                               "trajectory)")
    for k, o in enumerate(origins, start=1):
        if k in valid:
            report.converted += 1
            report.formats[o.format] += 1
            report.rows.append(RunRow(o.file, o.line, o.format, o.task_id, "imported", "", o.drops))
            continue
        rests = [_first_at(rest, origins) for rest in failed.get(k, ["(record): invalid converted trajectory"])]
        found += [(o.file, o.line, f"{rest} (in the converted trajectory)") for rest in rests]
        report.skipped += 1
        report.reasons[_reason(rests[0].split(": ", 1)[-1])] += 1
        report.rows.append(RunRow(o.file, o.line, o.format, o.task_id, "refused",
                                  f"{rests[0]} (in the converted trajectory)", o.drops))
    return valid


def _first_at(rest: str, origins: list[Origin]) -> str:
    """A validator message with its candidate line number (``first on line K``) as the run's input file and line."""
    def input_at(m: re.Match[str]) -> str:
        origin = origins[int(m.group(1)) - 1]
        return f"(first in {origin.file}:{origin.line})"
    return re.sub(r"\(first on line (\d+)\)", input_at, rest)


def _candidate_line(candidates: Path, problem: str) -> tuple[int, str]:
    """``(line, "where: message")`` of a validator line ``CANDIDATES:LINE: where: message``."""
    line, rest = problem[len(str(candidates)) + 1:].split(": ", 1)
    return int(line), rest


def _stem(file: Path) -> str:
    """The file name without its data suffixes (``a-1.2.traj`` -> ``a-1.2``): the default task id."""
    name = file.name
    while (suffix := next((s for s in (".json", ".jsonl", ".ndjson", ".traj") if name.endswith(s)), None)):
        name = name[: -len(suffix)]
    return name or file.name
