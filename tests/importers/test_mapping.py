"""Any other format: the JSON field map (dotted paths) and the Python hook."""

from __future__ import annotations

import json

import pytest

from interp.data.importers import mapping
from interp.data.importers.common import RunContext, RunProblem

from ._support import SAMPLES, records

pytestmark = pytest.mark.unit

SPEC = mapping.load_map(SAMPLES / "custom_map.json")


def convert(record, spec=SPEC, line=1):
    return mapping.convert(record, RunContext(file="c.jsonl", line=line, stem="c"), spec)


def test_field_map_maps_every_field():
    (out,) = convert(records(SAMPLES / "custom.jsonl")[0])
    assert (out["task_id"], out["domain"]) == ("cu-web-1", "web")
    assert out["task"] == "Register Søren Kierkegaard (born 1813-05-05) on the library site."
    assert [t["name"] for t in out["tools"]] == ["open_url", "fill", "submit_form"]
    s1, s2, s3, s4, s5 = out["steps"]
    assert s1 == {"reasoning": "The registration form is at /register.\n\nOpen it first to see the fields.",
                  "action": {"tool": "open_url", "arguments": {"url": "https://lib.example/register"}},
                  "observation": '{"status": 200, "fields": ["name", "birth"]}'}
    assert s2["action"] == {"calls": [{"tool": "fill", "arguments": {"field": "name", "value": "Søren Kierkegaard"}},
                                      {"tool": "fill", "arguments": {"field": "birth", "value": "1813-05-05"}}]}
    assert s2["observation"] == ["ok", '{"error": "format DD.MM.YYYY expected"}']
    assert s4["action"] == {"tool": "submit_form", "arguments": {}}  # no arguments mapped value
    assert s5 == {"reasoning": "Report the member number.",
                  "action": {"text": "Registered Søren Kierkegaard as member #4471."}, "observation": None}
    assert out["final_answer"] == "member #4471" and out["outcome"] == {"reward": 1}
    assert s3["reasoning"].startswith("That didn't work")


def test_runs_inside_a_record_and_constants():
    spec = {**SPEC, "runs": "batch", "domain": {"const": "library"}, "task_id": "missing.path"}
    outs = convert({"batch": records(SAMPLES / "custom.jsonl")}, spec, line=4)
    assert [o["task_id"] for o in outs] == ["c-4-0", "c-4-1"]
    assert {o["domain"] for o in outs} == {"library"}


@pytest.mark.parametrize("edit, where, message", [
    (lambda r: r["setup"].pop("goal"), "setup.goal", "missing (mapped to task)"),
    (lambda r: r.update(events="x"), "events", "expected the list of steps, got a string"),
    (lambda r: r["events"][1].pop("acts"), "events[1]", "no action: none of step.calls (acts), step.tool"),
    (lambda r: r["events"][0]["act"].update(args="{bad"), "events[0].act.args", "invalid JSON arguments"),
    (lambda r: r["events"][1]["acts"][1].pop("name"), "events[1].acts[1].name", "missing (mapped to tool)"),
    (lambda r: r["events"][0].update(thinking=7), "events[0].thinking", "expected a string or a list of strings"),
])
def test_missing_or_bad_fields_name_the_input_path(edit, where, message):
    record = records(SAMPLES / "custom.jsonl")[0]
    edit(record)
    with pytest.raises(RunProblem) as exc:
        convert(record)
    assert exc.value.where == where and exc.value.message.startswith(message)


@pytest.mark.parametrize("spec, message", [
    ({"task": "a", "steps": "b", "step": {"text": "t"}, "taks": "x"}, "taks: unknown key"),
    ({"task": "a", "steps": "b", "step": {"text": "t", "obs": "o"}}, "step.obs: unknown key"),
    ({"task": "a", "step": {"text": "t"}}, "steps: required"),
    ({"task": "a", "steps": "b", "step": {"reasoning": "r"}}, "step: needs at least one of tool, calls, text"),
    ({"task": "a", "steps": "b", "step": {"calls": "c"}}, "step.call.tool: required with step.calls"),
    ({"task": 3, "steps": "b", "step": {"text": "t"}}, "task: expected a dotted path"),
    ([1], "a field map is a JSON object"),
])
def test_a_bad_map_is_refused_naming_the_key(tmp_path, spec, message):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(spec))
    with pytest.raises(ValueError) as exc:
        mapping.load_map(path)
    assert str(exc.value).startswith(f"{path}: {message}")


def test_hook_by_file_path_returns_trajectories():
    fn = mapping.load_hook(f"{SAMPLES / 'custom_hook.py'}:convert")
    (out,) = mapping.run_hook(fn, records(SAMPLES / "hooked.jsonl")[0])
    assert out["task_id"] == "hk-shell-1" and out["task"] == "Count the lines of notes.txt (UTF-8: naïve, façade)."
    assert out["steps"][0]["action"] == {"tool": "sh", "arguments": {"command": "wc -l notes.txt"}}
    assert out["steps"][2]["action"] == {"text": "there are 13 lines."}


def test_hook_by_module_and_its_errors():
    assert mapping.load_hook("json:dumps") is json.dumps
    with pytest.raises(RunProblem) as exc:
        mapping.run_hook(mapping.load_hook(f"{SAMPLES / 'custom_hook.py'}:convert"), {"name": "x"})
    assert exc.value.where == "(hook)" and exc.value.message == "KeyError: 'turns'"
    with pytest.raises(RunProblem, match="expected a trajectory dict, got a string"):
        mapping.run_hook(lambda record: ["x"], {})
    for spec, message in (("nomodule_xyz:f", "cannot import nomodule_xyz"), ("json:nope", "has no function 'nope'"),
                          ("json", "expected module:function"), ("missing.py:f", "missing.py not found")):
        with pytest.raises(ValueError, match=message):
            mapping.load_hook(spec)
