"""List endpoints cost a fixed number of queries, however many rows a page holds."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from paddock.experiments.metrics import metric_points_store
from paddock.experiments.models import Run, SampleSet
from paddock.teams.models import Role
from paddock.teams.services import api_token_create
from tests.platform.conftest import launch

# session (2) + the actor's memberships (1) + the page (+ tags prefetch, or the runs' last
# values: one statement for the page): the rest is N+1
LISTS = {
    "/api/v1/runs": 5,
    "/api/v1/experiments": 5,
    "/api/v1/teams": 4,
    "/api/v1/teams/{team}/members": 5,
    "/api/v1/teams/{team}/tokens": 5,
    "/api/v1/teams/{team}/audit": 5,
    "/api/v1/datasets": 4,
    "/api/v1/clusters": 4,
    "/api/v1/runs/{run}/events": 5,
    "/api/v1/runs/{run}/checkpoints": 5,
    "/api/v1/runs/{run}/events?before=999999999": 5,
    "/api/v1/runs/{run}/samples": 5,
}


def _grow(world, client, actor, times):
    for i in range(times):
        launch(client, world.team_a, backends=["torch", "vllm"], tags=[f"t{i}", "all"])
        api_token_create(actor=actor, team=world.team_a, name=f"t{i}")
    run = Run.objects.filter(team=world.team_a).order_by("id").first()
    start = run.checkpoints.count()
    for step in range(start, start + times):
        run.checkpoints.create(step=step, uri=f"file:///x/{step}")
        run.events.create(kind="log", message=f"step {step}", time=timezone.now())
        SampleSet.objects.create(run=run, step=step, items=[{"prompt": "p", "completion": "c"}])
        # every run of the list carries its last values: still one statement for the page
        metric_points_store(run_id=run.pk, points=[("reward/mean", step, 0.0, 1.0)])


def _count(client, url) -> int:
    with CaptureQueriesContext(connection) as queries:
        reply = client.get(url)
    assert reply.status_code == 200, reply.content[:200]
    return len(queries)


@pytest.mark.parametrize("path", sorted(LISTS))
def test_a_list_costs_the_same_for_1_or_10_rows(world, client_as, path,
                                                django_assert_max_num_queries):  # fmt: skip
    owner = world.users_a[Role.OWNER]
    client = client_as(owner)
    actor = world.actor(owner)
    _grow(world, client, actor, 1)
    run = Run.objects.filter(team=world.team_a).order_by("id").first()
    url = path.format(team=world.team_a.pk, run=run.pk)
    small = _count(client, url)
    _grow(world, client, actor, 9)
    with django_assert_max_num_queries(LISTS[path]):
        large = _count(client, url)
    assert large == small, (small, large)
