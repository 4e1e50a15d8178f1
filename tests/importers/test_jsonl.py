"""The one JSON Lines reader: trajectories, importer inputs and states files report bad lines alike."""

from __future__ import annotations

import pytest

from interp.continuations.states import StatesError, load_states
from interp.data.importers.reader import read_records
from interp.data.jsonl import InputError, read_lines
from interp.data.trajectory import TrajectoryError, validate_file

pytestmark = pytest.mark.unit

BAD = b'{"a": 1}\n\n\xff\xfe\n' + b"[" * 100_000 + b"\n" + b'{"a": }\n'
EXPECTED = [  # (line, message) of the three bad lines; the blank line 2 is skipped
    (3, "(line): not UTF-8 (byte 1 of the line); re-encode the file as UTF-8"),
    (4, "(line): JSON nested too deeply to read"),
    (5, "(line): invalid JSON: Expecting value at column 7"),
]


def test_the_reader_numbers_lines_and_names_each_bad_one(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(BAD)
    lines = list(read_lines(path))
    assert [(e.number, e.value) for e in lines[:1]] == [(1, {"a": 1})]
    assert [(e.number, e.problem) for e in lines[1:]] == EXPECTED


def test_states_trajectories_and_importer_inputs_share_it(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(BAD)
    with pytest.raises(StatesError) as states:
        load_states(path, [])
    assert [p for p in states.value.problems if "(line)" in p] == [f"{path}:{n}: {m}" for n, m in EXPECTED]
    assert [p for p in validate_file(path).problems if "(line)" in p] == [f"{path}:{n}: {m}" for n, m in EXPECTED]
    records = [r for r in read_records(path) if r.problem]
    assert [(r.line, f"{r.problem[0]}: {r.problem[1]}") for r in records] == EXPECTED
    assert issubclass(StatesError, InputError) and issubclass(TrajectoryError, InputError)
    assert "problem(s) in states input" in str(states.value)
