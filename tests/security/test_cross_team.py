"""A member of team A probes every endpoint and every websocket route of team B.

The routes are read from the URL resolver and the websocket routing, so an endpoint added
later is probed without editing this file. For each route and method, an id of team B must
get exactly the answer a never-used id gets (same status, same code, same message): then
nothing tells A whether B's object exists. No answer may carry any of B's names, and
nothing of B's may change."""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from paddock.clusters.models import Pool, PoolMember, RayCluster
from paddock.experiments.models import Experiment, Run
from paddock.live.routing import websocket_urlpatterns
from paddock.sweeps.models import Sweep
from paddock.sweeps.services import sweep_create
from paddock.teams.models import ApiToken, Membership, Role, Team, TeamSecret
from paddock.teams.services import api_token_create
from tests.security.conftest import SECRET
from tests.security.wsclient import Ws

NOBODY = 987654321  # an id no row has
METHODS = ["get", "post", "put", "patch", "delete"]
# which object a URL parameter names, by the route's first segment for DRF's `pk`
PK_OF = {"teams": "team", "experiments": "experiment", "configs": "config", "runs": "run",
         "clusters": "cluster", "pools": "pool", "sweeps": "sweep"}  # fmt: skip
PARAM_OF = {"run_id": "run", "user_id": "user", "token_id": "token",
            "checkpoint_id": "checkpoint", "experiment_id": "experiment",
            "pool_id": "pool", "sweep_id": "sweep", "name": "secret",
            "alarm": "run"}  # fmt: skip
# every reference a query string or a body could carry, pointed at B's objects
QUERY = "team={team}&experiment={experiment}&run={run}&runs={run}&a={config}&b={config}&keys=x"
FIELD = re.compile(r"\(\?P<(\w+)>[^)]*\)|<(?:\w+:)?(\w+)>")


def _routes(resolver: URLResolver, prefix: str = "") -> list[str]:
    out = []
    for p in resolver.url_patterns:
        pattern = prefix + str(p.pattern).lstrip("^").rstrip("$")
        if isinstance(p, URLResolver):
            out += _routes(p, pattern)
        elif isinstance(p, URLPattern):
            out.append(pattern)
    return out


API_ROUTES = sorted(r for r in _routes(get_resolver()) if r.startswith("api/v1/"))


def _fill(route: str, ids: dict[str, int]) -> str:
    head = route.removeprefix("api/v1/").removeprefix("ws/").split("/")[0]

    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        return str(ids[PK_OF[head] if name == "pk" else PARAM_OF[name]])

    return "/" + FIELD.sub(value, route)


def _answer(reply) -> tuple:
    body = reply.json() if reply["Content-Type"].startswith("application/json") else {}
    message = re.sub(r"\d+", "N", str(body.get("message", ""))) if isinstance(body, dict) else ""
    return reply.status_code, body.get("code") if isinstance(body, dict) else None, message


def _text(reply) -> str:
    if getattr(reply, "streaming", False):
        return b"".join(reply.streaming_content).decode(errors="replace")
    return reply.content.decode(errors="replace")


def _b_state(team_b) -> tuple:
    run = Run.objects.get(pk=team_b.run)
    return (
        Team.objects.get(pk=team_b.team).name,
        sorted(Membership.objects.filter(team_id=team_b.team).values_list("user_id", "role")),
        ApiToken.objects.get(pk=team_b.token).revoked_at,
        Experiment.objects.filter(team_id=team_b.team).count(),
        sorted(Experiment.objects.get(pk=team_b.experiment).tags.values_list("name", flat=True)),
        (run.state, run.desired_state),
        RayCluster.objects.filter(team_id=team_b.team).values_list("name", "address").first(),
        sorted(Sweep.objects.filter(team_id=team_b.team).values_list("state", "end_reason")),
        sorted(TeamSecret.objects.filter(team_id=team_b.team).values_list("name", "sealed")),
    )


def _pool_hosting(run_id: int) -> int:
    """A pool whose one member is the run (pools are not team-scoped: A must not find it)."""
    run = Run.objects.get(pk=run_id)
    pool = Pool.objects.create(name="b-pool", cluster=RayCluster.objects.create(
        name="b-pool-cluster", address="http://127.0.0.1:1"), key={}, capacity=4)  # fmt: skip
    PoolMember.objects.create(pool=pool, run=run, run_dispatch=run.dispatch_count)
    return pool.pk


def _sweep_of(world, team_b) -> int:
    """A sweep of team B (one member launched, one waiting)."""
    owner = world.users_b[Role.OWNER]
    team = Team.objects.get(pk=team_b.team)
    result = sweep_create(actor=world.actor(owner), team=team, name=f"{SECRET} sweep",
                          spec={"train": {"steps": 5}}, method="grid",
                          params={"lora.r": [8, 16]}, parallel=1)  # fmt: skip
    return result.sweep.pk


def test_the_probe_covers_every_api_route():
    # the walk found the routes (a resolver change that hid them would make the probe vacuous)
    assert len(API_ROUTES) >= 25
    assert "api/v1/runs/(?P<pk>[0-9]+)/pause" in API_ROUTES
    assert "api/v1/runs/<int:run_id>/ingest" in API_ROUTES


@pytest.mark.parametrize("auth", ["session", "token"])
def test_team_a_learns_nothing_of_team_b_by_id(world, team_b, client_as, auth):
    client = client_as(None if auth == "token" else world.users_a[Role.OWNER])
    if auth == "token":
        owner_a = world.users_a[Role.OWNER]
        raw = api_token_create(actor=world.actor(owner_a), team=world.team_a, name="probe")[1]
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    kinds = ("team", "experiment", "config", "run", "user", "token", "checkpoint", "dataset",
             "cluster", "secret")  # fmt: skip
    b_ids = {k: getattr(team_b, k) for k in kinds}
    b_ids["pool"] = _pool_hosting(team_b.run)
    b_ids["sweep"] = _sweep_of(world, team_b)
    before = _b_state(team_b)
    none_ids = dict.fromkeys(b_ids, NOBODY)
    probed = 0
    for route in API_ROUTES:
        if route.startswith("api/v1/session/") or route in ("api/v1/schema/", "api/v1/docs/"):
            continue  # no ids: session_views and the schema are probed elsewhere
        for method in METHODS:
            answers = []
            for ids in (b_ids, none_ids):
                url = _fill(route, ids) + "?" + QUERY.format(**ids)
                body = {"team": ids["team"], "experiment": ids["experiment"], "spec": {},
                        "name": f"p{probed}-{ids['team']}", "username": "b-viewer",
                        "role": "viewer"}  # fmt: skip
                reply = getattr(client, method)(url, body, format="json")
                text = _text(reply)
                assert SECRET not in text and "team-b" not in text, (method, url, text[:300])
                assert reply.status_code < 500, (method, url, text[:300])
                answers.append(_answer(reply) if not 200 <= reply.status_code < 300 else None)
            probed += 1
            if FIELD.search(route):  # the route names an object: never served to A
                assert answers[0] is not None, (method, route, "served team B's object")
            assert answers[0] == answers[1], (method, route, answers)
    assert probed >= 100
    assert _b_state(team_b) == before


def test_guessing_ids_finds_only_the_own_teams_objects(world, team_b, launched, client_as):
    client = client_as(world.users_a[Role.OWNER])
    own_runs = set(Run.objects.filter(team=world.team_a).values_list("pk", flat=True))
    top = Run.objects.order_by("-pk").first().pk
    for run_id in range(1, top + 3):
        reply = client.get(f"/api/v1/runs/{run_id}")
        if run_id in own_runs:
            assert reply.status_code == 200
        else:
            assert reply.json() == {"code": "not_found", "message": "run not found",
                                    "field": None}, run_id  # fmt: skip
    listed = client.get("/api/v1/runs?page_size=100").content.decode()
    assert SECRET not in listed and str(team_b.run) not in re.findall(r'"id":\s*(\d+)', listed)


WS_ROUTES = [str(p.pattern) for p in websocket_urlpatterns]


async def _ws_connect(path: str, token: str, origin: bytes | None = b"http://127.0.0.1:8000"):
    ws = Ws(path, origin=origin, token=token)
    connected, code = await ws.connect()
    return ws, connected, code


@pytest.mark.django_db(transaction=True)
async def test_no_websocket_route_opens_for_another_team(world, team_b):
    from channels.db import database_sync_to_async

    owner_a = world.users_a[Role.OWNER]
    raw = await database_sync_to_async(
        lambda: api_token_create(actor=world.actor(owner_a), team=world.team_a, name="ws")[1]
    )()
    assert len(WS_ROUTES) >= 2
    for route in WS_ROUTES:
        closes = []
        for target in (team_b.run if "run" in route else team_b.experiment, NOBODY):
            ids = {"run": target, "experiment": target}
            communicator, connected, code = await _ws_connect(_fill(route, ids), raw)
            assert not connected, route
            closes.append(code)
            await communicator.close()
        assert closes[0] == closes[1] == 4403, (route, closes)


@pytest.mark.slow  # 7-15 s here: the accepted socket's consumer takes seconds to let go
@pytest.mark.django_db(transaction=True)
async def test_a_foreign_origin_is_refused(world, launched):
    from channels.db import database_sync_to_async

    viewer = world.users_a[Role.VIEWER]
    raw = await database_sync_to_async(
        lambda: api_token_create(actor=world.actor(viewer), team=world.team_a, name="ws")[1]
    )()
    path = f"/ws/runs/{launched[0]['runs'][0]['id']}/"
    ok, connected, _ = await _ws_connect(path, raw)
    assert connected  # the same token from the platform's own origin is let in
    await ok.close()
    # a browser's page of another site (no Origin is a program: test_ws_handshake.py)
    for origin in (b"https://evil.example", b"http://127.0.0.1.evil.example", b"null"):
        communicator, connected, _ = await _ws_connect(path, raw, origin=origin)
        assert not connected, origin
        await communicator.close()
