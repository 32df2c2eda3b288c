"""Pools on the control plane's side (docs/pools.md): which pool a pooled run joins, its
members and their shares, the pool's tokens, and what a pool's job is told.

A run that asks for `resources.pool` is packed, at its dispatch, into a pool of its key
(workers/pool_key.py, plus the cluster) that has room: `auto` into any such `auto` pool
(which packs runs of any team), a name into its own team's pool of that name only (a named
pool is its team's: another team's pool of the same name is another pool, never looked at);
when none fits a new pool is started (dispatch.py). Each member keeps its own run, state
machine, dispatch number, bootstrap and run token; a membership lasts one dispatch of the
run and ends when the run stops holding a job (it finished, failed, was queued again), which
the audit log records with its join.

A member is *current* while its membership is open, its run holds a job (HOLDING) and the
run's dispatch is the membership's: exactly the runs the pool's job is told to host."""

from __future__ import annotations

import hashlib
import hmac
import logging

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from paddock.core.errors import DomainError, ErrorCode
from paddock.core.fixed_sql import FixedStatement, concrete_fields, instances, select_columns
from paddock.experiments.models import Run
from paddock.experiments.states import HOLDING
from paddock.teams.secrets import secret_matches, secret_new, secret_prefix
from paddock.teams.services import audit_record
from workers.job_replies import ListedMember, PoolBootstrap, PoolMembers
from workers.pool_key import misfit, pool_key
from workers.spec import RunSpec

from .bootstrap_tokens import bootstrap_token_for as run_bootstrap_token
from .models import BootstrapUse, Pool, PoolMember, RayCluster
from .placement import entrypoint_resources

log = logging.getLogger(__name__)
ENTRYPOINT = "python -m workers.pool.job"
POOL_TOKEN_KIND = "pdp"
BOOTSTRAP_PREFIX = "pdpb_"
LIVE = (Pool.State.STARTING, Pool.State.RUNNING)  # pools a run may join


def submission_id_for(*, pool_id: int, dispatch: int) -> str:
    return f"paddock-pool-{pool_id}-d{dispatch}"


def is_pool_submission(submission_id: str) -> bool:
    """Whether a run's Ray job is a pool's (it must never be stopped for one member)."""
    return submission_id.startswith("paddock-pool-")


def pool_asked(spec: RunSpec) -> str | None:
    """The run's `resources.pool` (`auto` or a name), or None for a run of its own."""
    return spec.resources.pool


def capacity_of(cluster: RayCluster) -> int:
    """How many runs a new pool on `cluster` hosts: the cluster's declared
    `capacity.pool_runs`, else PADDOCK_POOL_CAPACITY."""
    declared = (cluster.capacity or {}).get("pool_runs")
    if isinstance(declared, int) and not isinstance(declared, bool) and declared >= 1:
        return declared
    return int(settings.PADDOCK_POOL_CAPACITY)


def key_for(spec: RunSpec, cluster: RayCluster) -> dict:
    return {**pool_key(spec), "cluster": cluster.name}


def misfit_reason(spec: RunSpec, pool: Pool) -> str | None:
    """Why a run of `spec` may not join `pool` (naming the settings that differ), or None."""
    return misfit(spec, pool.key, cluster=pool.key.get("cluster"))


# --- members and shares -------------------------------------------------------------------


def _current(members: QuerySet[PoolMember]) -> QuerySet[PoolMember]:
    return members.filter(left_at__isnull=True, run__state__in=HOLDING).filter(
        run__dispatch_count=F("run_dispatch")
    )


def current_members(pool_id: int) -> QuerySet[PoolMember]:
    return _current(PoolMember.objects.filter(pool_id=pool_id)).select_related("run").order_by("id")


def shares(members: list[PoolMember]) -> dict[int, float]:
    """Each member run's share of the pool: its weight over the members' total weight."""
    total = sum(m.weight for m in members)
    return {m.run_id: share_gpus(pool_gpus=1, weight=m.weight, total_weight=total) for m in members}


def share_gpus(*, pool_gpus: float, weight: float, total_weight: float) -> float:
    """The share rule, the one place it is written (docs/pools.md, "Quotas"): what a member
    of `weight` counts for in its team's GPUs, in a pool whose job reserves `pool_gpus` and
    whose current members (the member included) weigh `total_weight` in all."""
    return pool_gpus * weight / total_weight if total_weight > 0 else 0.0


def reserved_gpus(spec: RunSpec) -> float:
    """The GPUs the job of a pool started for a run of `spec` reserves (its driver's: a
    pooled run trains and generates in the pool's one process), the same for every run of
    its key (the key holds the GPU settings)."""
    return entrypoint_resources(spec.resources)["num_gpus"]


def least_gpus(spec: RunSpec, *, capacity: int) -> float:
    """The least a pooled run of `spec` can count for in its team's GPUs, which the launch
    checks against the quota: for `auto`, one place of a full pool of `capacity` runs of its
    own weight (a pool another team may have started); for a named pool, the whole pool
    alone, as its founder counts (a named pool hosts only its team's runs, so one of them
    must start it, alone)."""
    if pool_asked(spec) != "auto":
        return reserved_gpus(spec)
    weight = spec.resources.pool_weight
    return share_gpus(pool_gpus=reserved_gpus(spec), weight=weight, total_weight=capacity * weight)


def member_join(*, pool: Pool, run: Run, dispatch: int, weight: float) -> PoolMember:
    member = PoolMember.objects.create(pool=pool, run=run, run_dispatch=dispatch, weight=weight)
    audit_record(
        actor=None, team_id=run.team_id, action="pool.join", target_type="run",
        target_id=run.pk, data={"pool": pool.name, "pool_id": pool.pk, "dispatch": dispatch},
    )  # fmt: skip
    return member


def members_settle(*, run_id: int | None = None, pool_id: int | None = None) -> int:
    """Close the open memberships (of one run, or of one pool) whose run no longer holds
    the job of that dispatch, each with an audit `pool.leave`. Returns how many closed."""
    open_ = PoolMember.objects.filter(left_at__isnull=True).select_related("run", "pool")
    if run_id is not None:
        open_ = open_.filter(run_id=run_id)
    if pool_id is not None:
        open_ = open_.filter(pool_id=pool_id)
    closed = 0
    for member in open_:
        run = member.run
        if run.state in HOLDING and run.dispatch_count == member.run_dispatch:
            continue
        why = (
            f"the run was dispatched again (dispatch {run.dispatch_count})"
            if run.dispatch_count != member.run_dispatch
            else f"the run is {run.state}"
        )
        if not PoolMember.objects.filter(pk=member.pk, left_at__isnull=True).update(
            left_at=timezone.now(), left_reason=why[:200]
        ):
            continue  # another caller closed it meanwhile
        closed += 1
        audit_record(
            actor=None, team_id=run.team_id, action="pool.leave", target_type="run",
            target_id=run.pk,
            data={"pool": member.pool.name, "pool_id": member.pool_id,
                  "dispatch": member.run_dispatch, "reason": why},
        )  # fmt: skip
    return closed


def named_pool(*, team_id: int, name: str, lock: bool = False) -> Pool | None:
    """The team's pool called `name`, if it has one (locked with `lock`). Only the team's:
    the same name in another team is another pool, which this never finds."""
    pools = Pool.objects.select_related("cluster").filter(team_id=team_id, name=name)
    return (pools.select_for_update() if lock else pools).first()


def pooled_gpus_correction(*, team_id: int) -> float:
    """What to add to the team's GPUs in use (the sum of its holding runs' own asks) so
    that each pooled run counts as its share of its pool's GPUs instead: for each of the
    team's current members, its weight over its pool's current members' total, times the
    GPUs the pool's job reserves, less what its spec asks for. One query."""
    mine = _current(PoolMember.objects.filter(run__team_id=team_id)).values("pool_id")
    rows = list(
        _current(PoolMember.objects.filter(pool_id__in=mine)).values_list(
            "pool_id", "pool__num_gpus", "weight", "run__team_id", "run__gpus"
        )
    )
    totals: dict[int, float] = {}
    for pool_id, _, weight, _, _ in rows:
        totals[pool_id] = totals.get(pool_id, 0.0) + weight
    correction = 0.0
    for pool_id, pool_gpus, weight, run_team, run_gpus in rows:
        if run_team == team_id:
            share = share_gpus(pool_gpus=pool_gpus, weight=weight, total_weight=totals[pool_id])
            correction += share - run_gpus
    return correction


def gpus_now(run_ids: list[int]) -> dict[int, float]:
    """What each of the runs counts for in its team's GPUs now: nothing unless it holds a
    job; a current pool member its share of its pool's GPUs, any other its own ask (the
    rule team_usage applies to a whole team, for a few runs: a sweep's GPU-hours). Two
    queries."""
    held = dict(Run.objects.filter(pk__in=run_ids, state__in=HOLDING).values_list("pk", "gpus"))
    mine = _current(PoolMember.objects.filter(run_id__in=list(held))).values("pool_id")
    rows = _current(PoolMember.objects.filter(pool_id__in=mine)).values_list(
        "pool_id", "pool__num_gpus", "weight", "run_id"
    )
    totals: dict[int, float] = {}
    for pool_id, _, weight, _ in rows:
        totals[pool_id] = totals.get(pool_id, 0.0) + weight
    for pool_id, pool_gpus, weight, run_id in rows:
        if run_id in held:
            held[run_id] = share_gpus(
                pool_gpus=pool_gpus, weight=weight, total_weight=totals[pool_id]
            )
    return {run_id: float(held.get(run_id, 0.0)) for run_id in run_ids}


def gpus_if_joined(pool: Pool, *, team_id: int, weight: float) -> float:
    """How much the team's GPUs in use grow when its run of `weight` joins `pool`: the run's
    share, less what the team's members there give up (each share shrinks). A new pool's
    founder: the whole pool, `reserved_gpus`."""
    members = list(current_members(pool.pk))
    total = sum(m.weight for m in members)
    mine = sum(m.weight for m in members if m.run.team_id == team_id)
    gpus = pool.num_gpus
    before = share_gpus(pool_gpus=gpus, weight=mine, total_weight=total)
    return share_gpus(pool_gpus=gpus, weight=mine + weight, total_weight=total + weight) - before


def _membership_sql(_shape=None) -> str:
    """pool_of_run's statement (core/fixed_sql.py): the membership and its pool, as
    `filter(run_id, run_dispatch).select_related("pool").first()` reads them."""
    quote = connection.ops.quote_name
    columns = select_columns(PoolMember, "m") + select_columns(Pool, "p")
    return (
        f"SELECT {', '.join(columns)} FROM {quote(PoolMember._meta.db_table)} m"
        f" JOIN {quote(Pool._meta.db_table)} p ON p.{quote('id')} = m.{quote('pool_id')}"
        f" WHERE m.{quote('run_id')} = %s AND m.{quote('run_dispatch')} = %s"
        f" ORDER BY m.{quote('id')} LIMIT 1"
    )


_MEMBERSHIP = FixedStatement(_membership_sql, lambda: concrete_fields(PoolMember, Pool))


def pool_of_run(run: Run) -> PoolMember | None:
    """The run's membership of its current dispatch, if it is (or was) pooled, its pool
    loaded. A statement of constant text: a run detail reads it on every request, and the
    ORM's compilation of it cost more than the read."""
    row = _MEMBERSHIP.fetch_one([run.pk, run.dispatch_count])
    if row is None:
        return None
    member, pool = instances(row, PoolMember, Pool)
    member.pool = pool
    return member


# --- the pool job's doors -------------------------------------------------------------------


def bootstrap_token_for(*, pool_id: int, dispatch: int) -> str:
    """Derived, not stored (as a run's: dispatch.py hands the same token to a resubmitted
    job): good once, for its own (pool, dispatch)."""
    mac = hmac.new(
        settings.SECRET_KEY.encode(), f"pool-bootstrap:{pool_id}:{dispatch}".encode(),
        hashlib.sha256,
    )  # fmt: skip
    return BOOTSTRAP_PREFIX + mac.hexdigest()


def _pool_for_job(pool_id: int, dispatch: int) -> Pool:
    pool = Pool.objects.filter(pk=pool_id).first()
    if pool is None:
        raise DomainError(ErrorCode.TOKEN_INVALID, "unknown pool token")
    if pool.dispatch_count != dispatch:
        raise DomainError(ErrorCode.DISPATCH_SUPERSEDED, "this pool dispatch is no longer current")
    if pool.state == Pool.State.ENDED:
        raise DomainError(ErrorCode.POOL_ENDED, f"pool {pool.name} has ended")
    return pool


def pool_bootstrap(*, pool_id: int, dispatch: int, raw: str) -> PoolBootstrap:
    """Spend the pool's bootstrap token: mint the pool token (its hash stored) and return it
    with the pool's capacity and key."""
    if not hmac.compare_digest(bootstrap_token_for(pool_id=pool_id, dispatch=dispatch), raw):
        raise DomainError(ErrorCode.TOKEN_INVALID, "unknown bootstrap token")
    with transaction.atomic():
        pool = _pool_for_job(pool_id, dispatch)
        new = secret_new(POOL_TOKEN_KIND)
        taken = Pool.objects.filter(
            pk=pool.pk, dispatch_count=dispatch, bootstrapped_at__isnull=True
        ).update(
            token_prefix=new.prefix, token_hashed=new.hashed, bootstrapped_at=timezone.now(),
            state=Pool.State.RUNNING if pool.state == Pool.State.STARTING else pool.state,
        )  # fmt: skip
        if not taken:
            raise DomainError(ErrorCode.TOKEN_SPENT, "this bootstrap token was already used")
    return PoolBootstrap(token=new.raw, capacity=pool.capacity, key=pool.key)


def pool_members(*, pool_id: int, dispatch: int, raw: str) -> PoolMembers:
    """What the pool's job hosts now: its current members (a new one with its run's
    one-time bootstrap token), and `stop` once it has none left (the pool then takes no
    new member: the next run of its key starts another pool)."""
    prefix = secret_prefix(raw, POOL_TOKEN_KIND)
    pool = Pool.objects.filter(pk=pool_id).first()
    if (
        prefix is None
        or pool is None
        or pool.token_prefix != prefix
        or not secret_matches(raw, pool.token_hashed)
    ):
        raise DomainError(ErrorCode.TOKEN_INVALID, "unknown pool token")
    members_settle(pool_id=pool_id)
    with transaction.atomic():
        Pool.objects.select_for_update().filter(pk=pool_id).first()  # packing waits on it
        pool = _pool_for_job(pool_id, dispatch)
        members = list(current_members(pool_id))
        if not members and pool.state != Pool.State.STOPPING:
            # updated_at is the clock reconcile gives the job to exit on its own
            Pool.objects.filter(pk=pool_id).update(
                state=Pool.State.STOPPING, updated_at=timezone.now()
            )
            log.info("pool %s has no members left: its job is told to stop", pool.name)
    spent = set(
        BootstrapUse.objects.filter(run_id__in=[m.run_id for m in members]).values_list(
            "run_id", "dispatch"
        )
    )
    rows = [
        ListedMember(
            run_id=m.run_id,
            dispatch=m.run_dispatch,
            bootstrap_token=None
            if (m.run_id, m.run_dispatch) in spent
            else run_bootstrap_token(run_id=m.run_id, dispatch=m.run_dispatch),
            weight=m.weight,
        )
        for m in members
    ]
    return PoolMembers(members=rows, stop=not rows)
