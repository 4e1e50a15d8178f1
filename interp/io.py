"""Files that are never half-written: atomic writes, strict JSON, resumable per-unit jobs.

* :func:`atomic_write_bytes` writes through a temporary file in the target's
  directory and renames it into place, so a reader (or a killed run) sees the
  old file or the new one, never a prefix.
* :func:`atomic_write_json` writes *strict* JSON: NaN and +-Infinity become
  ``null`` (``json.dumps`` would write the non-standard ``NaN``), numpy scalars
  and arrays become plain numbers and lists. It is compact (no indentation,
  no spaces after separators; numbers unchanged): result files are read by
  programs and ``jq``/``python -m json.tool``, and indentation was 40-55 % of
  the bytes of the files that grow with the model's width or the data
  (the gate's scorer, DRSR parts, externalization labels; #40).
* :func:`run_units` computes ``{key: compute(key)}`` with one JSON file per
  finished key under ``cache_dir``; a re-run reuses what is there. With a
  shard it computes only that shard's keys and records the run in
  ``cache_dir/run.json`` (RUN_FIELDS); :func:`merge_unit_dirs` joins the
  folders of a complete set of shards.
* :func:`safe_stem` is the one rule from an id (task id, boundary, cell name)
  to a file name: allowed characters, bounded length, and a short hash of the
  raw id, so ``a/b`` and ``a_b`` never share a file and ``../x`` never leaves
  its folder; :func:`inside` refuses any output path that resolves elsewhere.
* :func:`read_json` and :func:`read_text` read a file or fail with one line naming it;
  :func:`check_output_dir` refuses an output folder that is a file, lies under
  a file or cannot be written, before anything is computed.
* :func:`writer_lock` makes one writer per output folder: ``<folder>/.lock``
  is created atomically and names its holder; a second writer gets
  :class:`WriterLocked`, a lock left by a dead process on this host is taken over.
  :func:`merge_result_folders` does it for every such folder of shard output
  folders (patch, harm, intervene); re-running the stage without a shard on
  the merged folder writes its summary and recomputes nothing.
* :func:`balanced_shards` is the one rule that splits units over shards:
  by cost (tokens), longest first, each to the least-loaded shard.
* :class:`Work` is a set of units an executor runs (load a model once per
  worker, compute each unit and write it atomically); :func:`run_work` is the
  in-process executor (``interp.pipelines.executors`` adds Ray).
* :func:`hold_point` stops a run at a known point between two units when
  ``INTERP_HOLD_AFTER_UNITS=N:DIR`` is set (unset in normal runs): after its
  N-th unit the process writes ``DIR/held`` and blocks on the FIFO
  ``DIR/release``, so an interrupt test signals it there instead of racing it.

Fields of ``run.json`` (``RUN_FIELDS``), beside a sharded ``run_units`` folder:

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``label`` | ``[]`` | str | - | which stage wrote the folder |
| ``shard`` | ``{index, count}`` | object | - | this shard of ``count`` (0-based index) |
| ``units`` | ``[n_units]`` | str | - | the keys of this shard, in run order |
| ``all_units`` | ``[n_all]`` | str | - | the keys of the whole run (every shard) |
| ``record`` | ``{...}`` | object | - | what must match across shards: settings digest and input hash |
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

from interp.progress import track
from interp.schema import Field, JsonValue

RUN_FIELDS = (
    Field("label", "[]", "str", "-", "which stage wrote the folder"),
    Field("shard", "{index, count}", "object", "-", "this shard of ``count`` (0-based index)"),
    Field("units", "[n_units]", "str", "-", "the keys of this shard, in run order"),
    Field("all_units", "[n_all]", "str", "-", "the keys of the whole run (every shard)"),
    Field("record", "{...}", "object", "-", "what must match across shards: settings digest and input hash"),
)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
STEM_CHARS = 64  # readable part of a file stem; the hash keeps stems distinct
LOCK_NAME = ".lock"
HOLD_ENV = "INTERP_HOLD_AFTER_UNITS"


def safe_stem(raw_id: str) -> str:
    """File stem for ``raw_id``: its safe characters (at most STEM_CHARS) plus 10 hex of its SHA-1, so distinct ids
    get distinct files and no id can name a path (``/``, ``..``) or a hidden file."""
    readable = _UNSAFE.sub("_", raw_id)[:STEM_CHARS].lstrip(".") or "_"
    return f"{readable}-{hashlib.sha1(raw_id.encode()).hexdigest()[:10]}"


def inside(folder: Path, path: Path) -> Path:
    """``path`` resolved, refused (ValueError) unless it lies inside ``folder`` (resolved, symlinks followed)."""
    root, resolved = Path(folder).resolve(), Path(path).resolve()
    if resolved != root and root not in resolved.parents:
        raise ValueError(f"{path}: resolves to {resolved}, outside the output folder {folder}")
    return resolved


def read_text(path: Path, newline: str | None = None) -> str:
    """The UTF-8 text of ``path`` (``newline=""``: line ends as written, for a CSV whose cells may hold CR); ValueError
    naming the file when it is not UTF-8."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8", newline=newline) as fh:
            return fh.read()
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def read_json(path: Path) -> Any:  # Any: JSON of any shape, read field by field (schema.check checks it)
    """The JSON in ``path``; ValueError naming the file when it is not JSON (or nested too deeply to read)."""
    path = Path(path)
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to read") from None


def check_output_dir(path: Path, option: str) -> None:
    """ValueError unless ``path`` is (or can be created as) a writable folder; ``option`` names it in the message."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{option} {path}: is a file, not a folder")
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{option} {path}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {path}: {existing} is not writable")


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a resumable job; ``done``/``total`` count its finished units (kept on disk)."""

    def __init__(self, done: int, total: int):
        super().__init__(f"interrupted after {done}/{total} units; re-run to resume")
        self.done, self.total = done, total



class WriterLocked(ValueError):
    """Another live process holds the folder's writer lock; the message names it (pid, host, command, since)."""


def _holder(path: Path) -> dict[str, Any] | None:
    """The lock file's JSON, or None when it is unreadable or half-written."""
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def _is_stale(holder: dict[str, Any] | None, path: Path) -> bool:
    """True when the lock's process is gone: same host and dead PID (or unreadable and older than a minute)."""
    if holder is None:
        try:
            return time.time() - path.stat().st_mtime > 60
        except FileNotFoundError:
            return True
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False  # another machine's process cannot be checked: never taken over
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


@contextmanager
def writer_lock(folder: Path, *, command: str) -> Iterator[Path]:
    """Hold ``folder/.lock`` while writing into ``folder``; a second writer gets :class:`WriterLocked`.

    The lock is created with O_CREAT|O_EXCL (atomic) and holds the JSON ``{pid, host, command, since}``; a lock
    whose process is dead (same host) is taken over. It is removed on exit, also when the body raises; folders it
    created that are still empty then (a run refused inside the lock) are removed too.
    """
    folder = Path(folder)
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    mine = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _holder(path)
            if not _is_stale(holder, path):
                who = (f"pid {holder.get('pid')} on {holder.get('host')} running {holder.get('command')!r} "
                       f"since {holder.get('since')}" if holder else "an unknown process (lock being written)")
                raise WriterLocked(f"{folder}: another run is writing here ({who}); wait for it, or remove "
                                   f"{path} if that process is gone") from None
            # take over: move the stale lock aside, and put it back if it changed hands meanwhile
            aside = folder / f"{LOCK_NAME}.stale.{os.getpid()}"
            try:
                os.replace(path, aside)
            except FileNotFoundError:
                continue
            if _holder(aside) != holder:
                try:
                    os.link(aside, path)
                except FileExistsError:
                    pass
            aside.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as fh:
            json.dump(mine, fh)
        break
    else:
        raise WriterLocked(f"{folder}: could not take the writer lock {path} (contended)")
    try:
        yield path
    finally:
        if _holder(path) == mine:
            path.unlink(missing_ok=True)
        for made in created:  # deepest first; a folder that holds anything stays
            try:
                made.rmdir()
            except OSError:
                break


def to_strict_json(obj: object) -> JsonValue:
    """``obj`` with NaN/Infinity replaced by None and numpy values by plain Python ones (JSON-safe)."""
    if isinstance(obj, dict):
        return {k: to_strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_strict_json(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_strict_json(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    return cast(JsonValue, obj)  # str, int, None; anything else fails in json.dumps, naming its type


def _file_mode() -> int:
    """Mode a plain ``open()`` would give under the current umask (mkstemp files are 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path``, on error remove it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, _file_mode())  # after the writer: some (safetensors) re-create the file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_stale_temps(folder: Path) -> int:
    """Delete temporary files :func:`atomic_path` left in ``folder`` when a run was killed; call under the folder's
    :func:`writer_lock` (no live writer has any). Returns how many."""
    stale = list(Path(folder).glob(".*.tmp")) if Path(folder).is_dir() else []
    for path in stale:
        path.unlink(missing_ok=True)
    return len(stale)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory and a rename; a full disk is an
    OSError naming the file, the bytes it needs and the bytes free (nothing of it is left behind)."""
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        free = shutil.disk_usage(Path(path).parent).free
        raise OSError(errno.ENOSPC, f"No space left on device: {len(data):,} bytes to write, {free:,} free; free "
                                    "space and re-run (a resumable job keeps its finished units)", str(path)) from None


def atomic_write_json(path: Path, obj: object) -> None:
    """Atomically write ``obj`` as compact strict JSON (NaN/Infinity -> null; see :func:`to_strict_json`)."""
    text = json.dumps(to_strict_json(obj), separators=(",", ":"), allow_nan=False)
    atomic_write_bytes(path, (text + "\n").encode())


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes (the input hash recorded by sharded runs)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def balanced_shards(costs: Mapping[str, int], n: int) -> list[list[str]]:
    """Split keys over ``n`` shards by cost: longest first, each to the least-loaded shard (ties: lower index).

    Each shard's keys keep their input order. The one assignment rule of every ``--shard``.
    """
    if n < 1:
        raise ValueError(f"shard count must be >= 1, got {n}")
    order = {k: i for i, k in enumerate(costs)}
    loads = [0] * n
    owner: dict[str, int] = {}
    for key in sorted(costs, key=lambda k: (-costs[k], order[k])):
        target = min(range(n), key=lambda j: (loads[j], j))
        owner[key] = target
        loads[target] += costs[key]
    return [[k for k in costs if owner[k] == j] for j in range(n)]


def shard_keys(costs: Mapping[str, int], shard: tuple[int, int]) -> list[str]:
    """The keys of ``shard = (I, N)`` under :func:`balanced_shards`."""
    i, n = shard
    if not 0 <= i < n:
        raise ValueError(f"bad shard {i}/{n}: need 0 <= I < N")
    return balanced_shards(costs, n)[i] if n > 1 else list(costs)


@dataclass
class UnitRun:
    """Where and how long one unit ran (``error`` set when it failed after its retries)."""

    key: str
    host: str = ""
    worker: str = ""
    seconds: float = 0.0
    attempts: int = 1
    error: str | None = None


@dataclass
class Work:
    """Units for an executor: ``load()`` once per worker (the model), ``compute(ctx, key)`` computes one
    unit and writes its result atomically; ``done(key)`` says whether a result is already there."""

    label: str
    keys: list[str]
    load: Callable[[], Any]
    compute: Callable[[Any, str], Any]
    done: Callable[[str], bool]
    costs: dict[str, int] = field(default_factory=dict)  # scheduling order: costliest first


class Executor(Protocol):
    """Runs a :class:`Work`'s unfinished units (locally or on a cluster); returns one record per unit run."""

    def run(self, work: Work, progress: bool = True) -> dict[str, UnitRun]: ...


def worker_name() -> tuple[str, str]:
    """``(host, "pid <pid>")`` of this process (recorded per unit)."""
    return socket.gethostname(), f"pid {os.getpid()}"


def timed_unit(work: Work, ctx: object, key: str) -> UnitRun:
    """Compute one unit in this process and record where and how long it ran."""
    started = time.perf_counter()
    work.compute(ctx, key)
    host, worker = worker_name()
    return UnitRun(key, host, worker, time.perf_counter() - started)


def hold_point(done: int) -> None:
    """Block after the ``done``-th unit when ``$INTERP_HOLD_AFTER_UNITS`` is ``"<done>:<dir>"``: write
    ``<dir>/held`` (this PID), then wait until a writer opens the FIFO ``<dir>/release`` (or a signal arrives).

    The one place a run can be stopped deterministically between units: interrupt tests wait for ``held`` and
    signal a process that cannot have moved on, instead of racing a clock."""
    spec = os.environ.get(HOLD_ENV)
    if not spec:
        return
    count, sep, folder = spec.partition(":")
    if not sep or not count.isdigit() or not folder:
        raise ValueError(f"${HOLD_ENV}={spec!r}: expected '<units>:<folder>'")
    if done != int(count):
        return
    atomic_write_bytes(Path(folder) / "held", str(os.getpid()).encode())
    with open(Path(folder) / "release", "rb") as fifo:  # blocks until the test opens it for writing
        fifo.read()


def run_work(work: Work, context: object = None, progress: bool = True) -> dict[str, UnitRun]:
    """The in-process executor: ``ctx = context`` (or ``work.load()`` when a unit is left), then every
    unfinished unit in order; an error propagates (a re-run resumes)."""
    todo = [k for k in work.keys if not work.done(k)]
    records: dict[str, UnitRun] = {}
    if not todo:
        return records
    ctx = work.load() if context is None else context
    with track(work.label, total=len(todo), unit="units", enabled=progress) as bar:
        for key in todo:
            records[key] = timed_unit(work, ctx, key)
            bar.advance(info=key)
            hold_point(len(records))
    return records


def record_failures(path: Path, records: Mapping[str, UnitRun]) -> None:
    """Write the units that failed after their retries to ``path`` (removed when none failed); raise naming them."""
    failed = {k: r.error for k, r in records.items() if r.error is not None}
    if not failed:
        Path(path).unlink(missing_ok=True)
        return
    atomic_write_json(path, {k: {"error": e, "attempts": records[k].attempts} for k, e in failed.items()})
    raise RuntimeError(f"{len(failed)} unit(s) failed after their retries (listed in {path}; re-run to retry): "
                       + "; ".join(f"{k}: {e.splitlines()[-1] if e else e}" for k, e in list(failed.items())[:5]))


def _check_run_record(path: Path, doc: dict[str, Any]) -> None:
    """Write ``run.json``, or refuse when the folder holds a run with another shard, unit list or record."""
    if path.exists():
        old = read_json(path)
        diff = sorted(k for k in doc if old.get(k) != doc[k])
        if diff:
            raise ValueError(f"{path.parent}: written by another run ({', '.join(diff)} differ); use a new --out")
        return
    atomic_write_json(path, doc)


def run_units(keys: Sequence[str], compute: Callable[..., Any], cache_dir: Path, label: str,
              progress: bool = True, *, load: Callable[[], Any] | None = None, executor: Executor | None = None,
              shard: tuple[int, int] = (0, 1), costs: Mapping[str, int] | None = None,
              record: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{key: compute(key)}`` (``compute(load(), key)`` with ``load``), one ``cache_dir/<safe_stem(key)>.json``
    per key, reused by a re-run.

    ``shard=(I, N)`` takes this shard's keys (:func:`balanced_shards` by ``costs``, default 1 each) and records
    ``run.json``; ``executor`` (default: in process) runs the unfinished keys; failures after their retries are
    written to ``failed.json`` and raised.
    """
    cache_dir = Path(cache_dir)
    keys = list(keys)
    mine = shard_keys({k: (costs or {}).get(k, 1) for k in keys}, shard)
    with writer_lock(cache_dir, command=label):
        return _run_units(keys, mine, compute, cache_dir, label, progress, load, executor, shard, costs, record)


def _run_units(keys: list[str], mine: list[str], compute: Callable[..., Any], cache_dir: Path, label: str,
               progress: bool, load: Callable[[], Any] | None, executor: Executor | None, shard: tuple[int, int],
               costs: Mapping[str, int] | None, record: Mapping[str, Any] | None) -> dict[str, Any]:
    """:func:`run_units` under its writer lock."""
    if shard != (0, 1):
        _check_run_record(cache_dir / "run.json", {"label": label, "shard": {"index": shard[0], "count": shard[1]},
                                                   "units": mine, "all_units": keys, "record": dict(record or {})})
    cache_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(cache_dir)  # a killed run's temporary files (we hold the folder's lock)

    def path(key: str) -> Path:
        return inside(cache_dir, cache_dir / f"{safe_stem(key)}.json")

    def write(ctx: object, key: str) -> None:
        atomic_write_json(path(key), compute(key) if load is None else compute(ctx, key))

    work = Work(label, mine, load or (lambda: None), write, lambda k: path(k).exists(),
                {k: (costs or {}).get(k, 1) for k in mine})
    try:
        records = executor.run(work, progress) if executor is not None else run_work(work, progress=progress)
    except KeyboardInterrupt:
        raise Interrupted(sum(path(k).exists() for k in mine), len(mine)) from None
    record_failures(cache_dir / "failed.json", records)
    return {key: read_json(path(key)) for key in mine}


def check_complete(missing: Sequence[str], n_units: int, count: int, given: Sequence[int],
                   allow_partial: bool) -> None:
    """Refuse (ValueError listing the shards not given and the missing units) a merge of an incomplete set of
    shards, unless ``allow_partial``: the one check of ``merge_unit_dirs`` and the store merge."""
    if not missing or allow_partial:
        return
    absent = sorted(set(range(count)) - set(given))
    raise ValueError(f"incomplete set of shards: {len(missing)} of {n_units} units missing"
                     + (f" (shards {', '.join(f'{i}/{count}' for i in absent)} not given)" if absent else "")
                     + f": {', '.join(missing[:10])}{' ...' if len(missing) > 10 else ''}; "
                     "pass --allow-partial to merge anyway")


def merge_unit_dirs(target: Path, sources: Sequence[Path], allow_partial: bool = False) -> list[str]:
    """Copy the per-key results of sharded ``run_units`` folders into ``target`` after checking that they are
    shards of one run (same keys, same record) and that all of them are there (else list what is missing)."""
    docs = []
    for src in sources:
        run = Path(src) / "run.json"
        if not run.is_file():
            raise ValueError(f"{src}: no run.json (not a sharded run_units folder)")
        docs.append(read_json(run))
    first = docs[0]
    for src, doc in zip(sources, docs):
        for key in ("label", "all_units", "record"):
            if doc[key] != first[key]:
                raise ValueError(f"{src}: {key} differs from {sources[0]}'s (shards of different runs or settings)")
        if doc["shard"]["count"] != first["shard"]["count"]:
            raise ValueError(f"{src}: shard count {doc['shard']['count']} differs from {first['shard']['count']}")
    present: dict[str, Path] = {}
    for src, doc in zip(sources, docs):
        present.update({k: Path(src) / f"{safe_stem(k)}.json" for k in doc["units"]
                        if (Path(src) / f"{safe_stem(k)}.json").exists()})
    missing = [k for k in first["all_units"] if k not in present]
    check_complete(missing, len(first["all_units"]), first["shard"]["count"], [d["shard"]["index"] for d in docs],
                   allow_partial)
    target = Path(target)
    with writer_lock(target, command="merge"):
        for src in present.values():
            atomic_write_bytes(target / src.name, src.read_bytes())
    return missing


def merge_result_folders(target: Path, sources: Sequence[Path], allow_partial: bool = False) -> dict[str, list[str]]:
    """Merge every sharded ``run_units`` folder (found by its ``run.json``) of the shard output folders ``sources``
    into the same relative place under ``target``; ``{folder: missing keys}``. Re-running the stage without
    ``--shard`` on ``target`` then writes its summary from the merged parts (nothing is recomputed)."""
    folders = sorted({run.parent.relative_to(src) for src in sources for run in Path(src).rglob("run.json")})
    if not folders:
        raise ValueError(f"{', '.join(map(str, sources))}: not an activation store (no store.json) and no "
                         "sharded result folders (run.json)")
    for rel in folders:
        have = [Path(src) / rel for src in sources if (Path(src) / rel / "run.json").is_file()]
        if len(have) != len(sources):
            lacking = [str(src) for src in sources if not (Path(src) / rel / "run.json").is_file()]
            if not allow_partial:
                raise ValueError(f"{rel}: not in {', '.join(lacking)} (shards of different runs or settings); "
                                 "pass --allow-partial to merge anyway")
    return {str(rel): merge_unit_dirs(Path(target) / rel, [Path(src) / rel for src in sources
                                                            if (Path(src) / rel / "run.json").is_file()],
                                      allow_partial) for rel in folders}
