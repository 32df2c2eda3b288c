"""The seam, as imports: the control plane takes from `workers` only its three light modules
(spec, events, names), and the data plane never imports Django, the control plane or the
client package. Read from the source (every import, at any depth of a function), so an
import inside a function is caught as well as one at the top."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEAM = {"workers.spec", "workers.events", "workers.names"}
# what the data plane must never import: Django and what runs on it, the control plane's
# package, and the API client / CLI package (which imports neither half)
FORBIDDEN_IN_WORKERS = {"django", "rest_framework", "channels", "celery", "paddock",
                        "paddock_client"}  # fmt: skip


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import; `from a import b` counts as `a.b` too, so
    `from workers import names` reads as workers.names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _sources(root: str) -> list[Path]:
    return sorted(p for p in (REPO / root).rglob("*.py") if "node_modules" not in p.parts)


def test_the_platform_imports_from_workers_only_the_seam_modules():
    wrong = []
    for path in _sources("platform"):
        for line, module in _imports(path):
            top = module.split(".")
            if top[0] != "workers" or len(top) == 1:
                continue  # `from workers import x` is judged as workers.x
            if ".".join(top[:2]) not in SEAM:
                wrong.append(f"{path.relative_to(REPO)}:{line}: {module}")
    assert not wrong, f"the control plane imports workers beyond {sorted(SEAM)}: {wrong}"


def test_workers_never_import_django_the_platform_or_the_client():
    wrong = [
        f"{path.relative_to(REPO)}:{line}: {module}"
        for path in _sources("workers")
        for line, module in _imports(path)
        if module.split(".")[0] in FORBIDDEN_IN_WORKERS
    ]
    assert not wrong, f"the data plane imports what it must not: {wrong}"


def test_the_seam_modules_load_without_torch_or_an_engine():
    """What the control plane imports pulls nothing heavy in, transitively."""
    probe = (
        "import sys, workers.spec, workers.events, workers.names\n"
        "heavy = {'torch', 'transformers', 'peft', 'ray', 'vllm', 'tensorrt_llm', 'django'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
