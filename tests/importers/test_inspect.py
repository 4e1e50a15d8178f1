"""Inspect AI logs through ``interp import inspect``, read with inspect_ai's own reader (skipped without it).

The real log (tests/importers/samples/inspect/popularity_log-read-sample.json) is one turn;
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

LOG = REAL / "inspect" / "popularity_log-read-sample.json"


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


def test_tools_offered_in_model_events_are_declared_and_a_directory_lists_the_json_logs_it_skips(tmp_path):
    event = pytest.importorskip("inspect_ai.event")
    log = inspect_log.read_eval_log(str(LOG))
    sample = log.samples[0]
    params = tool.ToolParams(properties={"cmd": tool.ToolParam(type="string", description="the command")},
                             required=["cmd"])
    bash = tool.ToolInfo(name="bash", description="Run a shell command.", parameters=params)
    sample.events = [event.ModelEvent(model="m", input=[], tools=[bash], tool_choice="auto",
                                      config=model.GenerateConfig(), output=model.ModelOutput()),
                     event.ModelEvent(model="m", input=[], tools=[bash], tool_choice="auto",
                                      config=model.GenerateConfig(), output=model.ModelOutput())]
    logs = tmp_path / "logs"
    logs.mkdir()
    inspect_log.write_eval_log(log, str(logs / "a.eval"), format="eval")
    inspect_log.write_eval_log(log, str(logs / "b.json"), format="json")
    out = tmp_path / "t.jsonl"
    report = import_runs("auto", logs, out)
    (traj,) = load_trajectories(out)
    # the declaration as inspect_ai wrote it, once though two model events offered it
    assert [dict(t) for t in traj.tools] == [{"name": "bash", "description": "Run a shell command.",
                                             "parameters": params.model_dump(mode="json", exclude_none=True)}]
    assert report.not_read == [logs / "b.json"]
    assert f"not read (no run file name): 1 file(s): {logs / 'b.json'}" in report.summary()
    assert import_runs("auto", logs / "b.json", tmp_path / "b.jsonl").converted == 1  # named, the .json imports
