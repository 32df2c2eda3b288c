"""docs/errors.md lists every error code the platform answers with, and nothing else: each
`ErrorCode` appears there once with its status and meaning, and every code the page names
is a member. Every `DomainError(...)` in the control plane names its code as an `ErrorCode`
member (`DomainError(ErrorCode.NOT_FOUND, …)`), never as a string, and no module but
`core/errors.py` writes the error body's dict by hand, so the enum is the whole catalogue."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from paddock.core.errors import ErrorCode

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "errors.md"
PLATFORM = REPO / "platform" / "paddock"
# a table row: | `code` | status | meaning | what to do |  (a `\|` inside a cell is a pipe)
ROW = re.compile(r"^\|\s*`([a-z_]+)`\s*\|\s*(\d{3})\s*\|(.*)$")


def _cells(rest: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", rest)]


def _rows() -> dict[str, tuple[int, str, str]]:
    rows: dict[str, tuple[int, str, str]] = {}
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match is None:
            continue
        code, status, rest = match[1], int(match[2]), _cells(match[3])
        assert code not in rows, f"docs/errors.md lists {code} twice"
        rows[code] = (status, rest[0], rest[1] if len(rest) > 1 else "")
    return rows


def test_every_error_code_is_documented_with_its_status_and_meaning():
    rows = _rows()
    missing = [code.value for code in ErrorCode if code.value not in rows]
    assert not missing, f"codes not in docs/errors.md: {missing}"
    for code in ErrorCode:
        status, meaning, todo = rows[code.value]
        assert status == code.status, f"{code}: the page says {status}, the code {code.status}"
        assert meaning.replace("`", "") == code.meaning, (code, meaning, code.meaning)
        assert todo, f"{code}: say what to do"


def test_the_page_names_no_code_the_platform_does_not_answer_with():
    unknown = sorted(set(_rows()) - {code.value for code in ErrorCode})
    assert not unknown, f"docs/errors.md lists codes that are not ErrorCode members: {unknown}"


def _sources() -> list[Path]:
    return sorted(p for p in PLATFORM.rglob("*.py") if "migrations" not in p.parts)


def test_every_domain_error_names_an_error_code_member():
    wrong = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "DomainError"):
                continue
            code = node.args[0] if node.args else None
            named = (
                isinstance(code, ast.Attribute)
                and isinstance(code.value, ast.Name)
                and code.value.id == "ErrorCode"
                and code.attr in ErrorCode.__members__
            )
            if not named:
                where = f"{path.relative_to(REPO)}:{node.lineno}"
                wrong.append(f"{where}: {ast.unparse(code) if code else '(none)'}")
    assert not wrong, f"DomainError(...) with a code that is not ErrorCode.X: {wrong}"


def test_no_module_writes_the_error_body_by_hand():
    """A dict literal with both `code` and `message` keys is an error body written out;
    `error_body` (core/errors.py) is the one place that builds it."""
    wrong = []
    for path in _sources():
        if path == PLATFORM / "core" / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                if {"code", "message"} <= keys:
                    wrong.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not wrong, f"error bodies built by hand instead of with error_body: {wrong}"
