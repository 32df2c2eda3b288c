"""Readers of the cluster registry, scoped to what the actor may see."""

from __future__ import annotations

import math

from django.db.models import Q, QuerySet

from paddock.core.errors import not_found
from paddock.experiments.models import MetricPoint, Run
from paddock.teams.access import Actor
from workers import names

from .models import Pool, PoolMember, RayCluster
from .pools import current_members, pool_of_run, shares


def cluster_list(*, actor: Actor) -> QuerySet[RayCluster]:
    """Shared clusters and those of the actor's teams."""
    return RayCluster.objects.filter(Q(team__isnull=True) | Q(team_id__in=actor.team_ids)).order_by(
        "name"
    )


# --- pools: not team-scoped, so each reader shows a team only its own members --------------

# what the pool page shows of each visible member, when its job reports it
POOL_METRIC_KEYS = ("throughput/tokens_per_s", *names.POOL_METRICS)
MEMORY_PREFIX = "memory/"


def pool_list(*, actor: Actor) -> QuerySet[Pool]:
    """Staff: every pool. Anyone else: the pools that host (or hosted) a run of their teams."""
    pools = Pool.objects.select_related("cluster", "team").order_by("-id")
    if actor.is_staff:
        return pools
    hosting = PoolMember.objects.filter(run__team_id__in=actor.team_ids).values("pool_id")
    return pools.filter(pk__in=hosting)


def pool_get(*, actor: Actor, pool_id: int) -> Pool:
    pool = pool_list(actor=actor).filter(pk=pool_id).first()
    if pool is None:
        raise not_found("pool")
    return pool


def pool_view(*, actor: Actor, pool: Pool) -> dict:
    """What `actor` may see of `pool`: its own teams' memberships (staff: all, and the
    pool's team), each with its run's share now and its last throughput and memory
    figures, and how many runs the pool hosts in all (a count, nothing of the others)."""
    current = list(current_members(pool.pk))
    share = shares(current)
    members = PoolMember.objects.filter(pool=pool).select_related("run__experiment", "run__team")
    if not actor.is_staff:
        members = members.filter(run__team_id__in=actor.team_ids)
    rows = []
    for m in members.order_by("-id")[:200]:
        rows.append({
            "run": m.run_id, "experiment_name": m.run.experiment.name, "team": m.run.team_id,
            "team_name": m.run.team.name, "state": m.run.state, "dispatch": m.run_dispatch,
            "weight": m.weight, "share": share.get(m.run_id) if m.left_at is None else None,
            "joined_at": m.joined_at, "left_at": m.left_at, "left_reason": m.left_reason,
            "gpus": share.get(m.run_id, 0.0) * pool.num_gpus if m.left_at is None else None,
            "latest": _latest(m.run_id),
        })  # fmt: skip
    view = {
        "id": pool.pk, "name": pool.name, "state": pool.state, "cluster_name": pool.cluster.name,
        "capacity": pool.capacity, "members_total": len(current), "gpus": pool.num_gpus,
        "dispatch_count": pool.dispatch_count, "created_at": pool.created_at,
        "key": pool.key, "members": rows,
    }  # fmt: skip
    if actor.is_staff:
        # named pools of several teams may share a name: staff tell them apart by team
        view["team"] = pool.team_id
        view["team_name"] = pool.team.name if pool.team_id else None
    return view


def run_pool_info(run: Run) -> dict | None:
    """A run's pool as its team sees it on the run: the pool's name, the run's share, its
    own team's current members and the number of members in all; None when not pooled."""
    member = pool_of_run(run)
    if member is None:
        return None
    current = list(current_members(member.pool_id))
    share = shares(current)
    return {
        "id": member.pool_id, "name": member.pool.name, "state": member.pool.state,
        "share": share.get(run.pk), "weight": member.weight,
        "joined_at": member.joined_at, "left_at": member.left_at,
        "members_of_your_team": [m.run_id for m in current if m.run.team_id == run.team_id],
        "members_total": len(current),
    }  # fmt: skip


def _latest(run_id: int) -> dict[str, float]:
    points = MetricPoint.objects.filter(run_id=run_id)
    keys = list(POOL_METRIC_KEYS) + list(
        points.filter(key__startswith=MEMORY_PREFIX).values_list("key", flat=True).distinct()[:8]
    )
    latest = {}
    for key in keys:
        value = points.filter(key=key).order_by("-step").values_list("value", flat=True).first()
        if value is not None and math.isfinite(value):
            latest[key] = value
    return latest
