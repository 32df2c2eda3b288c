"""Celery tasks of dispatch. Each takes ids, re-reads the rows, and copes with a run that
changed meanwhile; all are safe to run twice (acks_late: a killed worker's task is
redelivered)."""

from __future__ import annotations

import logging
import re
import time

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from paddock.core.errors import DomainError
from paddock.experiments.models import Run
from paddock.experiments.models import RunState as S
from paddock.experiments.states import TERMINAL, run_fail, run_transition
from paddock.experiments.tokens import run_tokens_revoke_finished
from paddock.live.broadcast import broadcast_state

from .dispatch import (
    SNAPSHOT_FRESH_S,
    cluster_resources_record,
    dispatch_prepare,
    dispatch_submit,
    platform_tag,
    snapshots_refresh,
)
from .models import Pool, RayCluster
from .placement import run_bundles, wait_reason
from .pools import current_members, is_pool_submission, members_settle
from .ray_jobs import (
    ClusterUnreachable,
    JobRow,
    job_info,
    job_logs_tail,
    job_stop,
    jobs_unfinished,
)
from .services import cluster_probe_record, clusters_probe

log = logging.getLogger(__name__)
SUBMIT_RETRIES = 5
# how long the health beat (every 15 s) waits for all the clusters' answers at most
HEALTH_DEADLINE_S = 12.0
FINAL_REPORT_GRACE_S = 20
# after the hard stop of an aborted run's job, how long the job may take to end before the
# run is aborted anyway (Ray's stop sends SIGTERM, then SIGKILL 3 s later)
ABORT_STOP_GRACE_S = 30
DISPATCH_STUCK_S = 10  # a job that ended may still be flushing its last batch
# a pool dispatched this recently whose job Ray does not know yet is being submitted
SUBMIT_GRACE_S = 30
# a run in `starting`: why (its queued_reason) while its job is pending, and once it runs
PENDING_PREFIX = "the Ray job is pending: "
JOB_RUNS = "the Ray job runs: it bootstraps and builds its model before its first report"
# states in which a Ray job exists (or should) for the run
WATCHED = [S.STARTING, S.RUNNING, S.PAUSING, S.PAUSED, S.RESUMING, S.ABORTING]


def start_timeout_s() -> float:
    """How long a run may stay in `starting` (read per call: tests shorten it)."""
    return float(settings.PADDOCK_START_TIMEOUT_S)


def abort_grace_s() -> float:
    """How long an aborted run's running job has to stop on its own before it is stopped."""
    return float(settings.PADDOCK_ABORT_GRACE_S)


@shared_task(bind=True, acks_late=True, max_retries=SUBMIT_RETRIES)
def run_dispatch(self, run_id: int) -> str:
    snapshots_refresh(run_id=run_id)
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


@shared_task
def cluster_health() -> dict[str, bool]:
    """Every cluster probed at once (services.clusters_probe), none waited on past
    HEALTH_DEADLINE_S, so one slow cluster never delays the others' checks; then each
    one's answer stored, and its jobs that no run needs any more stopped."""
    clusters = list(RayCluster.objects.all())
    tag = {"paddock_platform": platform_tag()}
    probes = clusters_probe(clusters, deadline_s=HEALTH_DEADLINE_S, jobs_tagged=tag)
    states = {}
    for cluster in clusters:
        probe = probes[cluster.pk]
        states[cluster.name] = cluster_probe_record(cluster, probe)
        if not states[cluster.name] or probe.jobs is None:
            continue
        try:
            jobs_left_behind_stop(cluster, probe.jobs)
        except (ClusterUnreachable, RuntimeError) as exc:  # the next check tries again
            log.warning("sweep of %s for jobs left behind: %s", cluster.name, exc)
    return states


def _submission(sid: str) -> tuple[int, int] | None:
    match = re.fullmatch(r"paddock-run-(\d+)-d(\d+)", sid)
    return (int(match[1]), int(match[2])) if match else None


def _pool_job_needed(sid: str) -> bool | None:
    """Whether a pool's job is still needed (its pool's current dispatch, not ended); None
    when `sid` is not a pool's."""
    match = re.fullmatch(r"paddock-pool-(\d+)-d(\d+)", sid)
    if not match:
        return None
    pool = Pool.objects.filter(pk=int(match[1])).only("dispatch_count", "state").first()
    return (
        pool is not None and pool.dispatch_count == int(match[2]) and pool.state != Pool.State.ENDED
    )


def jobs_left_behind_stop(cluster: RayCluster, jobs: list[JobRow] | None = None) -> list[str]:
    """Stop this platform's unfinished Ray jobs that no run needs any more: a run that ended
    (aborted or failed while its job was still pending in Ray, so the stop is queued there
    until the job is placed), a dispatch superseded by a retry, a run deleted. A run that
    just ended is left FINAL_REPORT_GRACE_S for its job to exit on its own. `jobs`: the
    cluster's unfinished jobs of this platform, as a probe listed them (default: listed now)."""
    stopped = []
    settled = timezone.now() - timezone.timedelta(seconds=FINAL_REPORT_GRACE_S)
    if jobs is None:
        jobs = jobs_unfinished(
            address=cluster.address, metadata={"paddock_platform": platform_tag()}
        )
    for job in jobs:
        pool_needed = _pool_job_needed(job.submission_id)
        if pool_needed is not None:
            if not pool_needed:
                job_stop(address=cluster.address, submission_id=job.submission_id)
                stopped.append(job.submission_id)
            continue
        ids = _submission(job.submission_id)
        if ids is None:
            continue
        run = Run.objects.filter(pk=ids[0]).only("state", "dispatch_count", "finished_at").first()
        needed = run is not None and (
            run.dispatch_count == ids[1]
            and (run.state not in TERMINAL or (run.finished_at or timezone.now()) > settled)
        )
        if not needed:
            job_stop(address=cluster.address, submission_id=job.submission_id)
            log.info("stopped %s, a %s job no run needs", job.submission_id, job.status)
            stopped.append(job.submission_id)
    return stopped


@shared_task
def run_reconcile() -> dict[str, int]:
    """Compare each run that should have a job with its Ray job, and start what waits."""
    counts = {"checked": 0, "failed": 0, "retried": 0, "stopped": 0, "queued": 0}
    counts["pools_ended"] = pools_reconcile()
    for run in Run.objects.filter(state__in=WATCHED).select_related("cluster", "config"):
        if run.cluster is None or not run.ray_submission_id:
            if run.state == S.ABORTING:  # its cluster was removed: there is nothing to stop
                run_transition(run=run, to_state=S.ABORTED, reason="no job to stop")
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


def _in_state_s(run: Run) -> float:
    """Seconds since the run entered its state (rows from before `state_since`: since the
    last save)."""
    return (timezone.now() - (run.state_since or run.updated_at)).total_seconds()


def _reconcile_one(run: Run, counts: dict[str, int]) -> None:
    address, sid = run.cluster.address, run.ray_submission_id
    info = job_info(address=address, submission_id=sid)
    if run.state == S.ABORTING:
        _reconcile_abort(run, info, counts)
        return
    if info is not None and info.status in ("PENDING", "RUNNING"):
        if run.state == S.STARTING:
            _reconcile_start(run, info, counts)
        return
    if (
        info is not None
        and info.end_time_s
        and time.time() - info.end_time_s < FINAL_REPORT_GRACE_S
    ):
        return  # let the job's last batch arrive before judging
    # the job is gone: stopped, failed, finished without a final status, or vanished
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
    _fail(run, f"{detail}\n--- job log tail ---\n{tail}", what, counts)


def _fail(run: Run, error: str, what: str, counts: dict[str, int]) -> None:
    counts["failed"] += 1
    if run_fail(run=run, error=error, retry_reason=what):
        counts["retried"] += 1


def _reconcile_start(run: Run, info, counts: dict[str, int]) -> None:
    """A run in `starting` whose job is pending or running: say why a pending job waits,
    and past the start deadline stop the job and fail the run (a retry, while attempts
    remain, waits in `queued` until the cluster can place it)."""
    address, sid = run.cluster.address, run.ray_submission_id
    waited, deadline = _in_state_s(run), start_timeout_s()
    if waited > deadline:
        if not is_pool_submission(sid):  # a pool's job hosts other runs: only this one fails
            job_stop(address=address, submission_id=sid)
            counts["stopped"] += 1
        where = run.queued_reason or f"its Ray job {sid} was still {info.status}" + (
            f" ({info.message})" if info.message else ""
        )
        error = (
            f"the run did not start within {deadline:g} s (PADDOCK_START_TIMEOUT_S): {where}; "
            "the job was stopped"
        )
        counts["timed_out"] = counts.get("timed_out", 0) + 1
        _fail(run, error, f"no start within {deadline:g} s", counts)
        return
    if info.status != "PENDING":
        # the driver runs: it bootstraps, builds its model, then reports `running`. A reason
        # kept from while the job was pending (Ray says PENDING while it sets up the job's
        # runtime environment too, its CPUs already taken) would say it still waits for them
        if run.queued_reason.startswith(PENDING_PREFIX):
            _starting_reason(run, JOB_RUNS)
        return
    bundles = run_bundles(run.config.run_spec.resources)
    snapshot = run.cluster.resources or {}
    if time.time() - snapshot.get("observed_at", 0) > SNAPSHOT_FRESH_S:
        snapshot = cluster_resources_record(run.cluster) or snapshot
    why = wait_reason(bundles=bundles, cluster_name=run.cluster.name, snapshot=snapshot)
    _starting_reason(run, f"{PENDING_PREFIX}{why or info.message or 'not placed yet'}")


def _starting_reason(run: Run, detail: str) -> None:
    detail = detail[: Run._meta.get_field("queued_reason").max_length]
    if run.queued_reason != detail:
        # `queued_reason` is the run's "why it waits" in `starting` too; run_transition
        # clears it when the run moves on. The state's clock (state_since) does not move.
        Run.objects.filter(pk=run.pk, state=S.STARTING).update(queued_reason=detail)
        transaction.on_commit(lambda: broadcast_state(run.pk))


def _reconcile_abort(run: Run, info, counts: dict[str, int]) -> None:
    """An abort reaches `aborted` whatever the job does: a job that never started (Ray
    keeps a stopped PENDING job until it is placed) is stopped and the run aborted at once;
    a running job has PADDOCK_ABORT_GRACE_S to end on its own, is then stopped, and the run is
    aborted at the latest ABORT_STOP_GRACE_S later, whether the job has ended or not."""
    address, sid = run.cluster.address, run.ray_submission_id
    if is_pool_submission(sid) and info is not None and info.status in ("PENDING", "RUNNING"):
        _reconcile_pooled_abort(run, info)
        return
    if info is not None and info.status == "PENDING":
        job_stop(address=address, submission_id=sid)
        counts["stopped"] += 1
        run_transition(
            run=run, to_state=S.ABORTED,
            reason="its Ray job had not started (still pending); the job was stopped",
        )  # fmt: skip
        return
    if info is not None and info.status == "RUNNING":
        waited, grace = _in_state_s(run), abort_grace_s()
        if waited <= grace:
            return  # the driver stops between steps and reports `aborted`
        job_stop(address=address, submission_id=sid)  # it ignored the abort
        counts["stopped"] += 1
        if waited > grace + ABORT_STOP_GRACE_S:
            run_transition(
                run=run, to_state=S.ABORTED,
                reason=f"its Ray job did not end within {ABORT_STOP_GRACE_S} s of the stop",
            )  # fmt: skip
        return
    if (
        info is not None
        and info.end_time_s
        and time.time() - info.end_time_s < FINAL_REPORT_GRACE_S
        and _in_state_s(run) < abort_grace_s() + ABORT_STOP_GRACE_S
    ):
        return  # let the job's last batch (its own `aborted`) arrive
    run_transition(run=run, to_state=S.ABORTED, reason="the job stopped")


def _reconcile_pooled_abort(run: Run, info) -> None:
    """An aborted member of a live pool job: the job is never stopped for it (it hosts other
    runs). Its own reporter is told to abort and reports `aborted`; a job that has not
    placed it yet, or ignores the abort past the grace, has it aborted here, and the pool's
    next members answer no longer lists it (the job makes it leave)."""
    if info.status == "RUNNING" and _in_state_s(run) <= abort_grace_s():
        return
    where = "had not started" if info.status == "PENDING" else "did not stop within the grace"
    run_transition(run=run, to_state=S.ABORTED, reason=f"its pool's job {where}; it left the pool")


def pools_reconcile() -> int:
    """End the pools whose job is gone (stopped, failed, finished, vanished; past the grace
    for a last report) or that have nothing left to host while their job never asked (a
    job still pending in Ray, whose stop is queued there). Their members' runs are judged
    by run_reconcile, each like a solo run whose job died (retried from its checkpoint).
    Returns how many pools ended."""
    ended = 0
    for pool in Pool.objects.exclude(state=Pool.State.ENDED).select_related("cluster"):
        members_settle(pool_id=pool.pk)
        try:
            info = job_info(address=pool.cluster.address, submission_id=pool.ray_submission_id)
        except ClusterUnreachable:
            continue
        alive = info is not None and info.status in ("PENDING", "RUNNING")
        since = (timezone.now() - pool.updated_at).total_seconds()
        if info is None and since < SUBMIT_GRACE_S:
            continue  # just dispatched: its job may not be submitted yet
        if alive:
            idle = not _pool_has_members(pool) and (
                info.status == "PENDING" or pool.state == Pool.State.STOPPING
            )
            quiet = since > ABORT_STOP_GRACE_S  # told to stop that long ago
            if not (idle and (info.status == "PENDING" or quiet)):
                continue
            job_stop(address=pool.cluster.address, submission_id=pool.ray_submission_id)
        elif (
            info is not None
            and info.end_time_s
            and time.time() - info.end_time_s < FINAL_REPORT_GRACE_S
        ):
            continue
        what = (
            "its job was stopped"
            if alive
            else ("its job vanished" if info is None else f"its job ended {info.status}")
        )
        if (
            Pool.objects.filter(pk=pool.pk, dispatch_count=pool.dispatch_count)
            .exclude(state=Pool.State.ENDED)
            .update(state=Pool.State.ENDED)
        ):
            ended += 1
            log.info("pool %s dispatch %s ended: %s", pool.name, pool.dispatch_count, what)
    return ended


def _pool_has_members(pool: Pool) -> bool:
    return current_members(pool.pk).exists()
