"""A pool is not team-scoped: team A's run and team B's run may share one pool job. A member
of team A learns nothing of B through REST (run detail, pools list and page, samples), the
websocket, or the run's token: one pooled run's token cannot ingest for its pool mate."""

from __future__ import annotations

import pytest

from paddock.clusters.dispatch import dispatch_prepare
from paddock.clusters.models import Pool
from paddock.experiments.launch import experiment_launch
from paddock.experiments.models import MetricPoint, Run, SampleSet
from paddock.experiments.tokens import run_token_mint
from paddock.teams.models import Role
from paddock.teams.services import api_token_create
from tests.platform.conftest import TINY_SPEC
from tests.security.conftest import SECRET
from tests.security.wsclient import Ws

POOLED = {**TINY_SPEC, "resources": {"pool": "auto"}}


def _pooled_pair(world) -> tuple[Run, Run]:
    """A run of team A and a run of team B (every name of B's carries the secret), packed
    into one pool by the dispatch code; each has a sample set of its own."""
    world.team_b.name = f"{SECRET} team"
    world.team_b.save()
    runs = []
    for team, users, name in ((world.team_a, world.users_a, "mine"),
                              (world.team_b, world.users_b, f"{SECRET} experiment")):  # fmt: skip
        actor = world.actor(users[Role.OWNER])
        run = experiment_launch(actor=actor, team=team, name=name, spec=POOLED).runs[0]
        assert dispatch_prepare(run_id=run.pk) is not None
        run.refresh_from_db()
        items = [{"prompt": f"{name} prompt", "completion": "x", "reward": 1.0}]
        SampleSet.objects.create(run=run, step=1, dispatch=1, items=items)
        runs.append(run)
    assert Pool.objects.count() == 1 and runs[0].ray_submission_id == runs[1].ray_submission_id
    return runs[0], runs[1]


@pytest.mark.django_db
@pytest.mark.usefixtures("quiet_hooks")
def test_team_a_sees_its_pool_share_and_nothing_of_team_b(world, client_as):
    mine, theirs = _pooled_pair(world)
    pool = Pool.objects.get()
    client = client_as(world.users_a[Role.VIEWER])
    detail = client.get(f"/api/v1/runs/{mine.pk}").json()
    assert detail["pool"]["name"] == pool.name and detail["pool"]["share"] == 0.5
    assert detail["pool"]["members_of_your_team"] == [mine.pk]
    assert detail["pool"]["members_total"] == 2
    listed = client.get("/api/v1/pools").json()
    assert [p["id"] for p in listed] == [pool.pk]
    page = client.get(f"/api/v1/pools/{pool.pk}").json()
    assert [m["run"] for m in page["members"]] == [mine.pk] and page["members_total"] == 2
    for url in (f"/api/v1/runs/{mine.pk}", "/api/v1/pools", f"/api/v1/pools/{pool.pk}",
                f"/api/v1/runs/{mine.pk}/samples", f"/api/v1/runs/{mine.pk}/events",
                "/api/v1/runs?page_size=100"):  # fmt: skip
        reply = client.get(url)
        assert reply.status_code == 200, (url, reply.content[:200])
        text = reply.content.decode()
        assert SECRET not in text, (url, text[:300])
        assert f'"run": {theirs.pk}' not in text and f'"run":{theirs.pk}' not in text, url
    # B's run itself stays a not-found to A, pool or not
    assert client.get(f"/api/v1/runs/{theirs.pk}").status_code == 404
    assert client.get(f"/api/v1/runs/{theirs.pk}/samples").status_code == 404
    # an outsider (no run in the pool) does not find the pool at all
    assert client_as(world.outsider).get(f"/api/v1/pools/{pool.pk}").status_code == 404
    assert client_as(world.outsider).get("/api/v1/pools").json() == []


@pytest.mark.django_db
@pytest.mark.usefixtures("quiet_hooks")
def test_a_pooled_runs_token_cannot_ingest_for_its_pool_mate(world, client):
    mine, theirs = _pooled_pair(world)
    token = run_token_mint(run=mine, dispatch=1)
    body = {"dispatch": 1, "seq": 1, "events": [
        {"type": "metric", "step": 1, "time": 1764490000.0, "values": {"loss": 1.0}}]}  # fmt: skip
    reply = client.post(
        f"/api/v1/runs/{theirs.pk}/ingest", body, content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip
    assert (reply.status_code, reply.json()["code"]) == (401, "token_invalid")
    assert not MetricPoint.objects.filter(run=theirs).exists()
    own = client.post(
        f"/api/v1/runs/{mine.pk}/ingest", body, content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip
    assert own.status_code == 200, own.content[:200]  # the same token is good for its own run


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("quiet_hooks")
async def test_the_websocket_of_a_pooled_run_carries_nothing_of_the_pool_mate(world):
    from channels.db import database_sync_to_async

    def setup():
        mine, _ = _pooled_pair(world)
        owner = world.users_a[Role.VIEWER]
        raw = api_token_create(actor=world.actor(owner), team=world.team_a, name="ws")[1]
        return mine, raw

    mine, raw = await database_sync_to_async(setup)()
    ws = Ws(f"/ws/runs/{mine.pk}/?token={raw}")
    connected, _ = await ws.connect()
    assert connected
    try:
        first = await ws.receive(timeout=10)
        text = first.get("text") or (first.get("bytes") or b"").decode(errors="replace")
        assert '"snapshot"' in text and "mine prompt" in text, text[:300]  # its own samples
        assert SECRET not in text  # nothing of the pool mate's: names, samples
    finally:
        await ws.close()
