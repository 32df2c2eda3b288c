"""A pool job on a real local Ray head (the Jobs API), with the real dispatch and reconcile
code on PostgreSQL: two pooled runs share one submitted job; one member's abort never stops
it; when it dies, the pool ends and each member is handled like a solo run whose job died
(failed, queued again from its checkpoint while attempts remain) and packed into a new pool;
the cluster sweep stops the job of a pool that ended, never one that lives.

The pool job here is a sleeper standing in for `python -m workers.pool.job` (the entrypoint
is the one knob changed): what is under test is the control plane's handling of its job."""

from __future__ import annotations

import sys

import pytest

from paddock.clusters import dispatch, pools, tasks
from paddock.clusters.models import Pool, PoolMember, RayCluster
from paddock.clusters.ray_jobs import job_info, job_stop
from paddock.experiments.control import run_request_abort
from paddock.experiments.launch import experiment_launch
from paddock.experiments.models import Run
from paddock.teams.models import Role
from tests.conftest import wait_for
from tests.platform.conftest import TINY_SPEC, quiet_hooks, world  # noqa: F401  (fixtures, shared)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.usefixtures("quiet_hooks")]

SLEEPER = f"{sys.executable} -c 'import time; time.sleep(120)'"


def _launch(world, n):  # noqa: F811
    actor = world.actor(world.users_a[Role.MEMBER])
    spec = {**TINY_SPEC, "resources": {"pool": "auto"}}
    result = experiment_launch(actor=actor, team=world.team_a, name="pooled", spec=spec, seeds=n)
    return list(Run.objects.filter(experiment=result.experiment).order_by("id"))


def _status(address, sid):
    info = job_info(address=address, submission_id=sid)
    return None if info is None else info.status


def test_a_pool_job_survives_a_members_abort_and_its_death_retries_every_member(
    world,  # noqa: F811
    ray_head,
    monkeypatch,
    settings,
):
    address = ray_head["jobs_address"]
    RayCluster.objects.filter(pk=world.cluster.pk).update(address=address, resources={})
    monkeypatch.setattr(pools, "ENTRYPOINT", SLEEPER)
    monkeypatch.setattr(tasks, "FINAL_REPORT_GRACE_S", 0)
    settings.PADDOCK_ABORT_GRACE_S = 0
    stays, leaves = _launch(world, 2)
    submitted = []
    for run in (stays, leaves):
        order = dispatch.dispatch_prepare(run_id=run.pk)
        submitted.append(dispatch.dispatch_submit(order))
        run.refresh_from_db()
    assert submitted == [True, False]  # one job: the second member found it there
    pool = Pool.objects.get()
    assert stays.state == leaves.state == "starting"
    assert stays.ray_submission_id == leaves.ray_submission_id == pool.ray_submission_id
    wait_for(lambda: _status(address, pool.ray_submission_id) == "RUNNING", 60, "the pool job")

    # an abort of one member past the grace: the run is aborted, the pool's job keeps running
    Run.objects.filter(pk__in=[stays.pk, leaves.pk]).update(state="running")
    run_request_abort(actor=world.actor(world.users_a[Role.MEMBER]), run=leaves)
    tasks.run_reconcile()
    leaves.refresh_from_db()
    assert leaves.state == "aborted", leaves.state
    assert _status(address, pool.ray_submission_id) == "RUNNING"
    assert pools.members_settle(pool_id=pool.pk) == 1  # the hook's work, quieted here
    assert [m.run_id for m in pools.current_members(pool.pk)] == [stays.pk]

    # the pool's job dies: the pool ends, its remaining member is retried like a solo run
    job_stop(address=address, submission_id=pool.ray_submission_id)
    wait_for(lambda: _status(address, pool.ray_submission_id) == "STOPPED", 60, "the stop")
    counts = tasks.run_reconcile()
    assert counts["pools_ended"] == 1 and counts["retried"] == 1, counts
    pool.refresh_from_db()
    stays.refresh_from_db()
    assert pool.state == "ended"
    assert stays.state == "queued" and stays.attempts == 1
    assert stays.queued_reason.startswith("retrying after: ended STOPPED")
    assert stays.events.filter(message__contains="without a final report").exists()
    pools.members_settle(run_id=stays.pk)
    member = PoolMember.objects.get(run=stays)
    assert member.left_at is not None and member.left_reason == "the run is queued"
    # its next dispatch packs it into a new pool, a new job
    order = dispatch.dispatch_prepare(run_id=stays.pk)
    assert order.submission_id != pool.ray_submission_id and order.dispatch == 2
    assert Pool.objects.count() == 2
    # the cluster sweep leaves a live pool's job alone and stops one of an ended pool
    dispatch.dispatch_submit(order)
    wait_for(lambda: _status(address, order.submission_id) == "RUNNING", 60, "the new pool job")
    cluster = RayCluster.objects.get(pk=world.cluster.pk)
    assert tasks.jobs_left_behind_stop(cluster) == []
    Pool.objects.filter(ray_submission_id=order.submission_id).update(state="ended")
    assert tasks.jobs_left_behind_stop(cluster) == [order.submission_id]
    wait_for(lambda: _status(address, order.submission_id) == "STOPPED", 60, "the sweep's stop")
