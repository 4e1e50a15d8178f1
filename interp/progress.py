"""Progress of long loops that reads on a terminal and in a log: rich bars on a TTY, plain periodic lines otherwise.

``track(label, total)`` is the one progress reporter of the package (extraction,
per-unit jobs)::

    with track("extract", total=len(units), unit="units") as bar:
        for unit in units:
            bar.advance(tokens=n_tokens, info=unit.name)

On a terminal (``stream.isatty()``) it draws a rich bar. Otherwise (a pipe, a
cluster log, ``interp extract ... | cat``) it prints one line per ``every``
seconds, and the first and last step always, of the form
``extract: 3/50 units (6%), 1,234 tok/s, elapsed 0:01:02, ETA 0:15:33, <info>``
to ``stream`` (stderr by default, so stdout stays the command's own output) and
to the ``interp.progress`` logger, so a ``logging.FileHandler`` a user attaches
records the same lines.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TextIO

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

LOGGER = "interp.progress"
EVERY_S = 30.0


def clock(seconds: float) -> str:
    """Seconds as H:MM:SS (whole seconds)."""
    return str(timedelta(seconds=max(0, round(seconds))))


def progress_line(label: str, done: int, total: int, unit: str, elapsed: float, tokens: int = 0,
                  info: str = "") -> str:
    """One plain progress line: ``label: i/N unit (p%), tok/s, elapsed, ETA, info`` (ETA from the mean rate so far)."""
    parts = [f"{label}: {done}/{total} {unit}" + (f" ({done / total:.0%})" if total else "")]
    if tokens and elapsed > 0:
        parts.append(f"{tokens / elapsed:,.0f} tok/s")
    parts.append(f"elapsed {clock(elapsed)}")
    if 0 < done < total:
        parts.append(f"ETA {clock(elapsed / done * (total - done))}")
    if info:
        parts.append(info)
    return ", ".join(parts)


class Tracker:
    """The handle ``track`` yields: ``advance`` after each finished step."""

    def __init__(self, label: str, total: int, unit: str, every: float, stream: TextIO,
                 bar: tuple[Progress, TaskID] | None, silent: bool = False) -> None:
        self.label, self.total, self.unit, self.every, self.stream, self.bar = label, total, unit, every, stream, bar
        self.silent = silent
        self.done = self.tokens = 0
        self.info = ""
        self.started = time.perf_counter()
        self.last_line = -float("inf")

    def advance(self, steps: int = 1, tokens: int = 0, info: str = "") -> None:
        """Count ``steps`` finished steps and ``tokens`` processed tokens; ``info`` shows beside the count."""
        self.done += steps
        self.tokens += tokens
        self.info = info or self.info
        elapsed = time.perf_counter() - self.started
        if self.silent:
            return
        if self.bar is not None:
            rate = f"{self.tokens / elapsed:,.0f} tok/s" if self.tokens and elapsed > 0 else ""
            progress, task = self.bar
            progress.update(task, advance=steps, info=", ".join(filter(None, [rate, self.info])))
        elif self.done == steps or self.done >= self.total or elapsed - self.last_line >= self.every:
            self.emit(elapsed)

    def emit(self, elapsed: float) -> None:
        """Write the current line to the stream and the ``interp.progress`` logger."""
        line = progress_line(self.label, self.done, self.total, self.unit, elapsed, self.tokens, self.info)
        print(line, file=self.stream, flush=True)
        logging.getLogger(LOGGER).info(line)
        self.last_line = elapsed


@contextmanager
def track(label: str, total: int, unit: str = "units", enabled: bool = True, every: float = EVERY_S,
          stream: TextIO | None = None) -> Iterator[Tracker]:
    """Report progress of ``total`` steps: a rich bar on a terminal, a plain line every ``every`` s otherwise."""
    stream = sys.stderr if stream is None else stream
    if not enabled or total == 0:
        yield Tracker(label, total, unit, every, stream, None, silent=True)
        return
    if stream.isatty():
        columns = [TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                   TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn()]
        with Progress(*columns, console=Console(file=stream)) as progress:
            yield Tracker(label, total, unit, every, stream, (progress, progress.add_task(label, total=total, info="")))
        return
    tracker = Tracker(label, total, unit, every, stream, None)
    print(progress_line(label, 0, total, unit, 0.0), file=stream, flush=True)
    yield tracker
