"""Celery tasks of dispatch. Each takes ids, re-reads the rows, and copes with a run that
changed meanwhile; all are safe to run twice (acks_late: a killed worker's task is
redelivered)."""

from __future__ import annotations

import logging
import time

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from paddock.api.errors import DomainError
from paddock.experiments.models import Run
from paddock.experiments.models import RunState as S
from paddock.experiments.states import run_transition
from paddock.experiments.tokens import run_tokens_revoke_finished

from .dispatch import dispatch_prepare, dispatch_submit
from .models import RayCluster
from .ray_jobs import ClusterUnreachable, cluster_version, job_info, job_logs_tail, job_stop

log = logging.getLogger(__name__)
SUBMIT_RETRIES = 5
ABORT_GRACE_S = getattr(settings, "PADDOCK_ABORT_GRACE_S", 30)
FINAL_REPORT_GRACE_S = 20
DISPATCH_STUCK_S = 10  # a job that ended may still be flushing its last batch
# states in which a Ray job exists (or should) for the run
WATCHED = [S.STARTING, S.RUNNING, S.PAUSING, S.PAUSED, S.RESUMING, S.ABORTING]


@shared_task(bind=True, acks_late=True, max_retries=SUBMIT_RETRIES)
def run_dispatch(self, run_id: int) -> str:
    order = dispatch_prepare(run_id=run_id)
    if order is None:
        return "waiting"
    try:
        dispatch_submit(order)
    except ClusterUnreachable as exc:
        if self.request.retries < SUBMIT_RETRIES:
            raise self.retry(exc=exc, countdown=min(2**self.request.retries, 30)) from exc
        _cluster_down(order.cluster_id, str(exc))
        _requeue(run_id, order.dispatch, f"cluster unreachable: {exc}")
        return "requeued"
    return "submitted"


def _requeue(run_id: int, dispatch: int, reason: str) -> None:
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.state == S.DISPATCHING and run.dispatch_count == dispatch:
            run_transition(run=run, to_state=S.QUEUED, reason=reason)


def _cluster_down(cluster_id: int, error: str) -> None:
    RayCluster.objects.filter(pk=cluster_id).update(healthy=False, health_error=error[:2000])


@shared_task(acks_late=True)
def run_stop(run_id: int) -> str:
    """A hard stop of the run's job: for a job that ignored an abort past its grace."""
    run = Run.objects.select_related("cluster").filter(pk=run_id).first()
    if run is None or run.cluster is None or not run.ray_submission_id:
        return "nothing to stop"
    job_stop(address=run.cluster.address, submission_id=run.ray_submission_id)
    return "stopped"


@shared_task
def cluster_health() -> dict[str, bool]:
    states = {}
    for cluster in RayCluster.objects.all():
        try:
            version = cluster_version(address=cluster.address)
        except ClusterUnreachable as exc:
            RayCluster.objects.filter(pk=cluster.pk).update(healthy=False, health_error=str(exc))
            states[cluster.name] = False
            continue
        labels = {**cluster.labels, "ray_version": version}
        RayCluster.objects.filter(pk=cluster.pk).update(
            healthy=True, health_error="", last_seen_at=timezone.now(), labels=labels
        )
        states[cluster.name] = True
    return states


@shared_task
def run_reconcile() -> dict[str, int]:
    """Compare each run that should have a job with its Ray job, and start what waits."""
    counts = {"checked": 0, "failed": 0, "retried": 0, "stopped": 0, "queued": 0}
    for run in Run.objects.filter(state__in=WATCHED).select_related("cluster"):
        if run.cluster is None or not run.ray_submission_id:
            continue
        counts["checked"] += 1
        try:
            _reconcile_one(run, counts)
        except ClusterUnreachable:
            continue  # cluster_health marks it; the run waits for it to come back
        except DomainError as exc:  # the run moved on meanwhile (e.g. its job reported)
            log.info("reconcile of run %s: %s", run.pk, exc.message)
    # a dispatch whose task died between taking its number and submitting (a worker killed
    # mid-task): submit it again under the same id; Ray keeps exactly one job
    stuck = timezone.now() - timezone.timedelta(seconds=DISPATCH_STUCK_S)
    for run_id in Run.objects.filter(state=S.DISPATCHING, updated_at__lt=stuck).values_list(
        "id", flat=True
    ):
        run_dispatch.delay(run_id)
        counts["redispatched"] = counts.get("redispatched", 0) + 1
    stale = timezone.now() - timezone.timedelta(seconds=5)
    for run_id in Run.objects.filter(state=S.QUEUED, desired_state="running", updated_at__lt=stale)\
            .order_by("created_at").values_list("id", flat=True)[:50]:  # fmt: skip
        run_dispatch.delay(run_id)
        counts["queued"] += 1
    counts["tokens_revoked"] = run_tokens_revoke_finished()
    return counts


def _reconcile_one(run: Run, counts: dict[str, int]) -> None:
    address, sid = run.cluster.address, run.ray_submission_id
    info = job_info(address=address, submission_id=sid)
    if info is not None and info.status in ("PENDING", "RUNNING"):
        age = (timezone.now() - run.updated_at).total_seconds()
        if run.state == S.ABORTING and age > ABORT_GRACE_S:
            job_stop(address=address, submission_id=sid)  # it ignored the abort
            counts["stopped"] += 1
        return
    if (
        info is not None
        and info.end_time_s
        and time.time() - info.end_time_s < FINAL_REPORT_GRACE_S
    ):
        return  # let the job's last batch arrive before judging
    # the job is gone: stopped, failed, finished without a final status, or vanished
    if run.state == S.ABORTING:
        run_transition(run=run, to_state=S.ABORTED, reason="the job stopped")
        return
    if run.state == S.PAUSED:
        return  # released on pause; a resume starts the next dispatch
    if run.state == S.RESUMING:
        run_transition(run=run, to_state=S.QUEUED, reason="resuming from the last checkpoint")
        transaction.on_commit(lambda: run_dispatch.delay(run.pk))
        return
    what = "vanished from its cluster" if info is None else f"ended {info.status}"
    tail = "" if info is None else job_logs_tail(address=address, submission_id=sid)
    detail = f"the Ray job {sid} {what} without a final report" + (
        f": {info.message}" if info is not None and info.message else ""
    )
    # failed and, with attempts left, queued again in one transaction: no reader (a viewer,
    # the API, a test polling for a final state) may see a retried run as finally failed
    with transaction.atomic():
        run_transition(run=run, to_state=S.FAILED, error=f"{detail}\n--- job log tail ---\n{tail}")
        counts["failed"] += 1
        run.refresh_from_db()
        if run.attempts < run.max_attempts:
            run_transition(run=run, to_state=S.QUEUED, reason=f"retrying after: {what}")
            transaction.on_commit(lambda: run_dispatch.delay(run.pk))
            counts["retried"] += 1
