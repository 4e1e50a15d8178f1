"""Every stage that writes holds its output folder's writer lock: a second run writing into the same folder is
refused before it reads or writes anything (``interp.io.writer_lock``), here for the stages whose writers live in
the analyses (labels, externalization labels and risk)."""

from __future__ import annotations

from pathlib import Path

import pytest

from interp.io import WriterLocked, writer_lock
from interp.pipelines import stages

pytestmark = pytest.mark.unit

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo" / "trajectories.jsonl"


@pytest.mark.parametrize("stage", [
    lambda out: stages.label(DEMO, out),
    lambda out: stages.externalize(DEMO, out),
    lambda out: stages.risk(out, trajectories=DEMO),
], ids=["label", "externalize", "risk"])
def test_a_second_writer_is_refused(tmp_path, stage):
    out = tmp_path / "out"
    with writer_lock(out, command="the first run"):
        with pytest.raises(WriterLocked, match="another run is writing here .*'the first run'"):
            stage(out)
        assert sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing written beside the first run's lock
