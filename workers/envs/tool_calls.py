"""Tool calls as chat templates write them, parsed per model family.

A model that was given `tools=` by its own chat template answers a call in its family's
format; the parser turns the text of one model turn into the calls it makes, each either
well formed (a name and a JSON object of arguments) or an error that the episode answers as
an error observation and counts (`env/tool_errors`):

- `hermes` (Qwen 2.5/3, Hermes, most templates that say `<tool_call>`): one or more
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks after optional text;
- `llama3` (Llama 3.1+ JSON tool calling): the whole reply is one JSON object
  `{"name": ..., "parameters": {...}}` (or `"arguments"`), optionally after
  `<|python_tag|>`; several may be separated by `;`.

`format_for_template` picks the family from the model's chat template (`auto`).
Pure functions: no tokenizer, no model.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

ToolFormat = Literal["hermes", "llama3"]
TOOL_FORMATS: tuple[ToolFormat, ...] = ("hermes", "llama3")


@dataclass(frozen=True)
class ToolCall:
    """One call the model made: `name` and `arguments`, or `error` saying why it is not
    a call that can be run (the raw text is kept for the inspector)."""

    name: str | None
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    raw: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class ParsedTurn:
    content: str  # the reply's text outside the calls
    calls: tuple[ToolCall, ...]


_HERMES_OPEN, _HERMES_CLOSE = "<tool_call>", "</tool_call>"
_HERMES = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)
_PYTHON_TAG = "<|python_tag|>"


def format_for_template(chat_template: str | None) -> ToolFormat:
    """The tool-call family a chat template writes: Llama 3's when the template speaks of
    `<|python_tag|>` or an `ipython` role, else the `<tool_call>` blocks most templates
    (Qwen, Hermes, the local chat model) use."""
    text = chat_template or ""
    if _PYTHON_TAG in text or "ipython" in text:
        return "llama3"
    return "hermes"


def _call_from_json(raw: str, args_keys: tuple[str, ...]) -> ToolCall:
    try:
        obj = json.loads(raw)
    except ValueError as exc:
        return ToolCall(None, error=f"the tool call is not JSON ({exc.msg})", raw=raw)
    if not isinstance(obj, dict):
        return ToolCall(None, error="the tool call is not a JSON object", raw=raw)
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall(None, error='the tool call has no "name"', raw=raw)
    args: Any = {}
    for key in args_keys:
        if key in obj:
            args = obj[key]
            break
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except ValueError:
            return ToolCall(name, error=f"the arguments of {name} are not JSON", raw=raw)
    if not isinstance(args, dict):
        return ToolCall(name, error=f"the arguments of {name} are not a JSON object", raw=raw)
    return ToolCall(name, args, raw=raw)


def parse_hermes(text: str) -> ParsedTurn:
    calls, content = [], []
    at = 0
    for m in _HERMES.finditer(text):
        content.append(text[at : m.start()])
        at = m.end()
        raw = m.group(1).strip()
        if not m.group(2):
            calls.append(ToolCall(None, error="a <tool_call> block is not closed", raw=raw))
        else:
            calls.append(_call_from_json(raw, ("arguments", "parameters")))
    content.append(text[at:])
    rest = "".join(content)
    if _HERMES_CLOSE in rest:  # a closing tag without its opening one
        calls.append(ToolCall(None, error="</tool_call> without <tool_call>", raw=rest.strip()))
        rest = rest.replace(_HERMES_CLOSE, "")
    return ParsedTurn(rest.strip(), tuple(calls))


def parse_llama3(text: str) -> ParsedTurn:
    body = text.strip()
    tagged = body.startswith(_PYTHON_TAG)
    if tagged:
        body = body[len(_PYTHON_TAG) :].strip()
    if not body.startswith("{"):
        if tagged:  # the tag announces a call: what follows must be one
            return ParsedTurn("", (ToolCall(None, error="no JSON after <|python_tag|>", raw=body),))
        return ParsedTurn(body, ())
    parts = [p for p in _split_top_level(body, ";") if p.strip()]
    return ParsedTurn(
        "", tuple(_call_from_json(p.strip(), ("parameters", "arguments")) for p in parts)
    )


def _split_top_level(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside JSON strings and brackets."""
    parts, depth, in_str, escape, start = [], 0, False, False, 0
    for i, ch in enumerate(text):
        if in_str:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


PARSERS = {"hermes": parse_hermes, "llama3": parse_llama3}


def parse_tool_calls(text: str, fmt: ToolFormat) -> ParsedTurn:
    return PARSERS[fmt](text)


def check_call(call: ToolCall, tools: dict[str, dict]) -> ToolCall:
    """`call` checked against the offered tools' OpenAI schemas (`name` → function schema):
    an unknown name, a missing required argument or an argument the schema does not declare
    makes it an error."""
    if not call.ok:
        return call
    fn = tools.get(call.name or "")
    if fn is None:
        offered = ", ".join(sorted(tools)) or "none"
        return ToolCall(
            call.name, call.arguments, f"no tool named {call.name!r} (offered: {offered})", call.raw
        )
    params = fn.get("parameters") or {}
    props = params.get("properties") or {}
    missing = [k for k in params.get("required") or () if k not in call.arguments]
    if missing:
        return ToolCall(
            call.name,
            call.arguments,
            f"{call.name}: missing argument(s) {', '.join(missing)}",
            call.raw,
        )
    if props:
        extra = [k for k in call.arguments if k not in props]
        if extra:
            return ToolCall(
                call.name,
                call.arguments,
                f"{call.name}: unknown argument(s) {', '.join(extra)}",
                call.raw,
            )
    return call


def function_schema(tool: dict) -> dict:
    """The function part of an OpenAI tool schema (`{"type": "function", "function": {...}}`
    or the function object itself)."""
    return tool["function"] if tool.get("type") == "function" and "function" in tool else tool
