"""Environments by name: the built-in ones and those installed on the cluster.

A package makes an environment available by declaring an entry point in the group
`paddock.environments`, its name the one specs use:

    [project.entry-points."paddock.environments"]
    wordle = "my_envs.wordle:WordleEnv"

The object named is a factory (a class or a function) called with the spec's `env.args` as
keyword arguments. What it returns is adapted by its type: a Paddock `Environment` as it is,
a Gymnasium `Env` through gym.py, a `verifiers` taskset through verifiers_env.py. A spec
names an environment, never a module: only what an installed package declared (what the
cluster advertises, `installed_environments()`) can be chosen.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from typing import Any

from ..grants import Grants
from ..names import BUILTIN_ENVIRONMENTS, ENVIRONMENT_GROUP, installed_environments
from ..spec import EnvSpec
from .base import Environment
from .calculator import Calculator
from .gym import GymEnvironment, is_gym_env
from .http_env import HttpEnvironment
from .verifiers_env import VerifiersEnvironment, is_verifiers_taskset

GROUP = ENVIRONMENT_GROUP


def _calculator(**_: Any) -> Environment:
    return Calculator()


# name → factory; `http` is built from env.server (http_env.py)
BUILTIN: dict[str, Callable[..., Any]] = {"calculator": _calculator}
SERVER = "http"
if {*BUILTIN, SERVER} != set(BUILTIN_ENVIRONMENTS):
    raise RuntimeError("the built-in environments disagree with workers/names.py")


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in importlib.metadata.entry_points(group=GROUP):
        if ep.name in installed_environments() and ep.name not in BUILTIN_ENVIRONMENTS:
            found.setdefault(ep.name, ep)
    return found


def adapt(factory: Callable[..., Any], name: str, spec: EnvSpec) -> Environment:
    """What `factory(**env.args)` makes, as a Paddock environment, by its type."""
    obj = factory(**spec.args)
    if isinstance(obj, Environment):
        return obj
    if is_gym_env(obj):  # one instance an episode: the factory makes the others
        return GymEnvironment(obj, name, lambda: factory(**spec.args))
    if is_verifiers_taskset(obj):
        return VerifiersEnvironment(obj, name)
    raise TypeError(
        f"environment {name!r} made a {type(obj).__name__}, which is neither a Paddock "
        "Environment, a Gymnasium Env nor a verifiers Taskset"
    )


async def make_environment(spec: EnvSpec, grants: Grants | None = None) -> Environment:
    """The environment `env.name` names, with its `env.args`; `grants`: the run's secrets
    and egress policy, which an environment server is reached under (default: `paddock
    train`'s)."""
    if spec.name == SERVER:
        assert spec.server is not None  # the spec's validator requires it
        env = HttpEnvironment(spec.server, grants if grants is not None else Grants.standalone())
        await env.load_tools()  # the first prompt is rendered with them
        return env
    if spec.name in BUILTIN:
        return adapt(BUILTIN[spec.name], spec.name, spec)
    eps = _entry_points()
    if spec.name not in eps:
        raise ValueError(
            f"env.name: no environment {spec.name!r} is installed here (installed: "
            f"{', '.join(installed_environments())}); a package declares one with an entry "
            f"point in the group {GROUP!r}"
        )
    return adapt(eps[spec.name].load(), spec.name, spec)
