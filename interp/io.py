"""Files that are never half-written: atomic writes, strict JSON, resumable per-unit jobs.

* :func:`atomic_write_bytes` writes through a temporary file in the target's
  directory and renames it into place, so a reader (or a killed run) sees the
  old file or the new one, never a prefix.
* :func:`atomic_write_json` writes *strict* JSON: NaN and +-Infinity become
  ``null`` (``json.dumps`` would write the non-standard ``NaN``), numpy scalars
  and arrays become plain numbers and lists.
* :func:`run_units` computes ``{key: compute(key)}`` with one JSON file per
  finished key under ``cache_dir``; a re-run reuses what is there.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from interp.progress import track


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
    """``{key: compute(key)}``, reading ``cache_dir/<key>.json`` where a finished run left it."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    with track(label, total=len(keys), unit="units", enabled=progress) as bar:
        for key in keys:
            path = cache_dir / f"{key}.json"
            if path.exists():
                results[key] = json.loads(path.read_text())
            else:
                results[key] = compute(key)
                atomic_write_json(path, results[key])
            bar.advance(info=key)
    return results
