"""Quotas refuse what could never run or would overfill the queue; the audit log records
every write with who, what, when and from where, and filters."""

import pytest

from paddock.experiments.models import Experiment, Run
from paddock.teams.models import AuditEvent, Role, TeamQuota
from tests.platform.conftest import launch


@pytest.fixture
def member(world, client_as):
    return client_as(world.users_a[Role.MEMBER])


def test_a_launch_past_the_queue_limit_is_refused_and_creates_nothing(world, member):
    TeamQuota.objects.filter(team=world.team_a).update(max_concurrent_runs=1, max_queued_runs=2)
    assert launch(member, world.team_a, seeds=3).status_code == 201
    reply = launch(member, world.team_a, seeds=1)
    assert reply.status_code == 409
    assert reply.json()["code"] == "quota_exceeded"
    assert Experiment.objects.filter(team=world.team_a).count() == 1
    assert Run.objects.filter(team=world.team_a).count() == 3


def test_a_run_needing_more_gpus_than_the_team_has_is_refused(world, member):
    TeamQuota.objects.filter(team=world.team_a).update(max_gpus=1)
    spec = {"resources": {"trainer_gpus": 1, "rollout_gpus": 1}}
    reply = launch(member, world.team_a, spec=spec)
    assert reply.status_code == 409
    assert (reply.json()["code"], reply.json()["field"]) == ("quota_exceeded", "spec.resources")


def test_finished_runs_free_their_slot(world, member):
    TeamQuota.objects.filter(team=world.team_a).update(max_concurrent_runs=1, max_queued_runs=0)
    assert launch(member, world.team_a).status_code == 201
    assert launch(member, world.team_a).status_code == 409
    Run.objects.filter(team=world.team_a).update(state="succeeded")
    assert launch(member, world.team_a).status_code == 201


def test_the_team_reads_its_quota_and_usage(world, member, launched):
    body = member.get(f"/api/v1/teams/{world.team_a.pk}/quota").json()
    assert body["max_concurrent_runs"] == 4
    assert body["active_runs"] == 2 and body["running_runs"] == 0


def test_quota_changes_are_audited(world, client_as):
    from tests.platform.factories import UserFactory

    staff = client_as(UserFactory(username="root", is_staff=True))
    staff.put(f"/api/v1/teams/{world.team_a.pk}/quota", {"max_concurrent_runs": 9}, format="json")
    event = AuditEvent.objects.get(action="quota.set")
    assert event.data == {"max_concurrent_runs": [4, 9]} and event.team_id == world.team_a.pk


def test_every_write_and_control_action_leaves_an_audit_entry(world, member, launched):
    exp_id, run_id = launched[0]["experiment"]["id"], launched[0]["runs"][0]["id"]
    member.patch(f"/api/v1/experiments/{exp_id}", {"name": "renamed"}, format="json")
    member.post(f"/api/v1/experiments/{exp_id}/clone", {"seeds": 1}, format="json")
    for verb in ("pause", "resume", "abort"):
        assert member.post(f"/api/v1/runs/{run_id}/{verb}").status_code == 200
    actions = list(
        AuditEvent.objects.filter(team=world.team_a).order_by("id").values_list("action", flat=True)
    )
    assert actions == ["experiment.launch", "experiment.update", "experiment.clone",
                       "run.pause", "run.resume", "run.abort"]  # fmt: skip


def test_the_audit_log_filters(world, client_as, launched):
    admin = client_as(world.users_a[Role.ADMIN])
    member = client_as(world.users_a[Role.MEMBER])
    run_id = launched[0]["runs"][0]["id"]
    member.post(f"/api/v1/runs/{run_id}/pause")
    url = f"/api/v1/teams/{world.team_a.pk}/audit"
    by_prefix = admin.get(url, {"action": "run"}).json()["results"]
    assert [e["action"] for e in by_prefix] == ["run.pause"]
    assert by_prefix[0]["actor"]["username"] == "a-member"
    by_target = admin.get(url, {"target_type": "run", "target_id": str(run_id)}).json()["results"]
    assert len(by_target) == 1
    by_actor = admin.get(url, {"actor": world.users_a[Role.OWNER].pk}).json()["results"]
    assert by_actor == []
    future = admin.get(url, {"since": "2100-01-01T00:00:00Z"}).json()["results"]
    assert future == []
    bad = admin.get(url, {"since": "yesterday"})
    assert bad.status_code == 400 and bad.json()["field"] == "since"
