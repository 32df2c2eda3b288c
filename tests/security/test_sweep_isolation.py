"""A team without access to a sweep sees nothing of it: its REST answers are the not-found
of an id never used, its experiment's and its members' websockets refuse to open."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from paddock.experiments.models import Run
from paddock.sweeps.services import sweep_create
from paddock.teams.models import Role
from paddock.teams.services import api_token_create
from tests.security.test_cross_team import NOBODY
from tests.security.wsclient import Ws

pytestmark = pytest.mark.django_db(transaction=True)


def _sweep_of_a(world) -> tuple[int, int, int]:
    owner = world.users_a[Role.OWNER]
    result = sweep_create(actor=world.actor(owner), team=world.team_a, name="a's sweep",
                          spec={"train": {"steps": 5}}, method="grid",
                          params={"lora.r": [8, 16]}, parallel=1)  # fmt: skip
    sweep = result.sweep
    run = Run.objects.get(experiment_id=sweep.experiment_id)
    return sweep.pk, sweep.experiment_id, run.pk


async def test_another_team_gets_not_found_and_refused_sockets(world, client_as):
    sweep, experiment, run = await database_sync_to_async(_sweep_of_a)(world)
    other = await database_sync_to_async(client_as)(world.users_b[Role.OWNER])

    def answers(path_of):
        return [
            (r.status_code, r.json())
            for r in (
                other.get(path_of(sweep)),
                other.get(path_of(NOBODY)),
            )
        ]

    for path_of in (
        lambda i: f"/api/v1/sweeps/{i}",
        lambda i: f"/api/v1/experiments/{i if i == NOBODY else experiment}",
        lambda i: f"/api/v1/runs/{i if i == NOBODY else run}",
    ):
        seen, never = await database_sync_to_async(answers)(path_of)
        assert seen == never and seen[0] == 404, (seen, never)
    listed = await database_sync_to_async(lambda: other.get("/api/v1/sweeps").json())()
    assert listed["results"] == []
    owner_b = world.users_b[Role.OWNER]
    raw = await database_sync_to_async(
        lambda: api_token_create(actor=world.actor(owner_b), team=world.team_b, name="ws")[1]
    )()
    for path in (f"/ws/experiments/{experiment}/", f"/ws/runs/{run}/"):
        ws = Ws(f"{path}?token={raw}", origin=b"http://127.0.0.1:8000")
        connected, code = await ws.connect()
        await ws.close()
        assert (connected, code) == (False, 4403), path
