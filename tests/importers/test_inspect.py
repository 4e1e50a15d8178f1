"""Inspect AI logs through ``interp import inspect``, read with inspect_ai's own reader (skipped without it).

The real log (tests/importers/samples/inspect_popularity.json) is one turn;
the tool, reasoning and epoch paths run on a log built with inspect_ai's own
message types from it and written by inspect_ai in both formats (.eval, .json).
"""

from __future__ import annotations

import pytest

from interp.data.importers.registry import import_runs
from interp.data.trajectory import load_trajectories, validate_file

from ._support import REAL

pytestmark = pytest.mark.unit

inspect_log = pytest.importorskip("inspect_ai.log")
model = pytest.importorskip("inspect_ai.model")
tool = pytest.importorskip("inspect_ai.tool")

LOG = REAL / "inspect_popularity.json"


def imported(source, tmp_path):
    out = tmp_path / f"{source.stem}.jsonl"
    report = import_runs("auto", source, out)
    assert report.written and not report.problems, report.problems
    strict = validate_file(out, strict=True)
    assert not strict.problems and not strict.unknown_fields
    return report, load_trajectories(out)


def test_the_real_log_equals_what_its_reader_sees(tmp_path):
    log = inspect_log.read_eval_log(str(LOG))
    sample = log.samples[0]
    report, (traj,) = imported(LOG, tmp_path)
    assert report.formats == {"inspect": 1}
    assert traj.system_prompt == sample.messages[0].content and traj.task == sample.messages[1].content
    assert [s.action.text for s in traj.steps] == [sample.messages[2].content]
    assert traj.outcome == {"reward": 1.0, "success": True}  # the match scorer's "C"
    assert traj.extra["metadata"]["scores"]["match"]["value"] == "C"


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_reasoning_tool_calls_errors_and_epochs(fmt, tmp_path):
    log = inspect_log.read_eval_log(str(LOG))
    sample = log.samples[0]
    sample.messages = sample.messages[:2] + [
        model.ChatMessageAssistant(content=[model.ContentReasoning(reasoning="I should look first."),
                                            model.ContentText(text="Listing.")],
                                   tool_calls=[tool.ToolCall(id="c1", function="bash", arguments={"cmd": "ls -a"})]),
        model.ChatMessageTool(content="a.txt", tool_call_id="c1", function="bash",
                              error=tool.ToolCallError(type="timeout", message="slow")),
        model.ChatMessageAssistant(content=[model.ContentReasoning(reasoning="x", redacted=True),
                                            model.ContentText(text="Yes")]),
    ]
    second = sample.model_copy(deep=True)
    second.epoch = 2
    log.samples = [sample, second]
    path = tmp_path / f"log.{fmt}"
    inspect_log.write_eval_log(log, str(path), format=fmt)
    report, trajs = imported(path, tmp_path)
    assert [t.task_id for t in trajs] == ["1/epoch-1", "1/epoch-2"]
    steps = [(s.reasoning, s.action.to_json(), s.observation, dict(s.extra)) for s in trajs[0].steps]
    assert steps == [
        ("I should look first.", {"tool": "bash", "arguments": {"cmd": "ls -a"}}, "a.txt",
         {"assistant_text": "Listing.", "is_error": True}),
        ("", {"text": "Yes"}, None, {}),
    ]
    assert report.dropped["samples[].messages[].content[] (redacted reasoning)"] == 2
