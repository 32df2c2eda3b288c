"""deploy/compose.yaml: parses, has every service with a health check, volumes and the
ordering the platform needs. (Docker cannot run here: nothing is started.)"""

from __future__ import annotations

import re
from urllib.parse import urlparse

import pytest

from .conftest import DEPLOY, REPO, load_yaml

PLATFORM = {"migrate", "web", "worker", "beat"}
RAY = {"ray-head", "ray-worker"}
SERVICES = {"postgres", "redis", *PLATFORM, *RAY}
PINNED = re.compile(r"^[a-z0-9./-]+:(?!latest$)[0-9][\w.-]*$|@sha256:[0-9a-f]{64}$")


def test_every_service_is_there(compose):
    assert set(compose["services"]) == SERVICES


def test_health_checks(compose):
    for name, service in compose["services"].items():
        check = service.get("healthcheck", {})
        if name == "migrate":  # a one-shot container: compose waits for it to complete
            assert check.get("disable") is True
            continue
        assert check.get("test"), f"{name} has no health check"


def test_platform_waits_for_migrations_and_services(compose):
    services = compose["services"]
    migrate = services["migrate"]["depends_on"]
    assert migrate["postgres"]["condition"] == "service_healthy"
    assert migrate["redis"]["condition"] == "service_healthy"
    for name in ("web", "worker", "beat"):
        deps = services[name]["depends_on"]
        assert deps["migrate"]["condition"] == "service_completed_successfully", name
    assert services["ray-worker"]["depends_on"]["ray-head"]["condition"] == "service_healthy"
    assert "migrate" in " ".join(services["migrate"]["command"])


def test_images_are_pinned_or_built_here(compose):
    for name, service in compose["services"].items():
        image = service["image"]
        assert not image.endswith(":latest") and ":" in image, f"{name}: {image}"
        if "build" in service:
            build = service["build"]
            context = (DEPLOY / build["context"]).resolve()
            assert context == REPO, name
            assert (context / build["dockerfile"]).is_file(), name
        else:
            assert PINNED.search(image), f"{name}: {image} is not pinned to a version"


def test_platform_and_ray_images(compose):
    services = compose["services"]
    for name in PLATFORM:
        assert services[name]["build"]["dockerfile"] == "deploy/docker/platform.Dockerfile"
    for name in RAY:
        assert services[name]["build"]["dockerfile"] == "deploy/docker/worker.Dockerfile"
    assert services["worker"]["command"][:4] == ["celery", "-A", "paddock", "worker"]
    assert services["beat"]["command"][:4] == ["celery", "-A", "paddock", "beat"]


def test_named_volumes_are_declared(compose):
    declared = set(compose["volumes"])
    used = set()
    for service in compose["services"].values():
        for mount in service.get("volumes", []):
            source = mount.split(":", 1)[0]
            if not source.startswith((".", "/")):
                used.add(source)
    assert used == declared
    assert "pgdata" in used and "redisdata" in used


def test_secrets_are_required_not_defaulted():
    text = (DEPLOY / "compose.yaml").read_text()
    for name in ("PADDOCK_SECRET_KEY", "POSTGRES_PASSWORD", "RAY_AUTH_TOKEN",
                 "PADDOCK_ADMIN_PASSWORD"):  # fmt: skip
        uses = re.findall(rf"\$\{{{name}([^}}]*)\}}", text)
        assert uses, name
        assert all(use.startswith(":?") for use in uses), f"{name} must be required: {uses}"


def test_ray_token_auth_everywhere_it_is_needed(compose):
    services = compose["services"]
    for name in ("web", "worker", "migrate", *RAY):
        env = services[name]["environment"]
        assert env["RAY_AUTH_MODE"] == "token", name
        assert "RAY_AUTH_TOKEN" in env["RAY_AUTH_TOKEN"], name


@pytest.mark.parametrize("name", ["web", "worker", "ray-head", "ray-worker"])
def test_artifact_store_is_shared_at_one_path(compose, name):
    uri = compose["services"]["web"]["environment"]["PADDOCK_ARTIFACTS_URI"]
    path = urlparse(re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", uri)).path
    mounts = dict(m.split(":", 1)[::-1] for m in compose["services"][name]["volumes"])
    assert mounts.get(path) == "artifacts", f"{name} does not mount the artifact store at {path}"


def test_one_beat(compose):
    beat = compose["services"]["beat"]
    assert beat.get("deploy", {}).get("replicas", 1) == 1


def test_gpu_override():
    gpu = load_yaml(DEPLOY / "compose.gpu.yaml")
    assert set(gpu["services"]) == {"ray-worker"}
    worker = gpu["services"]["ray-worker"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
    args = worker["build"]["args"]
    base = load_yaml(DEPLOY / "compose.yaml")["services"]["ray-worker"]["build"]["args"]
    assert set(args) == set(base), "the override must reset every build argument of the base"
    assert args["INSTALL_VLLM"] == "1" and args["BASE_IMAGE"].startswith("nvidia/cuda:")
    dockerfile = (DEPLOY / "docker" / "worker.Dockerfile").read_text()
    assert f"ARG BASE_IMAGE={args['BASE_IMAGE']}" in dockerfile
