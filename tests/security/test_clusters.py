"""Clusters (docs/security.md#clusters): the deployment's Ray token goes only to an address
an operator approved. A team's admin registers a cluster only inside the networks the
operator allows; a row registered before that rule is never called; every Jobs API call has
a deadline; and one slow cluster does not hold up the health check of the others. Each
cluster here is a listener on 127.0.0.1 that records what reaches it."""

from __future__ import annotations

from importlib.metadata import version

import pytest
from django.apps import apps

from paddock.clusters import ray_jobs, tasks
from paddock.clusters.approval import Endpoint
from paddock.clusters.models import RayCluster
from paddock.clusters.ray_jobs import ClusterUnreachable, job_info, job_submit
from paddock.clusters.services import cluster_check
from paddock.teams.models import AuditEvent, Role
from tests.platform.factories import UserFactory
from tests.security.listener import Listener, Reply, Seen

RAY_VERSION = version("ray")


def jobs_api(seen: Seen) -> Reply:
    """Enough of a Ray Jobs API for a health check: its version, no resources, no jobs."""
    if seen.path == "/api/version":
        return Reply(200, {"version": "4", "ray_version": RAY_VERSION, "ray_commit": "x"})
    if seen.path == "/api/jobs/":
        return Reply(200, [])
    return Reply(404, b"")


@pytest.fixture
def listeners():
    started: list[Listener] = []

    def start(answer=jobs_api) -> Listener:
        started.append(Listener(answer))
        return started[-1]

    yield start
    for listener in started:
        listener.stop()


def _register(client, team, address: str):
    body = {"name": "mine", "address": address, "backends": ["torch"],
            **({"team": team.pk} if team else {})}  # fmt: skip
    return client.post("/api/v1/clusters", body, format="json")


def test_a_team_admin_cannot_register_an_address_no_operator_allowed(world, client_as,
                                                                     listeners):  # fmt: skip
    cluster = listeners()
    before = RayCluster.objects.count()
    reply = _register(client_as(world.users_a[Role.ADMIN]), world.team_a, cluster.base)
    assert reply.status_code == 403, reply.json()
    assert "PADDOCK_CLUSTER_NETWORKS" in reply.json()["message"]
    assert RayCluster.objects.count() == before and cluster.seen == []
    # a staff session registers it, approved: the health check calls it
    reply = _register(client_as(UserFactory(is_staff=True)), None, cluster.base)
    assert reply.status_code == 201, reply.json()
    row = RayCluster.objects.get(pk=reply.json()["id"])
    assert row.address_approved and cluster_check(row)
    assert [s.path for s in cluster.seen][0] == "/api/version"


def test_inside_an_allowed_network_a_team_registers_and_is_called_at_the_checked_ip(
    world, client_as, listeners, settings
):
    cluster = listeners()
    settings.PADDOCK_CLUSTER_NETWORKS = ["127.0.0.0/8"]
    named = cluster.base.replace("127.0.0.1", "localhost")
    reply = _register(client_as(world.users_a[Role.ADMIN]), world.team_a, named)
    assert reply.status_code == 201, reply.json()
    row = RayCluster.objects.get(pk=reply.json()["id"])
    assert not row.address_approved  # approved by the network, while it stays allowed
    assert cluster_check(row), row.health_error
    assert {s.headers["Host"] for s in cluster.seen} == {f"127.0.0.1:{cluster.port}"}
    # the Ray token of the session (RAY_AUTH_MODE=token) went there: it is approved
    assert all("authorization" in {k.lower() for k in s.headers} for s in cluster.seen)
    calls = len(cluster.seen)
    settings.PADDOCK_CLUSTER_NETWORKS = []  # the operator withdraws the network
    assert not cluster_check(row) and "has not approved this address" in row.health_error
    assert len(cluster.seen) == calls


def test_a_cluster_registered_before_the_rule_is_never_called(world, listeners):
    cluster = listeners()
    row = RayCluster.objects.create(name="legacy", team=world.team_a, address=cluster.base,
                                    backends=["torch"], address_approved=False)  # fmt: skip
    states = tasks.cluster_health()
    row.refresh_from_db()
    assert states["legacy"] is False and "has not approved this address" in row.health_error
    with pytest.raises(ClusterUnreachable, match="has not approved"):
        job_submit(address=cluster.base, submission_id="x", entrypoint="true", runtime_env={},
                   num_cpus=1, num_gpus=0)  # fmt: skip
    with pytest.raises(ClusterUnreachable, match="has not approved"):
        job_info(address=cluster.base, submission_id="x")
    assert cluster.seen == []


def test_the_migration_unapproves_what_team_admins_registered(world):
    from importlib import import_module

    migration = import_module("paddock.clusters.migrations.0006_cluster_address_approved")
    by_admin = RayCluster.objects.create(name="a", team=world.team_a, address="http://a:8265")
    by_staff = RayCluster.objects.create(name="b", team=world.team_a, address="http://b:8265")
    by_operator = RayCluster.objects.create(name="c", address="http://c:8265")
    staff = UserFactory(is_staff=True)
    for row, actor in ((by_admin, world.users_a[Role.ADMIN]), (by_staff, staff),
                       (by_operator, None)):  # fmt: skip
        AuditEvent.objects.create(actor=actor, team=row.team, action="cluster.register",
                                  target_type="cluster", target_id=str(row.pk))  # fmt: skip
    migration.unapprove_team_registrations(apps, None)
    approved = dict(RayCluster.objects.values_list("name", "address_approved"))
    assert (approved["a"], approved["b"], approved["c"]) == (False, True, True)


def test_one_slow_cluster_does_not_hold_up_the_others(world, listeners, monkeypatch):
    slow, fast = listeners(), listeners()
    slow.hold()  # accepts, never answers
    monkeypatch.setattr(tasks, "HEALTH_DEADLINE_S", 2.0)
    monkeypatch.setattr(ray_jobs, "READ_S", 3.0)  # so that its thread ends soon after
    RayCluster.objects.create(name="slow", address=slow.base)
    RayCluster.objects.create(name="fast", address=fast.base)
    RayCluster.objects.exclude(name__in=["slow", "fast"]).delete()
    states = tasks.cluster_health()  # returns although "slow" never answers
    assert states == {"slow": False, "fast": True}
    row = RayCluster.objects.get(name="slow")
    assert row.health_error == "the Jobs API did not answer within 2 s"
    fast_row = RayCluster.objects.get(name="fast")
    assert fast_row.healthy and fast_row.last_seen_at is not None


def test_every_jobs_api_call_has_a_deadline(listeners, monkeypatch):
    monkeypatch.setattr(ray_jobs, "READ_S", 1.0)
    monkeypatch.setattr(ray_jobs, "TOTAL_S", 1.0)
    held = listeners()
    held.hold()
    with pytest.raises(ClusterUnreachable, match="ReadTimeout"):
        job_info(address=Endpoint(held.base, held.base), submission_id="x")

    def dripping(seen: Seen) -> Reply:  # answers, one byte every 0.2 s: never done in 1 s
        return Reply(200, {"version": "4", "ray_version": RAY_VERSION, "pad": "x" * 200},
                     drip_s=0.2)  # fmt: skip

    drip = listeners(dripping)
    with pytest.raises(ClusterUnreachable, match="no whole reply within 1 s"):
        job_info(address=Endpoint(drip.base, drip.base), submission_id="x")
