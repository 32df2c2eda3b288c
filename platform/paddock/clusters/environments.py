"""Which multi-turn environments a cluster offers: the built-ins every worker has, and those
it advertises (`RayCluster.environments`); and which one a stored spec asks for."""

from __future__ import annotations

from workers.names import BUILTIN_ENVIRONMENTS

from .models import RayCluster


def offered_environments(cluster: RayCluster) -> list[str]:
    return list(dict.fromkeys([*BUILTIN_ENVIRONMENTS, *(cluster.environments or [])]))


def spec_environment(spec: dict) -> str | None:
    """The `env.name` of an effective spec, None for a single-turn run."""
    env = spec.get("env")
    return env.get("name") if isinstance(env, dict) else None
