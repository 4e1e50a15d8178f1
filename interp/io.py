"""Resumable per-unit jobs: each unit's result is a JSON file written atomically; finished units are reused."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from interp.extraction.store import atomic_write_json


def run_units(keys: Sequence[str], compute: Callable[[str], Any], cache_dir: Path, label: str,
              progress: bool = True) -> dict[str, Any]:
    """``{key: compute(key)}``, reading ``cache_dir/<key>.json`` where a finished run left it."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    columns = [TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[key]}"),
               TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*columns, disable=not progress) as bar:
        task = bar.add_task(label, total=len(keys), key="")
        for key in keys:
            path = cache_dir / f"{key}.json"
            bar.update(task, key=key)
            if path.exists():
                results[key] = json.loads(path.read_text())
            else:
                results[key] = compute(key)
                atomic_write_json(path, results[key])
            bar.advance(task)
    return results
