"""docs/ingest-protocol.md names only error codes and event types that the code has.

The page is what a client is written against, so a code it lists that no longer exists (or
an event type renamed) is a client bug waiting. The code is searched as text for the quoted
name, so the check holds wherever the ingest service and its schema live."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "ingest-protocol.md"
# an error table's row: | 409 | `run_finished` | …
ERROR_ROW = re.compile(r"^\|\s*(\d{3})\s*\|\s*`([a-z_]+)`\s*\|", re.M)
# a row of the events table (the first table of the "### Events" section): | `metric` | …
EVENT_ROW = re.compile(r"^\|\s*`([a-z_]+)`\s*\|", re.M)


def _code_text() -> str:
    files = [*(REPO / "platform").rglob("*.py"), *(REPO / "workers").rglob("*.py")]
    return "\n".join(p.read_text(encoding="utf-8") for p in files if "migrations" not in p.parts)


def _quoted(name: str, text: str) -> bool:
    return f'"{name}"' in text or f"'{name}'" in text


def documented_events() -> set[str]:
    section = DOC.read_text(encoding="utf-8").split("### Events", 1)[1]
    table = next(block for block in section.split("\n\n") if block.startswith("|"))
    body = "\n".join(table.splitlines()[2:])  # below the header row and its rule
    return set(EVENT_ROW.findall(body))


def test_the_doc_lists_errors_and_events():
    assert len(ERROR_ROW.findall(DOC.read_text(encoding="utf-8"))) >= 15
    assert documented_events() == {"metric", "log", "status", "checkpoint", "samples", "preflight"}


def test_every_error_code_in_the_doc_is_one_the_code_answers():
    code = _code_text()
    missing = sorted({c for _, c in ERROR_ROW.findall(DOC.read_text(encoding="utf-8"))
                      if not _quoted(c, code)})  # fmt: skip
    assert not missing, f"docs/ingest-protocol.md lists codes no code raises: {missing}"


def test_every_event_type_in_the_doc_is_one_the_schema_takes():
    code = _code_text()
    missing = sorted(
        t for t in documented_events() if not re.search(rf'Literal\[\s*"{t}"\s*\]', code)
    )
    assert not missing, f"event types of the doc without a schema model: {missing}"
