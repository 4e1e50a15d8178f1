"""interp.progress: plain periodic lines when the stream is not a terminal (pipes, cluster logs), none when disabled."""

from __future__ import annotations

import io
import logging
import re

import pytest

from interp.progress import progress_line, track

pytestmark = pytest.mark.unit


def test_line_has_count_rate_eta():
    line = progress_line("extract", 3, 12, "units", elapsed=30.0, tokens=6000, info="t1/full")
    assert line == "extract: 3/12 units (25%), 200 tok/s, elapsed 0:00:30, ETA 0:01:30, t1/full"


def test_last_line_has_no_eta():
    assert "ETA" not in progress_line("harm", 4, 4, "units", elapsed=8.0)


def test_pipe_gets_start_first_last_lines(caplog):
    stream = io.StringIO()  # not a TTY
    with caplog.at_level(logging.INFO, logger="interp.progress"), \
            track("extract", total=5, stream=stream, every=3600) as bar:
        for i in range(5):
            bar.advance(tokens=10, info=f"u{i}")
    lines = stream.getvalue().splitlines()
    assert [re.match(r"extract: (\d+)/5 units", x).group(1) for x in lines] == ["0", "1", "5"]
    assert "u4" in lines[-1] and "tok/s" in lines[-1]
    assert [r.getMessage() for r in caplog.records] == lines[1:]  # the logger gets the step lines too


def test_every_zero_prints_each_step():
    stream = io.StringIO()
    with track("x", total=3, stream=stream, every=0) as bar:
        for _ in range(3):
            bar.advance()
    assert len(stream.getvalue().splitlines()) == 4


def test_disabled_prints_nothing():
    stream = io.StringIO()
    with track("x", total=3, stream=stream, enabled=False, every=0) as bar:
        for _ in range(3):
            bar.advance()
    assert stream.getvalue() == ""
