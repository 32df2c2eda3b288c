"""Every environment variable the deployment files use is documented, and every documented
one is in .env.example: Paddock's settings in docs/configuration.md, the variables that only
the deployment files use (PostgreSQL's, Ray's, host ports) in docs/deployment.md."""

from __future__ import annotations

import re

from .conftest import CHART, DEPLOY, DOCKER, ENV_NAME, REPO, documented

CONFIGURATION = REPO / "docs" / "configuration.md"
DEPLOYMENT = REPO / "docs" / "deployment.md"
ENV_EXAMPLE = REPO / ".env.example"
# Paddock's own settings: they belong in the reference, docs/configuration.md
OWN = re.compile(r"^(PADDOCK_\w+|DATABASE_URL|REDIS_URL|RAY_ADDRESS)$")
# names in these files that are not environment variables
NOT_ENV = {"RAY_VERSION", "VLLM_VERSION", "TORCH_VERSION", "TORCH_INDEX_URL", "INSTALL_VLLM",
           "BASE_IMAGE", "TRTLLM_IMAGE", "NODE_IMAGE", "PYTHON_IMAGE"}  # fmt: skip


def example_vars() -> set[str]:
    """Names set in .env.example, commented-out examples included (`# NAME=...`)."""
    return set(re.findall(rf"^#?\s*({ENV_NAME})=", ENV_EXAMPLE.read_text(), re.M))


def referenced() -> dict[str, set[str]]:
    """Variables named in compose, the Helm chart, the KubeRay manifests and .env.example."""
    files = [*sorted(DEPLOY.glob("compose*.yaml")), *sorted((DEPLOY / "kuberay").glob("*.yaml")),
             CHART / "values.yaml", *sorted((CHART / "templates").iterdir())]  # fmt: skip
    found: dict[str, set[str]] = {}
    for path in files:
        for name in re.findall(rf"\b({ENV_NAME})\b", path.read_text()):
            if name not in NOT_ENV:
                found.setdefault(name, set()).add(path.name)
    for name in example_vars():
        found.setdefault(name, set()).add(".env.example")
    return found


def test_the_docs_have_tables():
    assert len(documented(CONFIGURATION)) >= 10
    assert documented(DEPLOYMENT)


def test_every_variable_used_is_documented():
    known = documented(CONFIGURATION) | documented(DEPLOYMENT)
    missing = {n: sorted(f) for n, f in referenced().items() if n not in known}
    assert not missing, f"undocumented (add to docs/configuration.md or deployment.md): {missing}"


def test_paddocks_settings_are_documented_in_the_reference():
    own = {n: sorted(f) for n, f in referenced().items() if OWN.match(n)}
    missing = {n: f for n, f in own.items() if n not in documented(CONFIGURATION)}
    assert not missing, f"Paddock settings missing from docs/configuration.md: {missing}"
    assert not {n for n in documented(DEPLOYMENT) if OWN.match(n)}, (
        "Paddock's settings are documented once, in docs/configuration.md"
    )


def test_every_documented_variable_is_in_env_example():
    missing = (documented(CONFIGURATION) | documented(DEPLOYMENT)) - example_vars()
    assert not missing, f"missing from .env.example: {sorted(missing)}"


def test_deployment_doc_lists_no_stale_variable():
    stale = documented(DEPLOYMENT) - set(referenced())
    assert not stale, f"docs/deployment.md documents variables no file uses: {sorted(stale)}"


def test_paddock_settings_baked_into_images_are_documented():
    for path in DOCKER.glob("*.Dockerfile"):
        for name in re.findall(r"\b(PADDOCK_\w+|DATABASE_URL|REDIS_URL|RAY_ADDRESS)\b",
                               path.read_text()):  # fmt: skip
            assert name in documented(CONFIGURATION), f"{path.name}: {name}"
