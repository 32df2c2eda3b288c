"""An `auto` pool is not team-scoped: team A's run and team B's run may share one pool job. A
member of team A learns nothing of B through REST (run detail, pools list and page, samples),
the websocket, or the run's token: one pooled run's token cannot ingest for its pool mate.

A named pool is its team's: team A asking for the name of team B's pool gets a pool of its
own, whatever B's pool is (full, of another key, on B's own cluster, stopping), and learns
nothing of B's through its run's waiting reason, events or the REST answers; an `auto` run
never lands in another team's named pool. Which team a pool is of is for staff only."""

from __future__ import annotations

import pytest

from paddock.clusters.dispatch import dispatch_prepare
from paddock.clusters.models import Pool, PoolMember, RayCluster
from paddock.experiments.launch import experiment_launch
from paddock.experiments.models import MetricPoint, Run, SampleSet
from paddock.experiments.tokens import run_token_mint
from paddock.teams.models import Role
from paddock.teams.services import api_token_create
from tests.platform.conftest import TINY_SPEC
from tests.platform.factories import UserFactory
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
    ws = Ws(f"/ws/runs/{mine.pk}/", token=raw)
    connected, _ = await ws.connect()
    assert connected
    try:
        first = await ws.receive(timeout=10)
        text = first.get("text") or (first.get("bytes") or b"").decode(errors="replace")
        assert '"snapshot"' in text and "mine prompt" in text, text[:300]  # its own samples
        assert SECRET not in text  # nothing of the pool mate's: names, samples
    finally:
        await ws.close()


def _b_owns_pool_sweep(world, settings, how: str) -> Pool:
    """Team B's named pool `sweep` (every name of B's carries the secret), standing `how`."""
    world.team_b.name = f"{SECRET} team"
    world.team_b.save()
    settings.PADDOCK_POOL_CAPACITY = 1 if how == "full" else 4
    spec = {**TINY_SPEC, "resources": {"pool": "sweep"}}
    if how == "of another key":
        spec["model"] = {"tiny": {"hidden_size": 48}}
    actor = world.actor(world.users_b[Role.OWNER])
    run = experiment_launch(actor=actor, team=world.team_b, name=f"{SECRET} exp", spec=spec).runs[0]
    assert dispatch_prepare(run_id=run.pk) is not None
    pool = Pool.objects.get(name="sweep")
    assert pool.team_id == world.team_b.pk
    if how == "on its own cluster":
        own = RayCluster.objects.create(
            name=f"{SECRET}-cluster", team=world.team_b, address="http://127.0.0.1:1",
            backends=["torch"],
        )  # fmt: skip
        Pool.objects.filter(pk=pool.pk).update(cluster=own)
    if how == "stopping":
        Pool.objects.filter(pk=pool.pk).update(state="stopping")
    return pool


@pytest.mark.django_db
@pytest.mark.usefixtures("quiet_hooks")
@pytest.mark.parametrize("how", ["full", "of another key", "on its own cluster", "stopping"])
def test_a_pool_name_of_another_team_is_a_pool_of_ones_own(world, client_as, settings, how):
    theirs = _b_owns_pool_sweep(world, settings, how)
    actor = world.actor(world.users_a[Role.MEMBER])
    spec = {**TINY_SPEC, "resources": {"pool": "sweep"}}
    mine = experiment_launch(actor=actor, team=world.team_a, name="mine", spec=spec).runs[0]
    order = dispatch_prepare(run_id=mine.pk)
    mine.refresh_from_db()
    # not squatted: A's run starts at once, in a pool `sweep` of A's own, a job of its own
    assert order is not None and mine.state == "dispatching", mine.queued_reason
    pool = Pool.objects.get(name="sweep", team=world.team_a)
    assert pool.pk != theirs.pk and order.submission_id == pool.ray_submission_id
    assert order.submission_id != Pool.objects.get(pk=theirs.pk).ray_submission_id
    assert list(PoolMember.objects.filter(pool=pool).values_list("run_id", flat=True)) == [mine.pk]
    # nothing of B's pool in A's run (its reasons, events) nor in any REST answer to A
    assert SECRET not in mine.queued_reason
    assert not mine.events.filter(message__contains=SECRET).exists()
    client = client_as(world.users_a[Role.MEMBER])
    detail = client.get(f"/api/v1/runs/{mine.pk}").json()
    assert detail["pool"]["id"] == pool.pk and detail["pool"]["members_total"] == 1
    assert [p["id"] for p in client.get("/api/v1/pools").json()] == [pool.pk]
    assert client.get(f"/api/v1/pools/{theirs.pk}").status_code == 404
    for url in (f"/api/v1/runs/{mine.pk}", f"/api/v1/runs/{mine.pk}/events", "/api/v1/pools",
                f"/api/v1/pools/{pool.pk}", "/api/v1/runs?page_size=100"):  # fmt: skip
        reply = client.get(url)
        assert reply.status_code == 200, (url, reply.content[:200])
        assert SECRET not in reply.content.decode(), url


@pytest.mark.django_db
@pytest.mark.usefixtures("quiet_hooks")
def test_an_auto_run_never_lands_in_another_teams_named_pool(world, settings):
    theirs = _b_owns_pool_sweep(world, settings, "with room")
    actor = world.actor(world.users_a[Role.MEMBER])
    mine = experiment_launch(actor=actor, team=world.team_a, name="mine", spec=POOLED).runs[0]
    assert dispatch_prepare(run_id=mine.pk) is not None
    joined = PoolMember.objects.get(run=mine).pool
    assert joined.pk != theirs.pk and joined.team_id is None and joined.name.startswith("auto_")
    assert not PoolMember.objects.filter(pool=theirs, run=mine).exists()


@pytest.mark.django_db
@pytest.mark.usefixtures("quiet_hooks")
def test_staff_tell_pools_of_one_name_apart_by_team_and_no_one_else_sees_it(
    world, client_as, settings
):
    theirs = _b_owns_pool_sweep(world, settings, "with room")
    actor = world.actor(world.users_a[Role.MEMBER])
    named = {**TINY_SPEC, "resources": {"pool": "sweep"}}
    for spec in (named, POOLED):
        run = experiment_launch(actor=actor, team=world.team_a, name="mine", spec=spec).runs[0]
        assert dispatch_prepare(run_id=run.pk) is not None
    mine = Pool.objects.get(name="sweep", team=world.team_a)
    auto = Pool.objects.get(team__isnull=True)
    staff = client_as(UserFactory(username="root", is_staff=True))
    pools = staff.get("/api/v1/pools").json()
    listed = {p["id"]: (p["name"], p["team"], p["team_name"]) for p in pools}
    assert listed == {
        theirs.pk: ("sweep", world.team_b.pk, world.team_b.name),
        mine.pk: ("sweep", world.team_a.pk, world.team_a.name),
        auto.pk: (auto.name, None, None),
    }
    page = staff.get(f"/api/v1/pools/{theirs.pk}").json()
    assert (page["team"], page["team_name"]) == (world.team_b.pk, world.team_b.name)
    # a member of A (even its owner) gets no pool's team, its own pools' included
    for user in (world.users_a[Role.VIEWER], world.users_a[Role.OWNER]):
        client = client_as(user)
        pools = client.get("/api/v1/pools").json()
        assert {p["id"] for p in pools} == {mine.pk, auto.pk}
        pages = [client.get(f"/api/v1/pools/{p}").json() for p in (mine.pk, auto.pk)]
        for answer in pools + pages:
            assert "team" not in answer and "team_name" not in answer, answer
        assert SECRET not in client.get("/api/v1/pools").content.decode()
