"""Two runs of one team asking for the same new named pool, dispatched at once (two
transactions on PostgreSQL): the pool is created once and both runs join it; the second
dispatch never fails on the name's uniqueness."""

import threading

import pytest

from paddock.clusters import pools
from paddock.clusters.models import Pool, PoolMember
from paddock.experiments.launch import experiment_launch
from paddock.teams.models import Role
from tests.platform.clusters.dispatch_race import dispatch_two_at_once
from tests.platform.conftest import TINY_SPEC

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("quiet_hooks")]


def test_a_new_named_pool_dispatched_twice_at_once_is_made_once(world, monkeypatch):
    actor = world.actor(world.users_a[Role.MEMBER])
    spec = {**TINY_SPEC, "resources": {"pool": "sweep"}}
    first, second = experiment_launch(
        actor=actor, team=world.team_a, name="sweep", spec=spec, seeds=2
    ).runs
    inside, release = threading.Event(), threading.Event()
    join = pools.member_join

    def slow_join(*, pool, run, dispatch, weight):
        if run.pk == first.pk:  # the first dispatch holds its transaction open here
            inside.set()
            assert release.wait(30)
        return join(pool=pool, run=run, dispatch=dispatch, weight=weight)

    monkeypatch.setattr(pools, "member_join", slow_join)
    orders, errors, _ = dispatch_two_at_once(first.pk, second.pk, inside, release)
    assert errors == []
    (pool,) = Pool.objects.filter(name="sweep")
    assert pool.team_id == world.team_a.pk
    assert {o.submission_id for o in orders.values()} == {pool.ray_submission_id}
    assert set(PoolMember.objects.filter(pool=pool).values_list("run_id", flat=True)) == {
        first.pk,
        second.pk,
    }
