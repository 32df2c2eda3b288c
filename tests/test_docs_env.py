"""Every environment variable the code reads is documented in docs/configuration.md, and
every Paddock variable named there is read by the code (a documented setting that does
nothing misleads more than a missing one).

The code is read, not the deployment files (tests/deploy/test_env_docs.py checks those): a
variable is "read" where Python calls `os.environ.get`/`[]`/`setdefault`/`pop`, `os.getenv`,
an `env_*` helper (`env_flag("PADDOCK_DEBUG")`), or tests `"NAME" in os.environ` (also
through a name bound to `os.environ`), and where a shell script expands `${NAME:-…}`. Every
Python and shell file of the repository counts except the test suite, the benchmarks and the
browser app, so a module added anywhere is covered without editing this test."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIGURATION = REPO / "docs" / "configuration.md"
# Not the product's code: the suite and benchmarks read their own knobs (OUT, CI, …), and
# the browser app reads none at run time.
SKIPPED_TOP = {"tests", "bench", "frontend", "docs", "examples"}
SKIPPED_ANY = {"node_modules", "__pycache__", "build", "dist", "runs"}
ENV_NAME = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*$")
# Paddock's own variables
OWN = re.compile(r"^(PADDOCK_\w+|DATABASE_URL|REDIS_URL|RAY_ADDRESS)$")
# a variable is documented where the page names it in backticks: a table row, or the prose
# about the variables the platform sets for a job and those of other tools that are honoured
MENTION = re.compile(r"`([A-Z][A-Z0-9_]*)`")
SHELL_READ = re.compile(r"\$\{([A-Z][A-Z0-9_]*)(?::?[-=?+])")
ENVIRON_METHODS = {"get", "setdefault", "pop"}


def _is_environ(node: ast.AST, aliases: set[str]) -> bool:
    """`os.environ`, a bare `environ` (from os import environ), or a name bound to one."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and (node.id == "environ" or node.id in aliases)


def _name(node: ast.AST | None) -> str | None:
    is_text = isinstance(node, ast.Constant) and isinstance(node.value, str)
    return node.value if is_text and ENV_NAME.match(node.value) else None


def _callee(func: ast.AST) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def python_env_reads(source: str) -> set[str]:
    tree = ast.parse(source)
    aliases = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and _is_environ(node.value, set())
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func, first = node.func, _name(node.args[0])
            if first is None:
                continue
            environ_method = (
                isinstance(func, ast.Attribute)
                and func.attr in ENVIRON_METHODS
                and _is_environ(func.value, aliases)
            )
            helper = _callee(func) == "getenv" or re.match(r"^env(_\w+)?$", _callee(func))
            if environ_method or helper:
                found.add(first)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if _is_environ(node.value, aliases) and (name := _name(node.slice)):
                found.add(name)
        elif (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.In | ast.NotIn)
            and _is_environ(node.comparators[0], aliases)
            and (name := _name(node.left))
        ):
            found.add(name)
    return found


def shell_env_reads(source: str) -> set[str]:
    return set(SHELL_READ.findall(source))


def code_files(top: Path = REPO) -> list[Path]:
    files = []
    for root, dirs, names in os.walk(top):
        rel = Path(root).relative_to(REPO)
        dirs[:] = [
            d
            for d in dirs
            if not d.startswith(".")
            and d not in SKIPPED_ANY
            and not d.endswith(".egg-info")
            and not (rel == Path(".") and d in SKIPPED_TOP)
        ]
        files += [Path(root) / n for n in names if n.endswith((".py", ".sh"))]
    return sorted(files)


def env_reads(top: Path = REPO) -> dict[str, set[str]]:
    """Variable → the files (relative to the repository) that read it."""
    reads: dict[str, set[str]] = {}
    for path in code_files(top):
        text = path.read_text(encoding="utf-8")
        names = python_env_reads(text) if path.suffix == ".py" else shell_env_reads(text)
        for name in names:
            reads.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return reads


def test_the_scanner_sees_every_way_of_reading():
    source = """
import os
from os import environ
env = os.environ
a = os.environ.get("A_ONE")
b = os.environ["B_ONE"]
c = os.getenv("C_ONE", "x")
os.environ.setdefault("D_ONE", "1")
e = env.get("E_ONE")
f = env["F_ONE"]
g = "G_ONE" in os.environ
h = env_flag("H_ONE")
i = environ.pop("I_ONE", None)
os.environ["WRITTEN"] = "1"
copy = dict(os.environ)
settings_value = getattr(settings, "NOT_ENV", 1)
"""
    expected = {f"{c}_ONE" for c in "ABCDEFGHI"}
    assert python_env_reads(source) == expected
    assert shell_env_reads("V=${VLLM_X:-1}\nW=${OTHER}\nX=${SET_ME:=2}") == {"VLLM_X", "SET_ME"}


def test_the_scan_finds_the_known_settings():
    # a scanner that found nothing would pass the tests below vacuously
    reads = env_reads()
    for name in ("PADDOCK_HOME", "DATABASE_URL", "REDIS_URL", "RAY_ADDRESS", "PADDOCK_URL",
                 "PADDOCK_BOOTSTRAP_TOKEN"):  # fmt: skip
        assert name in reads, f"the scan no longer sees {name}: {sorted(reads)}"


def documented() -> set[str]:
    return set(MENTION.findall(CONFIGURATION.read_text(encoding="utf-8")))


def test_every_variable_the_code_reads_is_documented():
    known = documented()
    missing = {name: sorted(files) for name, files in env_reads().items() if name not in known}
    assert not missing, f"read by the code but not named in docs/configuration.md: {missing}"


def test_every_paddock_variable_documented_is_read():
    # the test suite's own knobs (the chaos run's size, say) are documented there too
    read = set(env_reads()) | set(env_reads(REPO / "tests"))
    stale = {name for name in documented() if OWN.match(name)} - read
    assert not stale, f"docs/configuration.md names variables no code reads: {sorted(stale)}"
