"""Which multi-turn environments a cluster offers: the built-ins every worker has, and those
it advertises (`RayCluster.environments`); and which one a run's spec asks for."""

from __future__ import annotations

from workers.names import BUILTIN_ENVIRONMENTS
from workers.spec import RunSpec

from .models import RayCluster


def offered_environments(cluster: RayCluster) -> list[str]:
    return list(dict.fromkeys([*BUILTIN_ENVIRONMENTS, *(cluster.environments or [])]))


def spec_environment(spec: RunSpec) -> str | None:
    """The spec's `env.name`; None for a single-turn run."""
    return spec.env.name if spec.env is not None else None
