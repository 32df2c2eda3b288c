"""Two pooled runs end to end with real parts: uvicorn (the job doors and ingest), a Celery
worker with beat (dispatch and reconcile), a local Ray head, PostgreSQL, and the real pool
job `python -m workers.pool.job` training both runs' adapters on one tiny base model."""

from __future__ import annotations

import pytest

from paddock.clusters.models import Pool, PoolMember, RayCluster
from paddock.experiments.launch import experiment_launch
from paddock.experiments.models import MetricPoint, Run
from paddock.teams.access import actor_for
from paddock.teams.models import AuditEvent
from tests.conftest import wait_for
from tests.integration.test_dispatch import (
    FAST_SPEC,
    member_on_local_cluster,
    stack,  # noqa: F401  (the module's fixture)
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_two_pooled_runs_succeed_in_one_pool_job(stack):  # noqa: F811
    team, user = member_on_local_cluster(stack)
    spec = {**FAST_SPEC, "resources": {"pool": "auto"}}
    result = experiment_launch(actor=actor_for(user=user), team=team, name="pooled", spec=spec,
                               seeds=2)  # fmt: skip
    runs = list(Run.objects.filter(experiment=result.experiment).order_by("id"))
    assert len(runs) == 2

    def finished():
        for run in runs:
            run.refresh_from_db()
        return all(r.state in ("succeeded", "failed", "aborted") for r in runs)

    try:
        wait_for(finished, 150, "both pooled runs to finish", 0.5)
    except TimeoutError as exc:
        cluster = RayCluster.objects.get(name="test-local")
        seen = [(r.state, r.queued_reason, r.error[-300:]) for r in runs]
        raise AssertionError(f"{exc}: {seen}; cluster {cluster.health_error!r}") from None
    assert [r.state for r in runs] == ["succeeded", "succeeded"], [r.error for r in runs]
    (pool,) = Pool.objects.all()
    assert {r.ray_submission_id for r in runs} == {pool.ray_submission_id}
    assert [r.dispatch_count for r in runs] == [1, 1]
    members = PoolMember.objects.filter(pool=pool)
    assert sorted(members.values_list("run_id", flat=True)) == [r.pk for r in runs]
    for run in runs:  # each run reported through its own stream
        assert MetricPoint.objects.filter(run=run, key="reward/mean").count() == 3
    # the pool's job saw no member left and exited; every membership closed, audited
    wait_for(lambda: all(m.left_at for m in PoolMember.objects.filter(pool=pool)), 30,
             "the memberships to close")  # fmt: skip
    actions = AuditEvent.objects.filter(team=team, action__startswith="pool.")
    assert sorted(actions.values_list("action", flat=True)) == ["pool.join"] * 2 + [
        "pool.leave"] * 2  # fmt: skip
