"""The control plane reads a stored spec through the spec's own models
(`ConfigVersion.run_spec`: workers/spec.py's RunSpec), so the spec's defaults live in one
place. A spec stored without a key (by an older release) reads as the spec's default, and a
default changed in the spec reaches the launch check, dispatch's order, placement and a
pool's membership with nothing else changed (PostgreSQL, the real launch and dispatch)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from paddock.clusters.dispatch import dispatch_prepare
from paddock.clusters.models import PoolMember
from paddock.experiments.configs import spec_hash
from paddock.experiments.models import ConfigVersion, Run
from paddock.teams.models import Role
from tests.platform.conftest import TINY_SPEC, launch
from workers.spec import ResourcesSpec, RunSpec

pytestmark = pytest.mark.usefixtures("quiet_hooks")


@contextmanager
def spec_default(field: str, value) -> Iterator[None]:
    """`resources.<field>` defaults to `value` in the spec's models meanwhile."""
    info = ResourcesSpec.model_fields[field]
    before = info.default

    def rebuild(default) -> None:
        info.default = default
        ResourcesSpec.model_rebuild(force=True)
        RunSpec.model_rebuild(force=True)

    rebuild(value)
    try:
        yield
    finally:
        rebuild(before)


def _launched(world, client_as, spec: dict) -> Run:
    reply = launch(client_as(world.users_a[Role.MEMBER]), world.team_a, spec=spec)
    assert reply.status_code == 201, reply.json()
    return Run.objects.get(pk=reply.json()["runs"][0]["id"])


def _stored_without(run: Run, *keys: str) -> None:
    """The run's spec as an older release stored it: without `resources.<key>` for `keys`."""
    spec = copy.deepcopy(run.config.spec)
    for key in keys:
        del spec["resources"][key]
    config = ConfigVersion.objects.create(
        team=run.team, spec=spec, hash=spec_hash(spec), parent=run.config
    )
    Run.objects.filter(pk=run.pk).update(config=config)


def test_a_spec_stored_without_a_key_reads_the_specs_default(world, client_as):
    run = _launched(world, client_as, TINY_SPEC)
    _stored_without(run, "executor", "trainer_cpus", "trainer_gpus")
    order = dispatch_prepare(run_id=run.pk)
    defaults = ResourcesSpec()
    assert (order.num_cpus, order.num_gpus) == (defaults.trainer_cpus, defaults.trainer_gpus)


def test_a_default_changed_in_the_spec_reaches_the_control_plane(world, client_as):
    solo = _launched(world, client_as, TINY_SPEC)
    pooled = _launched(world, client_as, {**TINY_SPEC, "resources": {"pool": "auto"}})
    _stored_without(solo, "trainer_cpus")
    _stored_without(pooled, "pool_weight")
    with spec_default("trainer_cpus", 3.0), spec_default("pool_weight", 2.5):
        # dispatch: the job reserves the CPUs the spec's default asks for; a pooled run joins
        # with the spec's default weight
        assert dispatch_prepare(run_id=solo.pk).num_cpus == 3.0
        dispatch_prepare(run_id=pooled.pk)
        assert PoolMember.objects.get(run=pooled).weight == 2.5
        # placement, at launch: a run that sets no CPUs asks for 3, more than the cluster has
        world.cluster.capacity = {"cpus": 2}
        world.cluster.save()
        refused = launch(client_as(world.users_a[Role.MEMBER]), world.team_a, spec=TINY_SPEC)
    assert refused.status_code == 400, refused.json()
    assert refused.json()["field"] == "spec.resources.trainer_cpus"
    assert "the run asks for 3 CPUs" in refused.json()["message"]
    assert ResourcesSpec().trainer_cpus == 1 and ResourcesSpec().pool_weight == 1.0
