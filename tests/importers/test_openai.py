"""OpenAI-style chat runs -> trajectories: every mapped field against the hand-written sample, and the error paths."""

from __future__ import annotations

import pytest

from interp.data.importers import openai
from interp.data.importers.common import RunContext, RunProblem, split_think

from ._support import SAMPLES, records

pytestmark = pytest.mark.unit

RUNS = {r["id"]: r for r in records(SAMPLES / "openai.jsonl")}


def convert(record, line: int = 1):
    ctx = RunContext(file="runs.jsonl", line=line, stem="runs")
    return openai.convert(record, ctx), ctx


def test_code_run_maps_reasoning_calls_results_and_final_message():
    out, ctx = convert(RUNS["oa-code-1"])
    assert (out["task_id"], out["domain"]) == ("oa-code-1", "code")
    assert out["system_prompt"] == "You are a coding agent. Réponds en anglais."
    assert out["task"] == "The café menu test fails: prices print as 3,5 € instead of 3.50 €. Fix menu/format.py."
    assert [t["name"] for t in out["tools"]] == ["read_file", "write_file", "run_tests"]
    assert out["tools"][0] == {"name": "read_file", "description": "Read a file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}
    assert out["steps"] == [
        {"reasoning": "The test prints a comma decimal, so a locale is involved.\n\n"
                      "I should run the failing test first to see the exact assertion.",
         "action": {"tool": "run_tests", "arguments": {"target": "tests/test_menu.py"}},
         "observation": "FAILED tests/test_menu.py::test_price - AssertionError: '3,5 €' != '3.50 €'"},
        # <think> in the content; parallel calls (object and JSON-string arguments) answered out of order
        {"reasoning": "The formatter probably uses locale.format_string with the system locale.\n\n"
                      "I will read the module and its config in parallel.",
         "action": {"calls": [{"tool": "read_file", "arguments": {"path": "menu/format.py"}},
                              {"tool": "read_file", "arguments": {"path": "menu/config.toml"}}]},
         "observation": ["def price(x):\n    return locale.format_string('%g €', x)\n",
                         "locale = \"fr_FR.UTF-8\"  # café des Champs"]},
        # content as a list of parts beside reasoning_content: kept as assistant_text; result as a list of parts
        {"reasoning": "Confirmed: '%g' drops the trailing zero and the French locale gives a comma.\n\n"
                      "The fix is an explicit '{:.2f} €' format, independent of the locale.",
         "action": {"tool": "write_file", "arguments": {"path": "menu/format.py",
                                                        "content": "def price(x):\n    return f'{x:.2f} €'\n"}},
         "observation": "wrote 2 lines\nmenu/format.py (UTF-8)", "assistant_text": "Writing the fix now."},
        {"reasoning": "Wait, I should re-run the test to confirm the fix before answering.",
         "action": {"tool": "run_tests", "arguments": {"target": "tests/test_menu.py"}}, "observation": "1 passed ✅"},
        {"reasoning": "The test passes now; summarise.",
         "action": {"text": "Fixed: prices now print as 3.50 € regardless of the locale."}, "observation": None},
    ]
    assert out["final_answer"] == "Fixed: prices now print as 3.50 € regardless of the locale."
    assert out["outcome"] == {"reward": 1.0, "success": True}
    assert out["metadata"] == {"run_meta": {"model": "some-model", "temperature": 0.2}}
    assert not ctx.dropped


def test_user_replies_are_the_observations_of_text_actions():
    out, ctx = convert(RUNS["oa-airline-1"])
    steps = out["steps"]
    assert steps[0]["action"] == {"text": "Sure, I can help. Could you confirm the passenger's last name?"}
    assert steps[0]["observation"] == "It's Müller."
    assert steps[1]["action"] == {"tool": "get_reservation", "arguments": {"code": "Q7Ä2"}}
    assert steps[-1]["observation"] == "Danke!" and out["final_answer"] == steps[-1]["action"]["text"]
    assert ctx.dropped == {"system messages after the first assistant turn": 1}
    assert "Reminder" not in str(out)


def test_visible_text_is_the_thought_when_there_is_no_reasoning_field():
    out, ctx = convert(RUNS["oa-web-1"])
    assert out["system_prompt"] == "You browse the web for the user."  # a developer message
    assert out["task"] == "Find the opening hours of the Musée d'Orsay on Mondays."  # image part dropped
    assert ctx.dropped == {"image_url content parts": 1, "messages[].name": 1}  # name: documented as dropped
    first, legacy = out["steps"][:2]
    assert first["reasoning"] == ("I will search for the museum's official page first.\n\n"
                                  "The official site is the most reliable source.")
    assert "assistant_text" not in first
    assert legacy == {"reasoning": "Open the official hours page.",
                      "action": {"tool": "open_url", "arguments": {"url": "https://www.musee-orsay.fr/fr/horaires"}},
                      "observation": "Ouvert de 9h30 à 18h. Fermé le lundi."}
    assert out["steps"][-1]["reasoning"] == "Both searches agree: closed on Mondays, no exception listed."


def test_empty_thoughts_give_empty_reasoning():
    out, _ = convert(RUNS["oa-empty-1"])
    assert [s["reasoning"] for s in out["steps"]] == [
        "", "All three pass.\n\nRead the config to report the Python version too.", ""]
    assert out["steps"][0]["action"] == {"tool": "run_tests", "arguments": {}}  # "" arguments
    assert out["steps"][2] == {"reasoning": "", "action": {"text": "All 3 tests pass on Python >= 3.11."},
                               "observation": None}


def test_a_bare_message_list_is_one_run_with_an_id_from_file_and_line():
    out, _ = convert(RUNS["oa-empty-1"]["messages"], line=7)
    assert out["task_id"] == "runs-7" and out["domain"] == "unknown" and out["tools"] == []
    assert len(out["steps"]) == 3


def _run(*assistant_and_tools):
    return {"messages": [{"role": "user", "content": "go"}, *assistant_and_tools]}


def _call(i, name="t", arguments="{}"):
    return {"id": i, "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.mark.parametrize("arguments, message", [
    ("{\"a\": 'x'}", "invalid JSON arguments: Expecting value at character 7 of '{\"a\": \\'x\\'}'"),
    ("[1, 2]", "arguments must be a JSON object, got a list"),
    ("{\"a\": 1", "invalid JSON arguments: Expecting ',' delimiter at character 8"),
])
def test_bad_arguments_name_the_field(arguments, message):
    record = _run({"role": "assistant", "content": "x", "tool_calls": [_call("a"), _call("b", arguments=arguments)]})
    with pytest.raises(RunProblem) as exc:
        convert(record)
    assert exc.value.where == "messages[1].tool_calls[1].function.arguments"
    assert exc.value.message.startswith(message)


def test_tool_results_match_open_calls_by_id():
    call = {"role": "assistant", "content": "x", "tool_calls": [_call("a"), _call("b")]}
    with pytest.raises(RunProblem) as exc:
        convert(_run(call, {"role": "tool", "tool_call_id": "z", "content": "?"}))
    assert exc.value.where == "messages[2]" and "'z'" in exc.value.message and "'a', 'b'" in exc.value.message
    with pytest.raises(RunProblem) as exc:  # one of two parallel calls answered
        convert(_run(call, {"role": "tool", "tool_call_id": "b", "content": "B"}))
    assert exc.value.where == "messages[1]" and "parallel call 0 of 2" in exc.value.message
    out, _ = convert(_run(call))  # a run cut off after the turn: no results at all
    assert out["steps"][0]["observation"] is None
    out, _ = convert(_run(call, {"role": "tool", "content": "A"}, {"role": "tool", "content": "B"}))  # no ids: in order
    assert out["steps"][0]["observation"] == ["A", "B"]


@pytest.mark.parametrize("record, where, message", [
    ({"messages": [{"role": "user", "content": "go"}]}, "messages", "no assistant turn"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}]},
     "messages", "no user text before the first"),
    ({"messages": [{"role": "user", "content": "go"}, {"role": "robot"}]}, "messages[1].role", "unknown role 'robot'"),
    ({"messages": "hello"}, "messages", "expected a list of chat messages, got a string"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "expected a string or a list"),
])
def test_malformed_runs_name_the_field(record, where, message):
    with pytest.raises(RunProblem) as exc:
        convert(record)
    assert exc.value.where == where and exc.value.message.startswith(message)


@pytest.mark.parametrize("text, reasoning, rest", [
    ("<think>\nplan\n</think>\n\nanswer", "plan", "answer"),
    ("plan only\n</think>\n\nanswer", "plan only", "answer"),  # the template opened <think> in the prompt
    ("answer <think>\ncut off", "cut off", "answer "),  # an unclosed section runs to the end
    ("<think>a</think>mid<think>\nb\n</think>end", "a\n\nb", "midend"),
    ("<think>\n\n</think>\n\nanswer", "", "answer"),
    ("  no tags  ", "", "  no tags  "),
])
def test_split_think(text, reasoning, rest):
    assert split_think(text) == (reasoning, rest)


def test_reasoning_field_and_output_text_parts():
    record = _run({"role": "assistant", "reasoning_content": None, "reasoning": "think first",
                   "content": [{"type": "output_text", "text": "done"}, {"type": "input_audio", "input_audio": {}}]})
    out, ctx = convert(record)
    assert out["steps"] == [{"reasoning": "think first", "action": {"text": "done"}, "observation": None}]
    assert ctx.dropped == {"input_audio content parts": 1}
