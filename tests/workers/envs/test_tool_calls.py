"""Tool calls as the chat templates write them: the parsers per model family, and the check
of a call against the offered tools (pure functions)."""

from __future__ import annotations

import asyncio

import pytest

from workers.envs import Toolbox, format_for_template, parse_tool_calls
from workers.envs.calculator import ADD_TOOL
from workers.envs.tool_calls import ToolCall, check_call

ADD = {"add": ADD_TOOL["function"]}


def test_hermes_calls_and_the_text_around_them():
    text = (
        'Let me add.<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
        '<tool_call>{"name": "add", "arguments": "{\\"a\\": 3, \\"b\\": 4}"}</tool_call> ok'
    )
    got = parse_tool_calls(text, "hermes")
    assert got.content == "Let me add. ok"
    assert [(c.name, c.arguments, c.ok) for c in got.calls] == [
        ("add", {"a": 1, "b": 2}, True),
        ("add", {"a": 3, "b": 4}, True),  # arguments written as a JSON string
    ]
    assert parse_tool_calls("\\boxed{3}", "hermes").calls == ()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('<tool_call>{"name": "add", "arguments": {"a": 1', "not closed"),
        ("<tool_call>{name: add}</tool_call>", "not JSON"),
        ('<tool_call>["add"]</tool_call>', "not a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'no "name"'),
        ('<tool_call>{"name": "add", "arguments": [1, 2]}</tool_call>', "not a JSON object"),
        ('{"name": "add"}</tool_call>', "without <tool_call>"),
    ],
)
def test_malformed_hermes_calls_are_errors(text, error):
    calls = parse_tool_calls(text, "hermes").calls
    assert len(calls) == 1 and not calls[0].ok and error in calls[0].error


def test_llama3_json_calls():
    one = parse_tool_calls('{"name": "add", "parameters": {"a": 1, "b": 2}}', "llama3")
    assert [(c.name, c.arguments) for c in one.calls] == [("add", {"a": 1, "b": 2})]
    two = parse_tool_calls(
        '<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": 2}}; '
        '{"name": "add", "parameters": {"a": "x;y", "b": 0}}',
        "llama3",
    )
    assert [c.arguments for c in two.calls] == [{"a": 1, "b": 2}, {"a": "x;y", "b": 0}]
    assert parse_tool_calls("The sum is 3.", "llama3").calls == ()
    bad = parse_tool_calls("<|python_tag|>add(1, 2)", "llama3").calls
    assert len(bad) == 1 and not bad[0].ok


def test_the_family_is_read_from_the_template():
    assert (
        format_for_template("{{ '<|im_start|>' }}{% if tools %}<tool_call>{% endif %}") == "hermes"
    )
    assert format_for_template("{{ '<|python_tag|>' }} ipython") == "llama3"
    assert format_for_template(None) == "hermes"


def test_calls_are_checked_against_the_offered_tools():
    ok = check_call(ToolCall("add", {"a": 1, "b": 2}), ADD)
    assert ok.ok
    assert "no tool named 'mul'" in check_call(ToolCall("mul", {"a": 1}), ADD).error
    assert "missing argument(s) b" in check_call(ToolCall("add", {"a": 1}), ADD).error
    assert (
        "unknown argument(s) c" in check_call(ToolCall("add", {"a": 1, "b": 2, "c": 3}), ADD).error
    )


def test_a_toolbox_answers_each_call_and_counts_the_errors():
    async def add(a: int, b: int) -> int:
        return a + b

    def div(a: int, b: int) -> float:  # a blocking tool: run in a thread
        return a / b

    div_schema = {"type": "function", "function": {"name": "div", "parameters": {
        "type": "object", "properties": {"a": {}, "b": {}}, "required": ["a", "b"]}}}  # fmt: skip
    box = Toolbox({"add": (ADD_TOOL, add), "div": (div_schema, div)})
    calls = parse_tool_calls(
        '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
        '<tool_call>{"name": "div", "arguments": {"a": 1, "b": 0}}</tool_call>'
        "<tool_call>{oops}</tool_call>",
        "hermes",
    ).calls
    obs = asyncio.run(box.answer(calls))
    assert [m["content"] for m in obs.messages] == [
        "3",
        "error: ZeroDivisionError: division by zero",
        "error: the tool call is not JSON (Expecting property name enclosed in double quotes)",
    ]
    assert (obs.tool_calls, obs.tool_errors, obs.done) == (3, 2, False)
