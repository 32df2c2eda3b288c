"""What a pooled run counts for in its team's usage (experiments.selectors.team_usage, read by
quotas, dispatch and the quota API): its share of its pool's GPUs (its weight over the
current members' weights, times the GPUs the pool's job reserves), not what its spec asks
for. Real rows on PostgreSQL, packed by the dispatch code; and named pools made before names
were per team, handed to their team by the migration."""

import importlib

import pytest
from django.apps import apps

from paddock.clusters.dispatch import dispatch_prepare
from paddock.clusters.models import Pool, PoolMember
from paddock.experiments.models import Run
from paddock.experiments.selectors import team_usage
from paddock.experiments.states import run_transition
from paddock.teams.models import Role, TeamQuota
from tests.platform.conftest import TINY_SPEC, launch
from tests.platform.factories import ClusterFactory

pytestmark = pytest.mark.usefixtures("quiet_hooks")

GPU = {"trainer_gpus": 1, "rollout_gpus": 0}


def _gpu_run(world, client_as, team="a", pool="auto", weight=1.0, **resources):
    users, t = (world.users_a, world.team_a) if team == "a" else (world.users_b, world.team_b)
    spec = {**TINY_SPEC, "resources": {**GPU, **resources}}
    if pool:
        spec["resources"].update(pool=pool, pool_weight=weight)
    reply = launch(client_as(users[Role.MEMBER]), t, spec=spec)
    assert reply.status_code == 201, reply.json()
    run = Run.objects.get(pk=reply.json()["runs"][0]["id"])
    assert run.gpus == 1  # what its spec asks for
    return run


@pytest.fixture
def gpu_world(world):
    world.cluster.resources = {}  # not probed: placeable
    world.cluster.save()
    for team in (world.team_a, world.team_b):
        TeamQuota.objects.update_or_create(
            team=team, defaults={"max_gpus": 8, "max_concurrent_runs": 10}
        )
    return world


def _gpus(team) -> float:
    return team_usage(team_id=team.pk)["gpus_in_use"]


def test_pooled_runs_count_their_weighted_shares_of_the_pools_gpus(gpu_world, client_as):
    world = gpu_world
    a3 = _gpu_run(world, client_as, weight=3.0)
    b1 = _gpu_run(world, client_as, team="b", weight=1.0)
    assert dispatch_prepare(run_id=a3.pk) is not None
    # alone in its 1-GPU pool, A's run holds the GPU
    assert (_gpus(world.team_a), _gpus(world.team_b)) == (1.0, 0.0)
    assert dispatch_prepare(run_id=b1.pk) is not None
    (pool,) = Pool.objects.all()
    assert pool.num_gpus == 1 and PoolMember.objects.filter(pool=pool).count() == 2
    # weights 3 and 1: 0.75 and 0.25 (the specs ask for 1 each: 2 in all)
    assert (_gpus(world.team_a), _gpus(world.team_b)) == (0.75, 0.25)
    # a second member of A's, of weight 4: A holds 7/8 of the GPU, B 1/8
    a4 = _gpu_run(world, client_as, weight=4.0)
    assert dispatch_prepare(run_id=a4.pk) is not None
    assert (_gpus(world.team_a), _gpus(world.team_b)) == (0.875, 0.125)
    # a solo run adds what it asks for
    solo = _gpu_run(world, client_as, pool=None)
    assert dispatch_prepare(run_id=solo.pk) is not None
    assert _gpus(world.team_a) == 1.875
    # the quota API reads the same usage
    quota = client_as(world.users_a[Role.VIEWER]).get(f"/api/v1/teams/{world.team_a.pk}/quota")
    assert quota.status_code == 200 and quota.json()["gpus_in_use"] == 1.875
    # B's run ends: it no longer counts, and A's members share the whole GPU
    run_transition(run=b1, to_state="aborting")
    run_transition(run=b1, to_state="aborted")
    assert (_gpus(world.team_a), _gpus(world.team_b)) == (2.0, 0.0)
    # a member queued again (its pool's job died) holds nothing until it is packed again
    run_transition(run=a4, to_state="failed", error="the pool's job died")
    run_transition(run=a4, to_state="queued")
    assert _gpus(world.team_a) == 2.0  # a3 alone in the pool (1) + the solo run (1)
    assert team_usage(team_id=world.team_a.pk)["running_runs"] == 2


def test_the_quota_holds_back_a_join_by_what_it_adds_with_weights(gpu_world, client_as):
    world = gpu_world
    b = _gpu_run(world, client_as, team="b", weight=1.0)
    assert dispatch_prepare(run_id=b.pk) is not None
    # A's quota is half a GPU: a pooled run of A's asks for 1 but may count for less
    TeamQuota.objects.filter(team=world.team_a).update(max_gpus=0.5)
    heavy, light = _gpu_run(world, client_as, weight=3.0), _gpu_run(world, client_as, weight=1.0)
    # A's run of weight 3 would hold 0.75 of the pool's GPU: over A's 0.5
    assert dispatch_prepare(run_id=heavy.pk) is None
    heavy.refresh_from_db()
    assert heavy.queued_reason == "waiting for GPUs: the team uses 0 of 0.5 and this run needs 0.75"
    # of weight 1 it holds 0.5: it fits, and A then uses its whole quota
    assert dispatch_prepare(run_id=light.pk) is not None
    assert (_gpus(world.team_a), _gpus(world.team_b)) == (0.5, 0.5)


def _launch(world, client_as, team="a", **resources):
    users, t = (world.users_a, world.team_a) if team == "a" else (world.users_b, world.team_b)
    spec = {**TINY_SPEC, "resources": {**GPU, **resources}}
    return launch(client_as(users[Role.MEMBER]), t, spec=spec)


def _refusal(reply) -> str:
    assert reply.status_code == 409, reply.json()
    assert (reply.json()["code"], reply.json()["field"]) == ("quota_exceeded", "spec.resources")
    return reply.json()["message"]


def test_the_launch_counts_a_pooled_run_as_its_least_share(gpu_world, client_as, settings):
    world = gpu_world
    settings.PADDOCK_POOL_CAPACITY = 4
    TeamQuota.objects.filter(team=world.team_a).update(max_gpus=0.25)
    # a run of its own counts for what it asks: 1 GPU, over 0.25
    assert _refusal(_launch(world, client_as)) == "a run asks for 1 GPUs; the team may use 0.25"
    # an `auto` run may take one place of four in a 1-GPU pool: 0.25, whatever its weight
    for weight in (1.0, 3.0):
        reply = _launch(world, client_as, pool="auto", pool_weight=weight)
        assert reply.status_code == 201, reply.json()
    # a named pool hosts only A's runs: one of them starts it, alone, holding the whole GPU
    assert _refusal(_launch(world, client_as, pool="sweep")) == (
        "a pooled run counts for at least 1 GPUs (its least share of its pool's); "
        "the team may use 0.25"
    )
    # below one place of the largest pool a cluster of the team's starts: refused
    TeamQuota.objects.filter(team=world.team_a).update(max_gpus=0.125)
    assert "at least 0.25 GPUs" in _refusal(_launch(world, client_as, pool="auto"))
    # ... unless a cluster it may use starts pools of eight (A's own, declared)
    ClusterFactory(name="a-own", team=world.team_a, backends=["torch"], capacity={"pool_runs": 8})
    assert _launch(world, client_as, pool="auto").status_code == 201
    # a cluster of another team's does not count
    TeamQuota.objects.filter(team=world.team_b).update(max_gpus=0.125)
    assert "at least 0.25 GPUs" in _refusal(_launch(world, client_as, team="b", pool="auto"))
    # the dry run answers the same
    reply = client_as(world.users_a[Role.MEMBER]).post(
        "/api/v1/experiments",
        {"team": world.team_a.pk, "name": "exp", "validate_only": True,
         "spec": {**TINY_SPEC, "resources": {**GPU, "pool": "sweep"}}},
        format="json",
    )  # fmt: skip
    assert reply.status_code == 200, reply.json()
    assert reply.json()["valid"] is False
    assert [e["code"] for e in reply.json()["errors"]] == ["quota_exceeded"]


def test_a_named_pools_founder_is_checked_at_its_share_alone(gpu_world, client_as):
    """The founder of a pool counts for the pool's GPUs (those its job reserves), not its
    spec's whole ask: a run asking for a trainer GPU and a rollout GPU starts a 1-GPU pool
    under a quota of 1, and the launch lets it in."""
    world = gpu_world
    TeamQuota.objects.filter(team=world.team_a).update(max_gpus=1)
    reply = _launch(world, client_as, pool="sweep", rollout_gpus=1)
    assert reply.status_code == 201, reply.json()
    run = Run.objects.get(pk=reply.json()["runs"][0]["id"])
    assert run.gpus == 2
    assert dispatch_prepare(run_id=run.pk) is not None
    assert Pool.objects.get(name="sweep").num_gpus == 1 and _gpus(world.team_a) == 1.0
    # the same spec as a run of its own asks for 2
    assert _refusal(_launch(world, client_as, rollout_gpus=1)) == (
        "a run asks for 2 GPUs; the team may use 1"
    )


def test_the_migration_hands_a_named_pool_to_its_first_members_team(gpu_world, client_as):
    world = gpu_world
    run = _gpu_run(world, client_as, pool="sweep", team="b")
    assert dispatch_prepare(run_id=run.pk) is not None
    empty = Pool.objects.create(name="lonely", cluster=world.cluster, key={}, capacity=4)
    Pool.objects.filter(name="sweep").update(team=None)  # as before names were per team
    migration = importlib.import_module("paddock.clusters.migrations.0005_pool_name_per_team")
    migration.named_pools_to_their_team(apps, None)
    assert Pool.objects.get(name="sweep").team_id == world.team_b.pk
    empty.refresh_from_db()
    assert empty.team_id is None and empty.state == "ended"  # never had a member
