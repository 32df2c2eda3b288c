"""The one JSON reader of every body the platform takes: REST bodies (the DRF parser of
api/parsers.py), the session login, websocket frames, ingest batches and dataset rows.

`json.loads` alone accepts what the rest of the platform cannot hold, and each of those
used to reach a server error somewhere further on:

- nesting thousands of levels deep: a RecursionError in the parser, or, a little under
  its limit, in whatever walks the value next (a deepcopy, a serializer, pydantic);
- a lone UTF-16 surrogate (`"\\udcff"`) or a NUL character: no UTF-8 encoding exists
  for the first, PostgreSQL refuses both in text and jsonb;
- NaN, Infinity and numbers that overflow a double (`1e400`): not JSON (RFC 8259), and
  PostgreSQL's jsonb refuses them;
- integers outside the signed 64-bit range: no database column holds them.

`json_parse` refuses each of these with a `JsonBodyError` naming where it is (`spec.train.
steps`), so every door answers 400 with the same sentence."""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 64  # a spec is 4 levels deep, a sample item a few more
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
# The hot path (an ingest batch of thousands of points) must not pay for finding paths, so
# a first pass only asks whether anything is wrong, and the walk that names it runs only
# then: integers are checked as they are parsed (a batch has few), strings only when the
# text has an escape that could make a NUL or a surrogate (raw ones are invalid JSON or
# invalid UTF-8), depth and non-finite floats in one pass over the containers.
_SUSPECT_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")
_INFINITIES = (math.inf, -math.inf)


def _shape_ok(value: Any) -> bool:
    """Whether `value` nests at most MAX_DEPTH deep and holds no NaN or infinity."""
    if type(value) is not dict and type(value) is not list:
        return not (type(value) is float and (value != value or value in _INFINITIES))
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        for child in node.values() if type(node) is dict else node:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, depth + 1))
            elif kind is float and (child != child or child in _INFINITIES):
                return False
    return True


class JsonBodyError(ValueError):
    """A body refused; `field` is the dotted path of the bad value, or None."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


def _no_constant(name: str) -> float:
    raise JsonBodyError(f"{name} is not a JSON number; send a finite number (or null)")


def _path(parts: tuple) -> str | None:
    return ".".join(str(p) for p in parts) or None


_BAD_CHARACTER = re.compile("[\x00\ud800-\udfff]")  # json.loads joins a surrogate *pair*


def _bad_string(value: str) -> str | None:
    found = _BAD_CHARACTER.search(value)
    if found is None:
        return None
    if found.group() == "\x00":
        return "must not contain a NUL character"
    return "must not contain a lone UTF-16 surrogate"


def _walk(value: Any) -> None:
    """Depth, strings and numbers of a parsed value, iteratively (no recursion to overflow)."""
    stack: list[tuple[Any, tuple, int]] = [(value, (), 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, dict):
            if depth >= MAX_DEPTH:
                raise JsonBodyError(f"nested deeper than {MAX_DEPTH} levels", _path(path))
            for key, child in node.items():
                problem = _bad_string(key)
                if problem:
                    raise JsonBodyError(f"a key {problem}", _path(path))
                stack.append((child, (*path, key), depth + 1))
        elif isinstance(node, list):
            if depth >= MAX_DEPTH:
                raise JsonBodyError(f"nested deeper than {MAX_DEPTH} levels", _path(path))
            stack.extend((child, (*path, i), depth + 1) for i, child in enumerate(node))
        elif isinstance(node, str):
            problem = _bad_string(node)
            if problem:
                raise JsonBodyError(problem, _path(path))
        elif isinstance(node, bool) or node is None:
            continue
        elif isinstance(node, int):
            if not INT_MIN <= node <= INT_MAX:
                raise JsonBodyError(
                    f"must be between {INT_MIN} and {INT_MAX} (a signed 64-bit integer)",
                    _path(path),
                )
        elif isinstance(node, float) and not math.isfinite(node):
            raise JsonBodyError("must be a finite number (this one overflows)", _path(path))


def json_parse(raw: bytes | str) -> Any:
    """The value of a JSON text, or JsonBodyError (see the module's docstring)."""
    if isinstance(raw, str):
        data = raw.encode("utf-8", "surrogatepass")
    else:
        data = raw
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise JsonBodyError("the body is not UTF-8") from None
    oversized: list[int] = []

    def parse_int(digits: str) -> int:
        # per integer, but a batch has few (steps, seqs): cheaper than searching the text;
        # the walk below then says where the oversized one is
        number = int(digits)
        if len(digits) > 18 and not INT_MIN <= number <= INT_MAX:
            oversized.append(number)
        return number

    try:
        value = json.loads(text, parse_constant=_no_constant, parse_int=parse_int)
    except RecursionError:
        raise JsonBodyError(f"nested deeper than {MAX_DEPTH} levels") from None
    except JsonBodyError:
        raise
    except ValueError as exc:  # JSONDecodeError, and ints over Python's digit limit
        raise JsonBodyError(f"the body is not JSON ({exc})") from None
    if oversized or _SUSPECT_ESCAPE.search(data) or not _shape_ok(value):
        _walk(value)  # finds what is wrong, and where
    return value
