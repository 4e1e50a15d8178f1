"""Reading generated turns: well-formed, missing closing tags, several calls, Qwen3.5 XML, garbage."""

from __future__ import annotations

import pytest

from interp.data.parse import parse_turn
from interp.data.render import fallback_tool_call_text
from interp.data.trajectory import ToolCall

pytestmark = pytest.mark.unit


def test_well_formed_turn():
    turn = parse_turn('<think>\nRead the helper.\n</think>\n\n<tool_call>\n'
                      '{"name": "read_file", "arguments": {"path": "utils/dates.py"}}\n</tool_call>')
    assert turn.status == "ok" and not turn.parse_failure
    assert turn.reasoning == "Read the helper."
    assert turn.calls == (ToolCall("read_file", {"path": "utils/dates.py"}),)
    assert turn.text == ""


def test_reads_back_the_fallback_render_format():
    text = "<think>\nx\n</think>\n\n" + fallback_tool_call_text("write_file", {"path": "a.py", "content": "</tool_call>?"})
    assert parse_turn(text).calls == (ToolCall("write_file", {"path": "a.py", "content": "</tool_call>?"}),)


@pytest.mark.parametrize("text, reasoning", [
    ('<think>\nplan\n<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>', "plan"),  # no </think>
    ('plan\n</think>\n<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>', "plan"),  # template opened it
    ('<think>plan</think><tool_call>{"name": "run_tests", "arguments": {}}', "plan"),  # no </tool_call>
    ('<tool_call>\n{"name": "run_tests", "arguments": "{}"}\n</tool_call>', None),  # arguments as a JSON string
])
def test_missing_closing_tags_are_tolerated(text, reasoning):
    turn = parse_turn(text)
    assert turn.status == "ok"
    assert turn.reasoning == reasoning
    assert turn.calls == (ToolCall("run_tests", {}),)


def test_multiple_calls_and_trailing_text():
    turn = parse_turn('<think>a</think>\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}\n</tool_call>\n'
                      '<tool_call>\n{"name": "read_file", "arguments": {"path": "b"}} trailing\n'
                      '<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>\nDone.')
    assert [c.arguments.get("path") for c in turn.calls] == ["a", "b", None]
    assert turn.text == "Done."


def test_one_bad_call_among_good_ones_is_kept_aside():
    turn = parse_turn('<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": </tool_call>')
    assert turn.status == "ok" and len(turn.calls) == 1 and turn.bad_calls == ['{"name": ']


def test_qwen35_xml_function_format():
    turn = parse_turn("<think>x</think>\n<tool_call>\n<function=read_file>\n<parameter=path>\nutils/dates.py\n"
                      "</parameter>\n<parameter=start_line>\n3\n</parameter>\n</function>\n</tool_call>")
    assert turn.calls == (ToolCall("read_file", {"path": "utils/dates.py", "start_line": 3}),)


def test_plain_text_is_a_text_action():
    turn = parse_turn("<think>done</think>\n\nAll tests pass.")
    assert (turn.status, turn.text, turn.parse_failure) == ("text", "All tests pass.", False)


@pytest.mark.parametrize("text, error", [
    ('<tool_call>\n{"name": "read_file", "arguments": {"path": \n</tool_call>', "none readable"),  # broken JSON
    ("<tool_call>\nread the file please\n</tool_call>", "none readable"),  # no JSON at all
    ('<tool_call>["read_file"]</tool_call>', "none readable"),  # not an object
    ('<tool_call>{"arguments": {}}</tool_call>', "none readable"),  # no name
    ('<tool_call>{"name": "x", "arguments": [1]}</tool_call>', "none readable"),  # arguments not an object
    ("<think>\nI should first look at", "no action after the reasoning"),  # cut off inside the reasoning
    ("", "empty output"),
    ("  \n ", "empty output"),
])
def test_garbage_is_a_parse_failure(text, error):
    turn = parse_turn(text)
    assert turn.parse_failure and turn.status == "failure" and not turn.calls
    assert error in turn.error
