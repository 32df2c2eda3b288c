"""Shared helpers of the deployment checks: paths, a strict YAML loader, the env-var docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "paddock"
DOCKER = DEPLOY / "docker"

ENV_NAME = r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|CI"
TABLE_ROW = re.compile(rf"^\|\s*`({ENV_NAME})`\s*\|", re.M)


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (compose and Kubernetes
    refuse it too; PyYAML alone keeps the last one silently)."""


def _mapping_without_duplicates(loader: StrictLoader, node: yaml.MappingNode, deep=False):
    seen: set[str] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = key_node.value
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates
)


def load_yaml(path: Path):
    return yaml.load(path.read_text(), Loader=StrictLoader)  # noqa: S506 (a SafeLoader)


def load_yaml_all(text: str) -> list:
    return [doc for doc in yaml.load_all(text, Loader=StrictLoader) if doc]  # noqa: S506


def documented(doc: Path) -> set[str]:
    """Variables named in the first column of a Markdown table of `doc`."""
    return set(TABLE_ROW.findall(doc.read_text()))


def ray_pin() -> str:
    match = re.search(r"^ray==([0-9.]+)$", (REPO / "constraints-cpu.txt").read_text(), re.M)
    assert match, "constraints-cpu.txt pins no ray version"
    return match.group(1)


@pytest.fixture(scope="session")
def compose() -> dict:
    return load_yaml(DEPLOY / "compose.yaml")
