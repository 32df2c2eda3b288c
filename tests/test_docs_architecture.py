"""docs/architecture.md's module map names every module of the control plane, the data
plane and the client, and no module that is gone; its table of the data plane's layers is
the one the imports are held to: a new engineer reads the map first, so a module missing
from it (or one it still lists after a move, or a layer drawn otherwise) sends them the
wrong way."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_import_graph import LAYERS

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
ROOTS = (REPO / "platform" / "paddock", REPO / "workers", REPO / "paddock_client")
# boilerplate every Django app or package has; the map names what holds something
UNLISTED = {"__init__.py", "apps.py", "admin.py"}
NAMED_MODULE = re.compile(r"`([\w/]+\.py)(?::\w+)?`")


def modules() -> list[Path]:
    return sorted(
        p
        for root in ROOTS
        for p in root.rglob("*.py")
        if p.name not in UNLISTED and "migrations" not in p.parts
    )


def test_every_module_is_in_the_map():
    text = DOC.read_text(encoding="utf-8")
    named = set(NAMED_MODULE.findall(text))
    missing = [
        str(p.relative_to(REPO))
        for p in modules()
        if not any(str(p).endswith("/" + name) for name in named)
    ]
    assert not missing, f"modules docs/architecture.md does not name: {missing}"


def test_every_module_the_map_names_exists():
    paths = [str(p) for root in ROOTS for p in root.rglob("*.py")]
    paths += [str(p) for p in (REPO / "tests").rglob("*.py")] + [str(p) for p in REPO.glob("*.py")]
    named = set(NAMED_MODULE.findall(DOC.read_text(encoding="utf-8")))
    assert len(named) > 50, "the pattern no longer finds the map's modules"
    gone = sorted(n for n in named if not any(p.endswith("/" + n) for p in paths))
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"


def test_the_layers_table_is_the_import_graphs():
    """The data plane's layers as the doc draws them (the top layer first, numbered down to
    1) are tests/test_import_graph.py's LAYERS, which every import is held to."""
    section = DOC.read_text(encoding="utf-8").split("### Layers\n", 1)[1].split("\n### ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", section, re.M)
    drawn = [tuple(re.findall(r"`([\w.]+)`", units)) for _, units in rows]
    assert [int(n) for n, _ in rows] == list(range(len(rows), 0, -1)), rows
    assert drawn[::-1] == list(LAYERS), "docs/architecture.md's layers are not LAYERS"
