"""A run in `starting` says why it has not started: while Ray holds its job PENDING, what the
job waits for; once the job runs (it bootstraps and builds its model), no longer that. Ray
reports a job PENDING while it sets up the job's runtime environment too, its CPUs already
taken, so a reason read then ("waiting for 1 CPU; the cluster local has 0 free") used to
stay on a run whose job was building its model. The job's status is given as Ray's job
info would give it (JobInfo), the rows are real."""

import pytest

from paddock.clusters.dispatch import dispatch_prepare
from paddock.clusters.ray_jobs import JobInfo
from paddock.clusters.tasks import JOB_RUNS, _reconcile_start
from paddock.experiments.launch import experiment_launch
from paddock.experiments.models import Run
from paddock.experiments.states import run_transition
from paddock.teams.models import Role
from tests.platform.conftest import TINY_SPEC

pytestmark = pytest.mark.usefixtures("quiet_hooks")

PENDING = "the Ray job is pending: waiting for 1 CPU; the cluster shared has 0 free"


def test_a_pending_reason_gives_way_once_the_job_runs(world):
    world.cluster.resources = {}
    world.cluster.save()
    actor = world.actor(world.users_a[Role.MEMBER])
    run = experiment_launch(actor=actor, team=world.team_a, name="e", spec=TINY_SPEC).runs[0]
    assert dispatch_prepare(run_id=run.pk) is not None
    run.refresh_from_db()
    run_transition(run=run, to_state="starting", dispatch=run.dispatch_count)
    Run.objects.filter(pk=run.pk).update(queued_reason=PENDING)
    run.refresh_from_db()
    counts = {}
    _reconcile_start(run, JobInfo(status="RUNNING", message=""), counts)
    run.refresh_from_db()
    assert (run.state, run.queued_reason) == ("starting", JOB_RUNS)
    # another reason (none of the pending kind) is left alone
    Run.objects.filter(pk=run.pk).update(queued_reason="something else")
    run.refresh_from_db()
    _reconcile_start(run, JobInfo(status="RUNNING", message=""), counts)
    run.refresh_from_db()
    assert run.queued_reason == "something else" and counts == {}
