"""Steps of a whole run (``interp demo``): each stage with the inputs it ran on recorded beside its result.

A :class:`Step` attaches a stage function of :mod:`interp.pipelines.stages` to the file that marks it done
(an analysis's result in the registry, ``interp.reporting.analyses``): ``settings(ctx)`` says what it runs on
beyond the model and the trajectories, ``run(ctx, settings)`` runs it. :func:`run_steps` runs steps in order and
writes each one's record, ``<done stem>.inputs.json`` beside its done file, before the step starts::

    {"step": "patch", "model": "smollm2-135m", "revision": "<content hash>", "dtype": "float32", "device": "cpu",
     "trajectories_sha256": "...", "settings": {...}, "needs": {"store": "<sha256 of the store step's record>"}}

(``model``, ``revision``, ``dtype`` and ``device`` only for steps whose result depends on the sensor). On a
re-run a step is reused only when its done file exists and its record equals this run's; otherwise its
``outputs`` are removed and it is recomputed, and the console names what changed (``model: 'a' -> 'b'``). A
step's record holds the digests of the records of the steps it reads (``needs``), so a recomputed store
recomputes everything made from it: results of two runs never mix in one report. A record equal to this run's
without a done file is a killed run of the same inputs: the step resumes (its per-unit parts are kept).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from interp.io import atomic_write_json, inside, read_json

if TYPE_CHECKING:
    from interp.data.trajectory import Trajectory
    from interp.pipelines.demo import DemoConfig
    from interp.sensor.protocol import Sensor


@dataclass
class StepContext:
    """What every step of one run sees: the run's config, output folder, sensor and the trajectories its model
    stages run on (the demo's subset, ``interp.pipelines.stages.demo_trajectories``), the inputs
    shared by every step (``base``: model, revision, dtype, device, trajectories_sha256), what the steps
    report back (``subsets``: step title -> the subset it ran on; ``timings``: step title -> seconds), and every
    trajectory of the run's file (``every``: what a states file is validated against; empty: ``trajs``)."""

    config: DemoConfig
    out: Path
    sensor: Sensor
    trajs: list[Trajectory]
    base: Mapping[str, Any]
    subsets: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    every: list[Trajectory] = field(default_factory=list)


MODEL_KEYS = ("model", "revision", "dtype", "device")


@dataclass(frozen=True)
class Step:
    """One stage of a run: ``run(ctx, settings)`` makes ``done`` (relative to the run's folder).

    ``settings(ctx)`` is a JSON-able dict of what the step runs on besides the model and the trajectories; a
    ``"subset"`` entry (text) is reported as the subset it ran on. ``needs``: names of earlier steps whose
    results it reads. ``model``: whether its result depends on the sensor. ``outputs``: what a recompute removes
    first (relative paths; default: ``done``'s folder)."""

    name: str
    title: str
    done: str
    run: Callable[[StepContext, dict[str, Any]], Any]
    settings: Callable[[StepContext], dict[str, Any]] = lambda ctx: {}
    needs: tuple[str, ...] = ()
    model: bool = True
    outputs: tuple[str, ...] = ()

    def record_path(self, out: Path) -> Path:
        """Where the record of this step's inputs goes: beside its done file."""
        done = Path(out) / self.done
        return done.with_name(f"{done.stem}.inputs.json")


def digest(record: Mapping[str, Any]) -> str:
    """sha256 of a record's canonical JSON: what a later step records of the steps it reads."""
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def changes(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """What differs between two records, one ``key: old -> new`` per field (nested keys dotted:
    ``settings.task_ids``, ``needs.store``); ``[]`` when they are equal."""
    lines = []
    for key in dict.fromkeys([*old, *new]):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            lines += changes(a, b, f"{prefix}{key}.")
        elif a != b:
            lines.append(f"{prefix}{key}: {_short(a)} -> {_short(b)}")
    return lines


def _short(value: Any) -> str:
    """A value as printed in a change line; a hex digest shortened to 12 characters."""
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:12] + "..."
    return repr(value)


def run_steps(steps: Sequence[Step], ctx: StepContext, console: Console) -> dict[str, dict[str, Any]]:
    """Run (or reuse) every step in order (module docstring); the record of each step's inputs by name."""
    names = [s.name for s in steps]
    records: dict[str, dict[str, Any]] = {}
    for step in steps:
        unknown = [n for n in step.needs if n not in names[: names.index(step.name)]]
        if unknown:
            raise ValueError(f"step {step.name!r} needs {unknown}, which do not run before it")
        settings = step.settings(ctx)
        if "subset" in settings:
            ctx.subsets[step.title] = settings["subset"]
        record = _json({"step": step.name,
                  **{k: ctx.base[k] for k in MODEL_KEYS if step.model and k in ctx.base},
                  "trajectories_sha256": ctx.base.get("trajectories_sha256"),
                        "settings": settings, "needs": {n: digest(records[n]) for n in step.needs}})
        records[step.name] = record
        _run_one(step, record, record["settings"], ctx, console)
    return records


def _json(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` as it reads back from its file (tuples become lists), so a re-run's record compares equal."""
    return json.loads(json.dumps(record))


def _run_one(step: Step, record: dict[str, Any], settings: dict[str, Any], ctx: StepContext,
             console: Console) -> None:
    """Reuse, resume or (re)compute one step."""
    out = Path(ctx.out)
    done, where = out / step.done, step.record_path(out)
    old = read_json(where) if where.is_file() else None
    if old == record and done.exists():
        console.print(f"[green]✓[/] {step.title}: reusing {done} (same inputs)")
        return
    folder = Path(step.done).parent
    stale = [inside(out, out / p) for p in (step.outputs or ((str(folder),) if folder.parts else (step.done,)))]
    if old is not None and old != record or old is None and any(p.exists() for p in stale):
        why = "; ".join(changes(old, record)) if old is not None else "no record of the inputs it was made from"
        console.print(f"[yellow]↻[/] {step.title}: inputs changed ({escape(why)}): recomputing")
        for path in stale:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    atomic_write_json(where, record)  # before the step: a killed run resumes only with the same inputs
    console.rule(f"[bold]{step.title}")
    start = time.perf_counter()
    step.run(ctx, settings)
    ctx.timings[step.title] = round(time.perf_counter() - start, 1)
    console.print(f"[green]✓[/] {step.title} in {ctx.timings[step.title]} s")
