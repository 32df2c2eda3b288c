"""Every endpoint, for every role of team A, for a user of team B and for nobody.

An object of team A is allowed to the roles that may touch it, forbidden (403) to lower
roles of team A, and not found (404) for everyone in team B — downloads included — so
another team's objects never leak, not even their existence."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from paddock.experiments.launch import experiment_launch
from paddock.experiments.metrics import metric_points_store
from paddock.experiments.models import Checkpoint
from paddock.teams.models import Role
from paddock.teams.services import api_token_create
from tests.platform.conftest import TINY_SPEC
from tests.platform.factories import MembershipFactory, UserFactory

V, M, A, OW = Role.VIEWER, Role.MEMBER, Role.ADMIN, Role.OWNER
RANK = {V: 0, M: 1, A: 2, OW: 3}


@dataclass
class Objects:
    team: int
    experiment: int
    config: int
    config2: int
    run: int
    checkpoint: int
    extra_user: int
    extra_token: int


@pytest.fixture
def objects(world, settings, tmp_path) -> Objects:
    settings.PADDOCK_ARTIFACTS_URI = (tmp_path / "artifacts").as_uri()
    actor = world.actor(world.users_a[M])
    result = experiment_launch(
        actor=actor, team=world.team_a, name="a", spec=TINY_SPEC, backends=["torch", "vllm"]
    )
    run = result.runs[0]
    path = tmp_path / "artifacts" / "runs" / str(run.pk) / "adapter.bin"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"weights")
    checkpoint = Checkpoint.objects.create(run=run, step=1, uri=path.as_uri(), size_bytes=7)
    metric_points_store(run_id=run.pk, points=[("reward/mean", s, 0.0, s / 10) for s in range(5)])
    extra = MembershipFactory(team=world.team_a, role=M, user=UserFactory(username="a-extra"))
    token, _ = api_token_create(actor=world.actor(extra.user), team=world.team_a, name="x")
    return Objects(
        team=world.team_a.pk,
        experiment=result.experiment.pk,
        config=run.config_id,
        config2=result.runs[1].config_id,
        run=run.pk,
        checkpoint=checkpoint.pk,
        extra_user=extra.user.pk,
        extra_token=token.pk,
    )


# (method, path, payload, least role allowed, status when allowed, status below that role)
ENDPOINTS = [
    ("get", "/teams/{team}", None, V, 200, 403),
    ("patch", "/teams/{team}", {"name": "renamed"}, A, 200, 403),
    ("get", "/teams/{team}/members", None, V, 200, 403),
    ("post", "/teams/{team}/members", {"username": "outsider", "role": "viewer"}, A, 201, 403),
    ("patch", "/teams/{team}/members/{extra_user}", {"role": "viewer"}, A, 200, 403),
    ("delete", "/teams/{team}/members/{extra_user}", None, A, 204, 403),
    ("get", "/teams/{team}/tokens", None, V, 200, 403),
    ("post", "/teams/{team}/tokens", {"name": "cli"}, V, 201, 403),
    ("delete", "/teams/{team}/tokens/{extra_token}", None, A, 200, 404),  # others' tokens
    ("get", "/teams/{team}/quota", None, V, 200, 403),
    ("get", "/teams/{team}/audit", None, A, 200, 403),
    ("get", "/experiments/{experiment}", None, V, 200, 403),
    ("patch", "/experiments/{experiment}", {"tags": ["x"]}, M, 200, 403),
    ("post", "/experiments/{experiment}/clone", {"seeds": 1}, M, 201, 403),
    ("post", "/experiments", {"team": "{team}", "name": "n", "spec": {}}, M, 201, 403),
    ("get", "/configs/{config}", None, V, 200, 403),
    ("get", "/configs/diff?a={config}&b={config2}", None, V, 200, 403),
    ("post", "/configs/diff", {"a": "{config}", "b_spec": {}}, V, 200, 403),
    ("get", "/runs/{run}", None, V, 200, 403),
    ("get", "/runs/{run}/events", None, V, 200, 403),
    ("get", "/runs/{run}/events?before=9999", None, V, 200, 403),
    ("get", "/runs/{run}/samples", None, V, 200, 403),
    ("get", "/runs/{run}/checkpoints", None, V, 200, 403),
    ("get", "/runs/{run}/checkpoints/{checkpoint}/download", None, V, 200, 403),
    ("get", "/runs/{run}/metrics?keys=reward/mean", None, V, 200, 403),
    ("get", "/metrics?runs={run}&keys=reward/mean", None, V, 200, 403),
    ("get", "/metrics?experiment={experiment}&keys=reward/mean&x_min=1", None, V, 200, 403),
    ("get", "/runs/{run}/metrics?keys=reward/mean&x_min=1&x_max=3", None, V, 200, 403),
    ("post", "/runs/{run}/pause", None, M, 200, 403),
    ("post", "/runs/{run}/resume", None, M, 200, 403),
    ("post", "/runs/{run}/abort", None, M, 200, 403),
]
IDS = [f"{m.upper()} {p}" for m, p, *_ in ENDPOINTS]


def _call(client, objects: Objects, method, path, payload):
    fields = vars(objects)
    url = "/api/v1" + path.format(**fields)
    if isinstance(payload, dict):
        payload = {k: int(v.format(**fields)) if v in ("{team}", "{config}") else v
                   for k, v in payload.items()}  # fmt: skip
    reply = getattr(client, method)(url, payload, format="json")
    if reply.status_code != 200 or method != "get" or "download" not in path:
        return reply
    reply.content_bytes = b"".join(reply.streaming_content)
    return reply


def _assert_error(reply, status):
    assert reply.status_code == status, reply.content[:300]
    body = reply.json()
    assert set(body) >= {"code", "message", "field"}
    assert body["code"] == {401: "not_authenticated", 403: "permission_denied",
                            404: "not_found"}[status]  # fmt: skip


@pytest.mark.parametrize("role", [V, M, A, OW])
@pytest.mark.parametrize(("method", "path", "payload", "least", "ok", "denied"), ENDPOINTS, ids=IDS)
def test_roles_of_the_team(world, objects, client_as, role, method, path, payload, least, ok,
                           denied):  # fmt: skip
    reply = _call(client_as(world.users_a[role]), objects, method, path, payload)
    if RANK[role] >= RANK[least]:
        assert reply.status_code == ok, reply.content[:300]
    else:
        _assert_error(reply, denied)


@pytest.mark.parametrize("role", [V, OW])
@pytest.mark.parametrize(("method", "path", "payload", "least", "ok", "denied"), ENDPOINTS, ids=IDS)
def test_another_team_finds_nothing(world, objects, client_as, role, method, path, payload,
                                    least, ok, denied):  # fmt: skip
    reply = _call(client_as(world.users_b[role]), objects, method, path, payload)
    _assert_error(reply, 404)


@pytest.mark.parametrize(("method", "path", "payload", "least", "ok", "denied"), ENDPOINTS, ids=IDS)
def test_nobody_signed_in_is_unauthorized(world, objects, client_as, method, path, payload,
                                          least, ok, denied):  # fmt: skip
    reply = _call(client_as(None), objects, method, path, payload)
    _assert_error(reply, 401)
    assert reply["WWW-Authenticate"].startswith("Bearer")


def test_the_download_streams_the_file(world, objects, client_as):
    reply = _call(client_as(world.users_a[V]), objects, "get",
                  "/runs/{run}/checkpoints/{checkpoint}/download", None)  # fmt: skip
    assert reply.content_bytes == b"weights"
    assert 'filename="run' in reply["Content-Disposition"]


def test_quotas_are_set_by_staff_only(world, objects, client_as):
    for role in (V, M, A, OW):
        reply = client_as(world.users_a[role]).put(
            f"/api/v1/teams/{objects.team}/quota", {"max_gpus": 99}, format="json"
        )
        _assert_error(reply, 403)
    _assert_error(
        client_as(world.users_b[OW]).put(f"/api/v1/teams/{objects.team}/quota", {}, format="json"),
        404,
    )
    staff = UserFactory(username="staff", is_staff=True)
    reply = client_as(staff).put(
        f"/api/v1/teams/{objects.team}/quota", {"max_gpus": 99}, format="json"
    )
    assert reply.status_code == 200 and reply.json()["max_gpus"] == 99


def test_lists_hold_only_the_callers_teams(world, launched, client_as):
    client = client_as(world.users_b[OW])
    runs = client.get("/api/v1/runs").json()["results"]
    experiments = client.get("/api/v1/experiments").json()["results"]
    teams = client.get("/api/v1/teams").json()
    assert {r["team"] for r in runs} == {world.team_b.pk}
    assert {e["team"] for e in experiments} == {world.team_b.pk}
    assert [t["slug"] for t in teams] == ["team-b"]
    # asking for team A's runs by filter gives nothing, not an error that confirms it exists
    assert client.get(f"/api/v1/runs?team={world.team_a.pk}").json()["results"] == []
