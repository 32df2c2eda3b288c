"""Quotas per user as well as per team (docs/security.md#limits): any user may create teams,
each with a quota of its own, so the runs a user launches are also bounded over all of their
teams, at launch and at dispatch; staff set one user's quota in the admin."""

from __future__ import annotations

import pytest

from paddock.clusters.dispatch import dispatch_prepare
from paddock.experiments.launch import experiment_launch
from paddock.experiments.models import Run
from paddock.teams.models import Role, UserQuota
from paddock.teams.services import team_create
from tests.platform.conftest import TINY_SPEC, launch

pytestmark = pytest.mark.usefixtures("quiet_hooks")


def test_creating_teams_does_not_multiply_a_users_quota(world, client_as, settings):
    settings.PADDOCK_USER_MAX_CONCURRENT_RUNS = 1
    settings.PADDOCK_USER_MAX_QUEUED_RUNS = 1
    owner = world.users_a[Role.OWNER]
    client = client_as(owner)
    assert launch(client, world.team_a, seeds=2).status_code == 201  # the user's 2
    second = team_create(actor=world.actor(owner), name="another team of mine")
    reply = launch(client, second)  # a fresh team quota, the same user's
    assert (reply.status_code, reply.json()["code"]) == (409, "quota_exceeded")
    assert "over all your teams" in reply.json()["message"]
    # staff raise this one user's quota
    UserQuota.objects.filter(user=owner).update(max_queued_runs=5)
    assert launch(client, second).status_code == 201


def test_dispatch_holds_a_users_runs_in_all_their_teams(world, settings):
    settings.PADDOCK_USER_MAX_CONCURRENT_RUNS = 1
    owner = world.users_a[Role.OWNER]
    second = team_create(actor=world.actor(owner), name="second")
    actor = world.actor(owner)  # now a member of both
    first_run = experiment_launch(actor=actor, team=world.team_a, name="a", spec=TINY_SPEC).runs[0]
    other_run = experiment_launch(actor=actor, team=second, name="b", spec=TINY_SPEC).runs[0]
    assert dispatch_prepare(run_id=first_run.pk) is not None
    assert dispatch_prepare(run_id=other_run.pk) is None
    waiting = Run.objects.get(pk=other_run.pk)
    assert waiting.state == "queued"
    assert "its launcher runs 1 of their 1 concurrent runs" in waiting.queued_reason
    # another user of the same team is not held by this one's quota
    someone = experiment_launch(actor=world.actor(world.users_a[Role.MEMBER]),
                                team=world.team_a, name="c", spec=TINY_SPEC).runs[0]  # fmt: skip
    assert dispatch_prepare(run_id=someone.pk) is not None
