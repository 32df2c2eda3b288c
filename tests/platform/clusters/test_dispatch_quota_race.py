"""Two runs of one team dispatched at once (two transactions on PostgreSQL) under a quota
that holds one of them: every dispatch takes the team's quota row before its check, so the
second waits for the first to commit, then counts what it took and waits in `queued`.
Without the lock both would read the team's usage before either committed and both start."""

import threading

import pytest

from paddock.clusters import dispatch as dispatch_module
from paddock.experiments.launch import experiment_launch
from paddock.experiments.models import Run
from paddock.teams.models import Role, TeamQuota
from tests.platform.clusters.dispatch_race import dispatch_two_at_once
from tests.platform.conftest import TINY_SPEC

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("quiet_hooks")]

GPU = {"trainer_gpus": 1, "rollout_gpus": 0}


def _race(world, monkeypatch, *resources: dict) -> tuple[dict, list, bool]:
    """Launch a run of each `resources` (two), dispatch the first and hold its transaction
    open after its check, dispatch the second meanwhile. Returns the orders by run id, the
    errors, and whether the second was still waiting when the first was let go."""
    world.cluster.resources = {}  # not probed: placeable
    world.cluster.save()
    TeamQuota.objects.update_or_create(
        team=world.team_a, defaults={"max_gpus": 1, "max_concurrent_runs": 10}
    )
    actor = world.actor(world.users_a[Role.MEMBER])
    first, second = (
        experiment_launch(
            actor=actor, team=world.team_a, name="race", spec={**TINY_SPEC, "resources": r}
        ).runs[0]
        for r in resources
    )
    inside, release = threading.Event(), threading.Event()
    transition = dispatch_module.run_transition

    def slow_transition(*, run, to_state, **kw):
        if run.pk == first.pk and to_state == "dispatching":
            inside.set()  # the first dispatch has passed its check and holds its transaction
            assert release.wait(30)
        return transition(run=run, to_state=to_state, **kw)

    monkeypatch.setattr(dispatch_module, "run_transition", slow_transition)
    return dispatch_two_at_once(first.pk, second.pk, inside, release)


def _the_second_waited_and_queued(orders: dict, errors: list, waited: bool) -> None:
    assert errors == [] and waited
    first, second = orders
    assert orders[first] is not None and orders[second] is None
    run = Run.objects.get(pk=second)
    assert run.state == "queued"
    assert run.queued_reason == "waiting for GPUs: the team uses 1 of 1 and this run needs 1"


def test_two_solo_dispatches_at_once_check_the_quota_one_after_the_other(world, monkeypatch):
    _the_second_waited_and_queued(*_race(world, monkeypatch, GPU, GPU))


def test_a_solo_and_a_pooled_dispatch_at_once_check_one_after_the_other(world, monkeypatch):
    """The first, a run of its own, holds the lock; the second, pooled, would start a pool
    of the whole GPU: it counts the first's GPU once that committed, and waits."""
    _the_second_waited_and_queued(*_race(world, monkeypatch, GPU, {**GPU, "pool": "auto"}))
