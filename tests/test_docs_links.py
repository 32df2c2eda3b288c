"""The README starts with the two commands a new user runs, and the Markdown docs link only
to files that exist inside the repository (a link out of the checkout, to the team's notes
say, leaves a reader with nothing)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
# [text](target) and [text](target "title"); images too
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
SKIPPED = {".git", ".venv", "node_modules", ".paddock", ".make"}


def markdown_files() -> list[Path]:
    return sorted(
        p for p in REPO.rglob("*.md") if not SKIPPED.intersection(p.relative_to(REPO).parts)
    )


def test_the_readme_starts_with_make_up_then_make_test():
    blocks = FENCE.findall((REPO / "README.md").read_text(encoding="utf-8"))
    assert [b.strip() for b in blocks[:2]] == ["make up", "make test"]


def test_relative_links_name_files_inside_the_repository():
    broken, checked = [], 0
    for doc in markdown_files():
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL (https:, mailto:) or an anchor of the same page
            checked += 1
            path = (doc.parent / target.split("#", 1)[0]).resolve()
            if not path.is_relative_to(REPO) or not path.exists():
                broken.append(f"{doc.relative_to(REPO)}: {target}")
    assert checked > 20, "the link pattern no longer finds the docs' links"
    assert not broken, f"links to nothing inside the repository: {broken}"


def test_nothing_points_at_the_teams_notes_outside_the_repository():
    hits = [
        str(p.relative_to(REPO))
        for p in markdown_files()
        if "../shared/" in p.read_text(encoding="utf-8")
    ]
    assert not hits, f"references to ../shared/: {hits}"
