"""Dispatch: from a queued run to a Ray job, exactly once per dispatch number.

Every start of a job is a dispatch N of its run (docs/architecture.md). `dispatch_prepare` takes the
next number, picks a cluster and moves the run to `dispatching` in one transaction; only
then is the job submitted, under the submission id `paddock-run-<id>-d<N>`. A task that dies
between the two (a worker killed mid-task) is redelivered (acks_late) and finds the run
still `dispatching` with the same N: it submits the same id again, Ray refuses the
duplicate, and exactly one job exists.

A run is dispatched only to a cluster that can place it now (placement.py, against the
cluster's resources as its health check or this dispatch last read them); else it waits in
`queued` with the reason."""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from paddock.experiments.models import Run
from paddock.experiments.models import RunState as S
from paddock.experiments.preflight import preflight_hold
from paddock.experiments.selectors import team_usage, user_usage
from paddock.experiments.states import run_transition
from paddock.live.broadcast import broadcast_state
from paddock.monitoring.metrics import dispatch_started
from paddock.teams.models import TeamQuota
from paddock.teams.services import user_quota_lock

from . import pools
from .bootstrap_tokens import bootstrap_token_for
from .environments import offered_environments, spec_environment
from .models import Pool, RayCluster
from .placement import (
    Bundle,
    entrypoint_resources,
    never_placeable,
    run_bundles,
    snapshot_less,
    wait_reason,
)
from .ray_jobs import ClusterUnreachable, cluster_resources, job_submit

log = logging.getLogger(__name__)
WORKERS_DIR = Path(__file__).resolve().parents[3] / "workers"
ENTRYPOINT = "python -m workers.job"
# a dispatch re-reads a cluster's free resources older than this (the dashboard's own
# figures lag by the autoscaler monitor's period, a few seconds)
SNAPSHOT_FRESH_S = 10
# a job placed just before the monitor's report may not be in its figures yet
REPORT_LAG_S = 2


def submission_id_for(*, run_id: int, dispatch: int) -> str:
    return f"paddock-run-{run_id}-d{dispatch}"


@dataclass(frozen=True)
class DispatchOrder:
    run_id: int
    dispatch: int
    submission_id: str
    cluster_id: int
    address: str
    num_cpus: float
    num_gpus: float
    env: dict[str, str]
    entrypoint: str = ENTRYPOINT
    metadata: dict[str, str] | None = None  # what marks the job besides the platform tag


def platform_tag() -> str:
    """Marks the Ray jobs of this platform (job metadata `paddock_platform`), so that the
    sweep for jobs left behind never touches those of another platform sharing a cluster
    (their run ids mean other runs). Derived from the secret key: stable across restarts."""
    mac = hmac.new(settings.SECRET_KEY.encode(), b"paddock-platform", hashlib.sha256)
    return mac.hexdigest()[:16]


def _candidates(run: Run):
    clusters = RayCluster.objects.filter(healthy=True).filter(
        Q(team__isnull=True) | Q(team_id=run.team_id)
    )
    if run.cluster_id is not None:
        clusters = clusters.filter(pk=run.cluster_id)
    env = spec_environment(run.config.run_spec)
    return [
        c
        for c in clusters.order_by("team_id", "id")
        if run.backend in c.backends and (env is None or env in offered_environments(c))
    ]


def snapshots_refresh(*, run_id: int) -> None:
    """Re-read the resources of the clusters the run may go to when their snapshot is older
    than SNAPSHOT_FRESH_S. Outside any transaction: it waits on the clusters' dashboards."""
    run = Run.objects.filter(pk=run_id).first()
    if run is None or run.state != S.QUEUED:
        return
    for cluster in _candidates(run):
        observed = (cluster.resources or {}).get("observed_at", 0)
        if time.time() - observed > SNAPSHOT_FRESH_S:
            cluster_resources_record(cluster)


def cluster_resources_record(cluster: RayCluster) -> dict | None:
    """Probe the cluster's resources and store the snapshot; None (kept as it was) when the
    cluster does not answer."""
    try:
        snapshot = cluster_resources(address=cluster.address)
    except ClusterUnreachable:
        return None
    return cluster_resources_store(cluster, snapshot)


def cluster_resources_store(cluster: RayCluster, snapshot: dict | None) -> dict:
    RayCluster.objects.filter(pk=cluster.pk).update(resources=snapshot or {})
    cluster.resources = snapshot or {}
    return cluster.resources


def _taken_since_report(cluster: RayCluster, run: Run) -> list:
    """The bundles of the cluster's other runs dispatched since its figures were reported
    (what they cannot show yet): without them, runs launched together would all see the
    same free CPUs and all be submitted, and all but one would wait PENDING in Ray."""
    snapshot = cluster.resources or {}
    reported = snapshot.get("reported_at") or snapshot.get("observed_at")
    if not reported:
        return []
    since = datetime.fromtimestamp(reported - REPORT_LAG_S, tz=UTC)
    others = (
        Run.objects.filter(cluster=cluster, state__in=[S.DISPATCHING, S.STARTING])
        .filter(state_since__gte=since)
        .exclude(pk=run.pk)
        .select_related("config")
    )
    taken = [
        b
        for other in others.exclude(ray_submission_id__startswith="paddock-pool-")
        for b in run_bundles(other.config.run_spec.resources)
    ]
    # a pool's job holds what its dispatch reserved once, however many members joined it
    pools_started = Pool.objects.filter(
        cluster=cluster, updated_at__gte=since, state__in=pools.LIVE
    )
    return taken + [
        Bundle("a pool's job", {"CPU": p.num_cpus, "GPU": p.num_gpus}, {}) for p in pools_started
    ]


def cluster_pick(*, run: Run) -> tuple[RayCluster | None, str | None]:
    """A healthy cluster that the run's team may use, that advertises its backend and that
    can place its resources now: the one chosen at launch, else the team's own before
    shared ones. Else None and the reason it waits (the first candidate's)."""
    candidates = _candidates(run)
    if not candidates:
        return None, f"waiting for a healthy cluster that runs the {run.backend} backend"
    bundles = run_bundles(run.config.run_spec.resources)
    reasons = []
    for cluster in candidates:
        snapshot = snapshot_less(cluster.resources or {}, _taken_since_report(cluster, run))
        refusal = never_placeable(
            bundles=bundles, cluster_name=cluster.name, snapshot=snapshot,
            capacity=cluster.capacity or {},
        )  # fmt: skip
        if refusal is not None:
            # the cluster shrank since the launch (or was not probed then): wait for it
            reasons.append(f"cannot be placed now: {refusal.message}")
            continue
        wait = wait_reason(bundles=bundles, cluster_name=cluster.name, snapshot=snapshot)
        if wait is not None:
            reasons.append(wait)
            continue
        return cluster, None
    return None, reasons[0]


def quota_lock(*, team_id: int) -> TeamQuota:
    """The team's quota row, locked until the transaction ends: a dispatch takes it before
    its quota check, so the team's dispatches check one at a time, each seeing what the one
    before took (the launch takes it too)."""
    quota, _ = TeamQuota.objects.select_for_update().get_or_create(team_id=team_id)
    return quota


def quota_refusal(*, run: Run, gpus: float | None = None) -> str | None:
    """Why the team's quota (or the launching user's, over all their teams) holds the run
    back, or None. `gpus`: what the run will count for (a pooled run: its share of its
    pool's GPUs), else what it asks for; the team's pooled runs count their shares too."""
    return _team_refusal(run, gpus) or _user_refusal(run, gpus)


def _user_refusal(run: Run, gpus: float | None) -> str | None:
    if run.created_by_id is None:
        return None
    quota = user_quota_lock(user_id=run.created_by_id)  # after the team's row
    usage = user_usage(user_id=run.created_by_id)
    if usage["running_runs"] >= quota.max_concurrent_runs:
        return (
            f"waiting for a slot: its launcher runs {usage['running_runs']} of their "
            f"{quota.max_concurrent_runs} concurrent runs over all their teams"
        )
    needs = run.gpus if gpus is None else gpus
    if usage["gpus_in_use"] + needs > quota.max_gpus + 1e-9:
        return (
            f"waiting for GPUs: its launcher uses {usage['gpus_in_use']:g} of their "
            f"{quota.max_gpus:g} over all their teams and this run needs {needs:g}"
        )
    return None


def _team_refusal(run: Run, gpus: float | None) -> str | None:
    quota, _ = TeamQuota.objects.get_or_create(team_id=run.team_id)
    usage = team_usage(team_id=run.team_id)
    if usage["running_runs"] >= quota.max_concurrent_runs:
        return (
            f"waiting for a slot: the team runs {usage['running_runs']} of "
            f"{quota.max_concurrent_runs} concurrent runs"
        )
    in_use = usage["gpus_in_use"]  # each pooled run as its share of its pool's GPUs
    needs = run.gpus if gpus is None else gpus
    if in_use + needs > quota.max_gpus + 1e-9:
        return (
            f"waiting for GPUs: the team uses {in_use:g} of {quota.max_gpus:g} "
            f"and this run needs {needs:g}"
        )
    return None


def _queue_reason(run: Run, reason: str) -> None:
    reason = reason[: Run._meta.get_field("queued_reason").max_length]
    if run.queued_reason != reason:
        Run.objects.filter(pk=run.pk).update(queued_reason=reason, updated_at=timezone.now())
        transaction.on_commit(lambda: broadcast_state(run.pk))


def operator_policy_env() -> dict[str, str]:
    """The operator's egress policy and spec limits, handed to every job: its clients keep
    the same policy the launch checked, and it accepts the specs its platform accepted."""
    env = settings.PADDOCK_EGRESS.to_env()
    if settings.PADDOCK_SPEC_LIMITS:
        env["PADDOCK_SPEC_LIMITS"] = settings.PADDOCK_SPEC_LIMITS
    return env


def _order(run: Run, cluster: RayCluster) -> DispatchOrder:
    env = {
        "PADDOCK_PUBLIC_URL": settings.PADDOCK_PUBLIC_URL,
        "PADDOCK_RUN_ID": str(run.pk),
        "PADDOCK_DISPATCH": str(run.dispatch_count),
        "PADDOCK_BOOTSTRAP_TOKEN": bootstrap_token_for(run_id=run.pk, dispatch=run.dispatch_count),
        **operator_policy_env(),
    }
    if cluster.labels.get("embedded"):
        # the platform's own machine: share its model cache instead of rebuilding per job
        env["PADDOCK_HOME"] = str(settings.PADDOCK_HOME)
    return DispatchOrder(
        run_id=run.pk,
        dispatch=run.dispatch_count,
        submission_id=run.ray_submission_id,
        cluster_id=cluster.pk,
        address=cluster.address,
        **entrypoint_resources(run.config.run_spec.resources),
        env=env,
    )


def dispatch_prepare(*, run_id: int) -> DispatchOrder | None:
    """Take the run's next dispatch (or resume the one in flight); None when it must wait,
    with the reason in `queued_reason`, or has nothing to start."""
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("config").filter(pk=run_id).first()
        if run is None:
            return None
        if run.state == S.DISPATCHING and run.cluster_id is not None:
            # a redelivered task: same dispatch, same id
            member = pools.pool_of_run(run)
            return _order(run, run.cluster) if member is None else _pool_order(member.pool, run)
        if run.state != S.QUEUED:
            return None
        if run.desired_state == "aborted":
            run_transition(run=run, to_state=S.ABORTED, reason="aborted before it started")
            return None
        if run.desired_state == "paused":
            _queue_reason(run, "paused before it started: resume to dispatch it")
            return None
        held = preflight_hold(run)  # its experiment's pre-flight check has not passed
        if held is not None:
            _queue_reason(run, held)
            return None
        # every dispatch of the team takes its quota's row, so that its check counts what
        # the dispatch before took (two solo runs checked at once would both fit)
        quota_lock(team_id=run.team_id)
        if pools.pool_asked(run.config.run_spec):
            return _pool_prepare(run)
        reason = quota_refusal(run=run)
        cluster = None
        if reason is None:
            cluster, reason = cluster_pick(run=run)
        if reason is not None:
            _queue_reason(run, reason)
            return None
        dispatch = run.dispatch_count + 1
        Run.objects.filter(pk=run.pk).update(
            dispatch_count=dispatch,
            attempts=run.attempts + 1,
            cluster=cluster,
            ray_submission_id=submission_id_for(run_id=run.pk, dispatch=dispatch),
        )
        run.refresh_from_db()
        run_transition(run=run, to_state=S.DISPATCHING, dispatch=dispatch)
        return _order(run, cluster)


# --- pooled runs (pools.py) ------------------------------------------------------------------


def _pool_order(pool: Pool, run: Run) -> DispatchOrder:
    """The order that starts `pool`'s job for the run's dispatch (submitted once per pool
    dispatch: the members after its founder find the job there, and Ray refuses the
    duplicate id); the run moves to `starting` once it is submitted."""
    env = {
        "PADDOCK_PUBLIC_URL": settings.PADDOCK_PUBLIC_URL,
        "PADDOCK_POOL_ID": str(pool.pk),
        "PADDOCK_POOL_DISPATCH": str(pool.dispatch_count),
        "PADDOCK_BOOTSTRAP_TOKEN": pools.bootstrap_token_for(
            pool_id=pool.pk, dispatch=pool.dispatch_count
        ),
        **operator_policy_env(),
    }
    if pool.cluster.labels.get("embedded"):
        env["PADDOCK_HOME"] = str(settings.PADDOCK_HOME)
    return DispatchOrder(
        run_id=run.pk, dispatch=run.dispatch_count, submission_id=pool.ray_submission_id,
        cluster_id=pool.cluster_id, address=pool.cluster.address,
        num_cpus=pool.num_cpus, num_gpus=pool.num_gpus, env=env,
        entrypoint=pools.ENTRYPOINT, metadata={"paddock_pool": str(pool.pk)},
    )  # fmt: skip


def _pool_fit(run: Run, asked: str) -> tuple[Pool | None, str | None]:
    """A live pool the run may join now (locked), or None and why none is joined: a named
    pool (the run's team's: another team's pool of that name is never looked at) that is
    full, of another key or on a cluster the run may not use is waited for; with none (or
    none fitting, for `auto`: an `auto` pool, of any team's runs) a new pool is started
    (reason None)."""
    spec = run.config.run_spec
    weight = spec.resources.pool_weight
    allowed = {c.pk for c in _candidates(run)}
    live = (
        Pool.objects.select_for_update()
        .select_related("cluster")
        .filter(state__in=pools.LIVE, team__isnull=True)
        .order_by("id")
    )
    if asked != "auto":
        pool = pools.named_pool(team_id=run.team_id, name=asked, lock=True)
        if pool is None or pool.state == Pool.State.ENDED:
            return None, None
        if pool.state == Pool.State.STOPPING:
            return None, f"waiting for pool {asked} to stop (no members were left) to restart it"
        if pool.cluster_id not in allowed:
            return None, (
                f"waiting for pool {asked}: it runs on a cluster this run may not use now "
                f"({pool.cluster.name})"
            )
        why = pools.misfit_reason(spec, pool)
        if why is not None:
            return None, f"pool {asked} hosts runs of another key: {why}"
        live = [pool]
    for pool in live:
        if pool.cluster_id not in allowed or pools.misfit_reason(spec, pool) is not None:
            continue
        count = pools.current_members(pool.pk).count()
        if count >= pool.capacity:
            if asked != "auto":
                return None, f"waiting for room in pool {asked} ({count} of {pool.capacity} runs)"
            continue
        refusal = quota_refusal(
            run=run, gpus=pools.gpus_if_joined(pool, team_id=run.team_id, weight=weight)
        )
        if refusal is not None:
            return None, refusal
        return pool, None
    return None, None


def _pool_start(run: Run, asked: str) -> tuple[Pool | None, str | None]:
    """A new pool (or the named pool's next dispatch) on a cluster that can place the run
    now, with the run's key; or None and why it waits. A named pool is the run's team's.
    The founder counts for the whole pool (its share alone: what the pool's job reserves)."""
    spec = run.config.run_spec
    reason = quota_refusal(run=run, gpus=pools.reserved_gpus(spec))
    cluster = None
    if reason is None:
        cluster, reason = cluster_pick(run=run)
    if reason is not None:
        return None, reason
    resources = entrypoint_resources(spec.resources)
    fields = {
        "cluster": cluster, "key": pools.key_for(spec, cluster),
        "capacity": pools.capacity_of(cluster), "state": Pool.State.STARTING,
        "bootstrapped_at": None, "token_prefix": "", "token_hashed": "", **resources,
    }  # fmt: skip
    named = asked != "auto"
    pool = pools.named_pool(team_id=run.team_id, name=asked, lock=True) if named else None
    if pool is None:
        pool = Pool.objects.create(
            name=asked if named else f"new_{run.pk}", team_id=run.team_id if named else None,
            **fields,
        )  # fmt: skip
        if not named:
            pool.name = f"auto_{pool.pk}"  # never a name a spec can ask for (no "_")
    for name, value in fields.items():
        setattr(pool, name, value)
    pool.dispatch_count += 1
    pool.ray_submission_id = pools.submission_id_for(pool_id=pool.pk, dispatch=pool.dispatch_count)
    pool.save()
    log.info("pool %s dispatch %s started for run %s", pool.name, pool.dispatch_count, run.pk)
    return pool, None


def _pool_prepare(run: Run) -> DispatchOrder | None:
    """Pack the queued run (locked) into a pool: join one that fits, else start one; move
    the run to `dispatching` under the pool's job. None when it waits (the reason stored).
    The team's dispatches go one at a time (dispatch_prepare locked its quota's row): a new
    named pool is made once, by the first, and the next finds it; and each checks the team's
    GPUs with what the one before took."""
    asked = pools.pool_asked(run.config.run_spec)
    pool, reason = _pool_fit(run, asked)
    if pool is None and reason is None:
        pool, reason = _pool_start(run, asked)
    if pool is None:
        _queue_reason(run, reason)
        return None
    dispatch = run.dispatch_count + 1
    Run.objects.filter(pk=run.pk).update(
        dispatch_count=dispatch, attempts=run.attempts + 1, cluster=pool.cluster,
        ray_submission_id=pool.ray_submission_id,
    )  # fmt: skip
    run.refresh_from_db()
    weight = run.config.run_spec.resources.pool_weight
    pools.member_join(pool=pool, run=run, dispatch=dispatch, weight=weight)
    run_transition(run=run, to_state=S.DISPATCHING, dispatch=dispatch, reason=f"pool {pool.name}")
    return _pool_order(pool, run)


def dispatch_submit(order: DispatchOrder) -> bool:
    """Submit the job of `order` (idempotent), then mark the run `starting`."""
    runtime_env = {"py_modules": [str(WORKERS_DIR)], "env_vars": order.env}
    started = job_submit(
        address=order.address,
        submission_id=order.submission_id,
        entrypoint=order.entrypoint,
        runtime_env=runtime_env,
        num_cpus=order.num_cpus,
        num_gpus=order.num_gpus,
        metadata={"paddock_platform": platform_tag(),
                  **(order.metadata or {"paddock_run": str(order.run_id)})},
    )  # fmt: skip
    log.info(
        "run %s dispatch %s: %s %s",
        order.run_id, order.dispatch, "submitted" if started else "already submitted",
        order.submission_id,
    )  # fmt: skip
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=order.run_id)
        if run.state == S.DISPATCHING and run.dispatch_count == order.dispatch:
            run_transition(run=run, to_state=S.STARTING, dispatch=order.dispatch)
            dispatch_started(run.pk, run.created_at)  # Prometheus: queued → starting
    return started
