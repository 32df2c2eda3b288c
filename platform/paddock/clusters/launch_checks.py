"""What a launch is checked against here, in the cluster registry: its backends advertised
by a cluster the team may use (or the one it named), and its runs' resources placeable by
one of them, ever; and what each run counts for at least in its team's GPUs, which the launch
holds against the quota (a pooled run: its least share, pools.least_gpus). Registered as the
experiments app's `launch_check` in ClustersConfig.ready() (experiments sits below clusters
and does not import it)."""

from __future__ import annotations

from django.db.models import Q

from paddock.core.errors import DomainError, ErrorCode
from paddock.experiments.configs import spec_gpus
from workers.pool_key import unpoolable
from workers.spec import RunSpec

from .environments import offered_environments, spec_environment
from .models import RayCluster
from .placement import never_placeable, run_bundles
from .pools import capacity_of, least_gpus, pool_asked


def launch_check(
    *, team_id: int, cluster_id: int | None, runs: list[tuple[str, RunSpec]]
) -> list[float]:
    """`runs`: (backend, effective spec) of each planned run. Raises DomainError. Returns,
    for each run, the least GPUs it can count for in its team's usage: a run of its own
    what it asks for, a pooled run its least share on the clusters that can place it (one
    place of the largest pool they start, for `auto`)."""
    for _, spec in runs:
        why = unpoolable(spec) if pool_asked(spec) else None
        if why is not None:
            raise DomainError(ErrorCode.INVALID, why, field="spec.resources.pool")
    backends = list(dict.fromkeys(backend for backend, _ in runs))
    clusters = _check_backends(team_id=team_id, backends=backends, cluster_id=cluster_id)
    clusters = _check_environments(clusters=clusters, runs=runs, chosen=cluster_id is not None)
    placing = _check_placement(clusters=clusters, runs=runs)
    return [
        least_gpus(spec, capacity=max(capacity_of(c) for c in where))
        if pool_asked(spec) and where
        else spec_gpus(spec)
        for (_, spec), where in zip(runs, placing, strict=True)
    ]


def _visible_clusters(team_id: int):
    return RayCluster.objects.filter(Q(team__isnull=True) | Q(team_id=team_id))


def _check_backends(
    *, team_id: int, backends: list[str], cluster_id: int | None
) -> list[RayCluster]:
    """The backends must be advertised by the target cluster (or, with none chosen, by at
    least one cluster the team may use). Returns the clusters a run may go to."""
    clusters = list(_visible_clusters(team_id))
    if cluster_id is not None:
        chosen = next((c for c in clusters if c.pk == cluster_id), None)
        if chosen is None:
            raise DomainError(ErrorCode.INVALID, f"no cluster {cluster_id}", field="cluster")
        clusters = [chosen]
    if not clusters:
        raise DomainError(
            ErrorCode.NO_CLUSTER, "no Ray cluster is registered for this team", field="cluster"
        )
    advertised = {b for c in clusters for b in c.backends}
    missing = [b for b in backends if b not in advertised]
    if missing:
        where = f"cluster '{clusters[0].name}'" if cluster_id else "any cluster of the team"
        raise DomainError(
            ErrorCode.BACKEND_UNAVAILABLE,
            f"{', '.join(missing)} not advertised by {where} (it offers "
            f"{', '.join(sorted(advertised)) or 'none'})",
            field="backends",
        )
    return clusters


def _check_environments(
    *, clusters: list[RayCluster], runs: list[tuple[str, RunSpec]], chosen: bool
) -> list[RayCluster]:
    """A run's `env.name` must be offered by a cluster it may go to (the built-ins by every
    one); returns the clusters that offer what the runs need."""
    wanted = {e for _, spec in runs if (e := spec_environment(spec)) is not None}
    if not wanted:
        return clusters
    fit = [c for c in clusters if wanted <= set(offered_environments(c))]
    if not fit:
        offered = sorted({e for c in clusters for e in offered_environments(c)})
        where = f"cluster '{clusters[0].name}'" if chosen else "any cluster of the team"
        raise DomainError(
            ErrorCode.ENVIRONMENT_UNAVAILABLE,
            f"environment {', '.join(sorted(wanted))} not advertised by {where} (it offers "
            f"{', '.join(offered)})",
            field="spec.env.name",
        )
    return fit


def _check_placement(
    *, clusters: list[RayCluster], runs: list[tuple[str, RunSpec]]
) -> list[list[RayCluster]]:
    """Refuse a run that no cluster it may go to could ever place (more GPUs or CPUs than
    the cluster has, or a bundle bigger than its largest node), naming the setting. A
    cluster whose resources are not known yet (never probed) is given the benefit of the
    doubt; what is short only now waits in `queued`, with the reason (dispatch). Returns
    each run's clusters that can place it."""
    placing = []
    for backend, spec in runs:
        bundles = run_bundles(spec.resources)
        refusals, where = [], []
        for cluster in clusters:
            if backend not in cluster.backends:
                continue
            refusal = never_placeable(
                bundles=bundles, cluster_name=cluster.name, snapshot=cluster.resources or {},
                capacity=cluster.capacity or {},
            )  # fmt: skip
            if refusal is None:
                where.append(cluster)
            else:
                refusals.append(refusal)
        placing.append(where)
        if not where and refusals:
            first = refusals[0]
            others = f" (nor can {len(refusals) - 1} other clusters)" if len(refusals) > 1 else ""
            raise DomainError(
                ErrorCode.UNPLACEABLE, first.message + others, field=f"spec.{first.setting}"
            )
    return placing
