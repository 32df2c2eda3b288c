"""Registering Ray clusters and checking their health: through the API (team admins for
their team's cluster, at an address inside PADDOCK_CLUSTER_NETWORKS, here loopback: outside
it they are refused, tests/security/test_clusters.py; a staff session, never a token, for a
shared one) and through `manage.py paddock_cluster` (the operator on the server). A health
check asks the cluster's Jobs API for real: an address nobody listens on is reported
unhealthy, with the reason."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from paddock.clusters.models import RayCluster
from paddock.teams.models import AuditEvent, Role
from paddock.teams.services import api_token_create
from tests.conftest import free_port
from workers.names import BUILTIN_ENVIRONMENTS

NOBODY = "http://127.0.0.1:{port}"


@pytest.fixture(autouse=True)
def loopback_allowed(settings):
    settings.PADDOCK_CLUSTER_NETWORKS = ["127.0.0.0/8"]


def with_token(world, user, team):
    _, secret = api_token_create(actor=world.actor(user), team=team, name="t")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def body(team, **extra):
    return {"name": "team-gpus", "address": "http://127.0.0.1:8265", "team": team.pk,
            "backends": ["torch", "vllm"], "capacity": {"cpus": 16, "gpus": 8},
            **extra}  # fmt: skip


@pytest.mark.django_db
def test_a_team_admin_registers_a_team_cluster_others_do_not_see_it(world, client_as):
    admin = with_token(world, world.users_a[Role.ADMIN], world.team_a)
    reply = admin.post("/api/v1/clusters", body(world.team_a), format="json")
    assert reply.status_code == 201, reply.json()
    got = reply.json()
    assert (got["name"], got["team"], got["backends"]) == ("team-gpus", world.team_a.pk,
                                                           ["torch", "vllm"])  # fmt: skip
    assert got["capacity"] == {"cpus": 16, "gpus": 8} and got["health_error"] == ""
    assert AuditEvent.objects.filter(action="cluster.register", target_id=got["id"]).exists()
    names_a = [c["name"] for c in admin.get("/api/v1/clusters").json()]
    names_b = [c["name"] for c in client_as(world.users_b[Role.OWNER]).get("/api/v1/clusters")
               .json()]  # fmt: skip
    assert "team-gpus" in names_a and "team-gpus" not in names_b and "shared" in names_b
    outsider = client_as(world.users_b[Role.OWNER]).get(f"/api/v1/clusters/{got['id']}")
    assert outsider.status_code == 404


@pytest.mark.django_db
def test_a_cluster_reads_back_the_environments_a_run_there_may_name(world):
    """Registered with what it has installed besides the built-ins; read as all it offers
    (what the launcher lists), the built-ins first."""
    admin = with_token(world, world.users_a[Role.ADMIN], world.team_a)
    reply = admin.post("/api/v1/clusters", body(world.team_a, environments=["wordle", "http"]),
                       format="json")  # fmt: skip
    assert reply.status_code == 201, reply.json()
    assert reply.json()["environments"] == [*BUILTIN_ENVIRONMENTS, "wordle"]
    listed = {c["name"]: c for c in admin.get("/api/v1/clusters").json()}
    assert listed["team-gpus"]["environments"] == [*BUILTIN_ENVIRONMENTS, "wordle"]
    assert listed["shared"]["environments"] == list(BUILTIN_ENVIRONMENTS)


@pytest.mark.django_db
def test_who_may_register(world, client_as):
    member = with_token(world, world.users_a[Role.MEMBER], world.team_a)
    reply = member.post("/api/v1/clusters", body(world.team_a), format="json")
    assert (reply.status_code, reply.json()["code"]) == (403, "permission_denied")
    other_team = with_token(world, world.users_b[Role.OWNER], world.team_b)
    reply = other_team.post("/api/v1/clusters", body(world.team_a), format="json")
    assert reply.status_code == 404
    # shared: a token never carries staff rights, even a staff user's
    staff = world.users_a[Role.OWNER]
    staff.is_staff = True
    staff.save()
    shared = {k: v for k, v in body(world.team_a).items() if k != "team"}
    reply = with_token(world, staff, world.team_a).post("/api/v1/clusters", shared, format="json")
    assert reply.status_code == 403 and "manage.py paddock_cluster" in reply.json()["message"]
    reply = client_as(staff).post("/api/v1/clusters", shared, format="json")
    assert reply.status_code == 201 and reply.json()["team"] is None
    assert RayCluster.objects.filter(name="team-gpus").count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"address": "head:8265"}, "address"),
        ({"address": "file:///etc/passwd"}, "address"),
        ({"dashboard_url": "javascript:alert(1)"}, "dashboard_url"),
        ({"capacity": {"gpus": -1}}, "capacity.gpus"),
        ({"capacity": {"gpus": "eight"}}, "capacity.gpus"),
        ({"capacity": {"tpus": 4}}, "capacity.tpus"),
        ({"backends": ["torch", "jax"]}, "backends"),
        ({"name": ""}, "name"),
        ({"colour": "red"}, "colour"),
        ({"labels": {"zone": {"nested": 1}}}, "labels"),
    ],
)
def test_bad_registrations_name_the_field(world, edit, field):
    admin = with_token(world, world.users_a[Role.ADMIN], world.team_a)
    reply = admin.post("/api/v1/clusters", body(world.team_a, **edit), format="json")
    assert reply.status_code == 400, reply.json()
    assert reply.json()["field"].startswith(field), reply.json()


@pytest.mark.django_db
def test_a_taken_name_is_a_409(world):
    admin = with_token(world, world.users_a[Role.ADMIN], world.team_a)
    reply = admin.post("/api/v1/clusters", body(world.team_a, name="shared"), format="json")
    assert (reply.status_code, reply.json()["code"], reply.json()["field"]) == (
        409, "name_taken", "name",
    )  # fmt: skip


@pytest.mark.django_db
def test_health_check_reports_an_unreachable_jobs_api(world):
    admin = with_token(world, world.users_a[Role.ADMIN], world.team_a)
    address = NOBODY.format(port=free_port())
    created = admin.post("/api/v1/clusters", body(world.team_a, address=address), format="json")
    cluster_id = created.json()["id"]
    reply = admin.post(f"/api/v1/clusters/{cluster_id}/health")
    assert reply.status_code == 200
    assert reply.json()["healthy"] is False and reply.json()["health_error"]
    stored = RayCluster.objects.get(pk=cluster_id)
    assert stored.healthy is False and stored.health_error == reply.json()["health_error"]
    assert admin.post("/api/v1/clusters/999999/health").status_code == 404


@pytest.mark.django_db
def test_manage_py_paddock_cluster(world):
    out = io.StringIO()
    address = NOBODY.format(port=free_port())
    call_command("paddock_cluster", "register", "ops-shared", address, "--backends", "torch",
                 "--capacity", '{"gpus": 4}', stdout=out)  # fmt: skip
    cluster = RayCluster.objects.get(name="ops-shared")
    assert cluster.team is None and cluster.backends == ["torch"] and cluster.capacity["gpus"] == 4
    assert "registered cluster" in out.getvalue() and "(shared)" in out.getvalue()
    call_command("paddock_cluster", "register", "ops-a", "http://a:8265", "--team", "team-a",
                 stdout=out)  # fmt: skip
    assert RayCluster.objects.get(name="ops-a").team == world.team_a
    with pytest.raises(CommandError, match="backends"):
        call_command("paddock_cluster", "register", "bad", address, "--backends", "jax")
    with pytest.raises(CommandError, match="--team"):
        call_command("paddock_cluster", "register", "bad", address, "--team", "nope")
    listed = io.StringIO()
    call_command("paddock_cluster", "list", stdout=listed)
    assert "ops-shared\tshared" in listed.getvalue() and "ops-a\tteam-a" in listed.getvalue()
    with pytest.raises(CommandError, match="unhealthy: ops-shared"):
        call_command("paddock_cluster", "health", "ops-shared", stdout=io.StringIO())
    assert RayCluster.objects.get(name="ops-shared").healthy is False
