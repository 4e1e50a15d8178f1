"""The one JSON Lines reader with line numbers, and the one input-error type, for every line-based input file.

Trajectory files (:mod:`interp.data.trajectory`), importer inputs
(:mod:`interp.data.importers.reader`) and states files
(:mod:`interp.continuations.states`) read their lines here, so they report the
same problems the same way: a line that is not UTF-8 (with the byte), invalid
JSON (with the column), or JSON nested too deeply to read, each as
``(line): message`` for the caller to prefix with ``FILE:LINE``. Lines are read
as bytes one at a time, so a huge file is never held whole and one bad byte
does not stop the lines after it. Blank lines are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SHOWN = 50  # problems listed in an InputError's message; the rest are counted


class InputError(ValueError):
    """Invalid input file(s); ``problems`` holds one ``FILE:LINE: field: message`` per issue."""

    kind = "input"  # what the file holds, in the message: "trajectory input", "states input"

    def __init__(self, problems: list[str]):
        self.problems = problems
        if len(problems) == 1:
            super().__init__(problems[0])
            return
        shown = "\n".join(problems[:SHOWN])
        more = f"\n... and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
        super().__init__(f"{len(problems)} problem(s) in {self.kind}:\n{shown}{more}")


@dataclass(frozen=True)
class Line:
    """One non-blank line: its 1-based number and parsed JSON ``value``, or why it could not be read."""

    number: int
    value: Any = None
    problem: str | None = None  # "(line): ..." when the line is not readable JSON

    def at(self, path: Path) -> str:
        """``FILE:LINE`` of this line, the prefix of its problems."""
        return f"{path}:{self.number}"


def json_problem(exc: json.JSONDecodeError) -> str:
    """An invalid-JSON message with the decoder's reason and column (said once)."""
    return f"invalid JSON: {exc.msg} at column {exc.colno}"


def read_lines(path: Path) -> Iterator[Line]:
    """Every non-blank line of the JSON Lines file ``path``, parsed, with its number (streamed)."""
    with Path(path).open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield Line(number, problem=f"(line): not UTF-8 (byte {exc.start + 1} of the line); "
                                           "re-encode the file as UTF-8")
                continue
            if not text.strip():
                continue
            try:
                yield Line(number, json.loads(text))
            except json.JSONDecodeError as exc:
                yield Line(number, problem=f"(line): {json_problem(exc)}")
            except RecursionError:
                yield Line(number, problem="(line): JSON nested too deeply to read")
