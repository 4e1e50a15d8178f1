"""Files that are never half-written: atomic writes, strict JSON, resumable per-unit jobs.

* :func:`atomic_write_bytes` writes through a temporary file in the target's
  directory and renames it into place, so a reader (or a killed run) sees the
  old file or the new one, never a prefix.
* :func:`atomic_write_json` writes *strict* JSON: NaN and +-Infinity become
  ``null`` (``json.dumps`` would write the non-standard ``NaN``), numpy scalars
  and arrays become plain numbers and lists.
* :func:`run_units` computes ``{key: compute(key)}`` with one JSON file per
  finished key under ``cache_dir``; a re-run reuses what is there.
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
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from interp.progress import track


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
STEM_CHARS = 64  # readable part of a file stem; the hash keeps stems distinct
LOCK_NAME = ".lock"


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


def read_text(path: Path) -> str:
    """The UTF-8 text of ``path``; ValueError naming the file when it is not UTF-8."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def read_json(path: Path) -> Any:
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
    whose process is dead (same host) is taken over. It is removed on exit, also when the body raises.
    """
    folder = Path(folder)
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

def to_strict_json(obj: Any) -> Any:
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
    return obj


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
    """Write ``data`` to ``path`` via a temporary file in the same directory and a rename."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def atomic_write_json(path: Path, obj: Any) -> None:
    """Atomically write ``obj`` as indented strict JSON (NaN/Infinity -> null; see :func:`to_strict_json`)."""
    atomic_write_bytes(path, (json.dumps(to_strict_json(obj), indent=2, allow_nan=False) + "\n").encode())



def run_units(keys: Sequence[str], compute: Callable[[str], Any], cache_dir: Path, label: str,
              progress: bool = True) -> dict[str, Any]:
    """``{key: compute(key)}``, reading ``cache_dir/<safe_stem(key)>.json`` where a finished run left it
    (call under the output folder's :func:`writer_lock`: a killed run's temporary files are removed)."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(cache_dir)
    results: dict[str, Any] = {}
    with track(label, total=len(keys), unit="units", enabled=progress) as bar:
        try:
            for key in keys:
                path = inside(cache_dir, cache_dir / f"{safe_stem(key)}.json")
                if path.exists():
                    results[key] = read_json(path)
                else:
                    results[key] = compute(key)
                    atomic_write_json(path, results[key])
                bar.advance(info=key)
        except KeyboardInterrupt:
            done = sum((cache_dir / f"{safe_stem(k)}.json").exists() for k in keys)
            raise Interrupted(done, len(keys)) from None
    return results
