"""Can a cluster place a run: ever (its totals), and now (what is free). Pure functions.
A run's asks are read from its spec's `resources` (ResourcesSpec), whose defaults are the
spec's own.

A run asks for bundles of CPUs and GPUs, each of which Ray must place whole on one node:
with the in-process executor one bundle (the job's driver holds the trainer's share, see
entrypoint_resources below); with the Ray executor the driver's sliver and one bundle
per trainer actor and per rollout replica (workers/distributed/fleet.py). A cluster is
described by a snapshot of its nodes, each with its total and free CPUs and GPUs, as the
health check last observed them (`RayCluster.resources`); an operator's declared
`capacity` replaces the observed totals for the "ever" check (a cluster that autoscales
has fewer nodes now than it may have)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workers.spec import ResourcesSpec

RESOURCES = ("GPU", "CPU")  # the order in which a shortfall is reported
DRIVER_CPUS = 0.1  # the Ray executor's driver only waits on its actors
_EPS = 1e-9


@dataclass(frozen=True)
class Bundle:
    """What one part of a run needs on one node, and the settings each amount comes from."""

    what: str  # "the job's driver", "a trainer actor", "a rollout replica"
    amounts: dict[str, float]
    settings: dict[str, str]  # resource → the spec setting that asks for it


def run_bundles(resources: ResourcesSpec) -> list[Bundle]:
    """The bundles of a run's `resources` section."""
    cpus, gpus = float(resources.trainer_cpus), float(resources.trainer_gpus)
    trainer_settings = {"CPU": "resources.trainer_cpus", "GPU": "resources.trainer_gpus"}
    if resources.executor != "ray":
        return [Bundle("the job's driver", {"CPU": cpus, "GPU": gpus}, trainer_settings)]
    actors, replicas = resources.trainer_actors, resources.rollout_replicas
    rollout = {"CPU": float(resources.rollout_cpus), "GPU": float(resources.rollout_gpus)}
    rollout_settings = {"CPU": "resources.rollout_cpus", "GPU": "resources.rollout_gpus"}
    return (
        [Bundle("the job's driver", {"CPU": DRIVER_CPUS, "GPU": 0.0}, {})]
        + [Bundle("a trainer actor", {"CPU": cpus, "GPU": gpus / actors}, trainer_settings)]
        * actors
        + [Bundle("a rollout replica", rollout, rollout_settings)] * replicas
    )


def entrypoint_resources(resources: ResourcesSpec) -> dict[str, float]:
    """What the job's driver process reserves. With the in-process executor it is the
    trainer and the engine, so it takes the trainer's share; with the Ray executor the
    actors' placement group holds the GPUs and CPUs, and a driver that reserved them too
    would count them twice (and could wait forever for its own group)."""
    if resources.executor == "ray":
        return {"num_cpus": DRIVER_CPUS, "num_gpus": 0.0}
    return {"num_cpus": float(resources.trainer_cpus), "num_gpus": float(resources.trainer_gpus)}


def _units(amount: float, resource: str) -> str:
    return f"{amount:g} {resource}" + ("" if abs(amount - 1) < _EPS else "s")


def _needed(bundles: list[Bundle]) -> dict[str, float]:
    return {r: sum(b.amounts.get(r, 0.0) for b in bundles) for r in RESOURCES}


def _setting_for(bundles: list[Bundle], resource: str) -> str:
    """The setting to name for a shortfall of `resource`: the one that asks for most of it."""
    asked: dict[str, float] = {}
    for b in bundles:
        if resource in b.settings and b.amounts.get(resource, 0) > 0:
            name = b.settings[resource]
            asked[name] = asked.get(name, 0.0) + b.amounts[resource]
    return max(asked, key=asked.__getitem__) if asked else f"resources ({resource})"


@dataclass(frozen=True)
class Refusal:
    setting: str  # e.g. "resources.trainer_gpus"
    message: str  # e.g. "resources.trainer_gpus: the cluster local has 0 GPUs (...)"


def _nodes(snapshot: dict[str, Any], key: str) -> list[dict[str, float]] | None:
    nodes = snapshot.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        return None
    values = [n.get(key) for n in nodes if isinstance(n, dict)]
    if any(not isinstance(v, dict) for v in values):
        return None
    return [{r: float(v.get(r, 0.0)) for r in RESOURCES} for v in values]


def never_placeable(
    *, bundles: list[Bundle], cluster_name: str, snapshot: dict[str, Any], capacity: dict[str, Any]
) -> Refusal | None:
    """Why the cluster can never place the run, or None (also when nothing is known)."""
    needed = _needed(bundles)
    declared = {r: capacity.get(r.lower() + "s") for r in RESOURCES}
    if any(isinstance(v, int | float) for v in declared.values()):
        for r in RESOURCES:
            limit = declared[r]
            if isinstance(limit, int | float) and needed[r] > limit + _EPS:
                setting = _setting_for(bundles, r)
                return Refusal(
                    setting,
                    f"{setting}: the cluster {cluster_name} has at most {_units(limit, r)} "
                    f"(the run asks for {_units(needed[r], r)})",
                )
        return None  # the operator's word; its nodes' shapes are not known
    nodes = _nodes(snapshot, "total")
    if nodes is None:
        return None
    for r in RESOURCES:
        total = sum(n[r] for n in nodes)
        if needed[r] > total + _EPS:
            setting = _setting_for(bundles, r)
            return Refusal(
                setting,
                f"{setting}: the cluster {cluster_name} has {_units(total, r)} "
                f"(the run asks for {_units(needed[r], r)})",
            )
    for b in bundles:
        if not any(all(b.amounts.get(r, 0) <= n[r] + _EPS for r in RESOURCES) for n in nodes):
            largest = {r: max(n[r] for n in nodes) for r in RESOURCES}
            r = max(RESOURCES, key=lambda r: b.amounts.get(r, 0) - largest[r])
            setting = b.settings.get(r, f"resources ({r})")
            return Refusal(
                setting,
                f"{setting}: {b.what} needs {_units(b.amounts[r], r)} on one node; the "
                f"largest node of the cluster {cluster_name} has {_units(largest[r], r)}",
            )
    return None


def wait_reason(
    *, bundles: list[Bundle], cluster_name: str, snapshot: dict[str, Any]
) -> str | None:
    """Why the cluster cannot place the run now (its free resources), or None when it can
    or when nothing is known. First fit, largest bundles first, as a sketch of Ray's own
    packing: a None here is no promise, but a reason is a real shortage."""
    nodes = _nodes(snapshot, "free")
    if nodes is None:
        return None
    needed = _needed(bundles)
    for r in RESOURCES:
        free = sum(n[r] for n in nodes)
        if needed[r] > free + _EPS:
            return (
                f"waiting for {_units(needed[r], r)}; the cluster {cluster_name} has {free:g} free"
            )
    free_nodes = [dict(n) for n in nodes]
    for b in sorted(bundles, key=lambda b: tuple(-b.amounts.get(r, 0) for r in RESOURCES)):
        node = next(
            (n for n in free_nodes if all(b.amounts.get(r, 0) <= n[r] + _EPS for r in RESOURCES)),
            None,
        )
        if node is None:
            shape = " and ".join(_units(b.amounts[r], r) for r in RESOURCES if b.amounts.get(r))
            return (
                f"waiting for a node with {shape} free for {b.what}; no node of the "
                f"cluster {cluster_name} has that much free"
            )
        for r in RESOURCES:
            node[r] -= b.amounts.get(r, 0)
    return None


def snapshot_less(snapshot: dict[str, Any], taken: list[Bundle]) -> dict[str, Any]:
    """`snapshot` with `taken` (the bundles of runs dispatched since its figures were
    reported, which they cannot show yet) removed from what is free, first fit."""
    nodes = _nodes(snapshot, "free")
    if nodes is None or not taken:
        return snapshot
    for b in taken:
        fits = [n for n in nodes if all(b.amounts.get(r, 0) <= n[r] + _EPS for r in RESOURCES)]
        node = fits[0] if fits else max(nodes, key=lambda n: tuple(n[r] for r in RESOURCES))
        for r in RESOURCES:
            node[r] = max(0.0, node[r] - b.amounts.get(r, 0))
    totals = [n.get("total") for n in snapshot["nodes"]]
    return {
        **snapshot,
        "nodes": [{"total": t, "free": f} for t, f in zip(totals, nodes, strict=True)],
    }


# --- snapshots from what the Ray dashboard answers ------------------------------------------


def snapshot_from_cluster_status(data: dict[str, Any]) -> dict[str, Any] | None:
    """From GET /api/cluster_status (`data`): the autoscaler's load metrics, per node
    {resource: [used, total]}. None when the cluster's monitor has not reported any."""
    report = ((data.get("clusterStatus") or {}).get("loadMetricsReport")) or {}
    per_node = report.get("usageByNode") or {}
    if not per_node and report.get("usage"):
        per_node = {"cluster": report["usage"]}  # totals only for the whole cluster
    nodes = []
    for usage in per_node.values():
        if not isinstance(usage, dict):
            continue
        total, free = {}, {}
        for r in RESOURCES:
            used, size = (usage.get(r) or [0.0, 0.0])[:2]
            total[r] = float(size)
            free[r] = max(0.0, float(size) - float(used))
        nodes.append({"total": total, "free": free})
    if not nodes:
        return None
    reported = (data.get("clusterStatus") or {}).get("time")
    snapshot: dict[str, Any] = {"nodes": nodes, "source": "cluster_status"}
    if isinstance(reported, int | float):
        snapshot["reported_at"] = float(reported)  # the monitor's time, not ours
    return snapshot


def snapshot_from_nodes(data: dict[str, Any]) -> dict[str, Any] | None:
    """From GET /api/v0/nodes?detail=1 (`data`): the alive nodes' totals (nothing free)."""
    rows = ((data.get("result") or {}).get("result")) or []
    nodes = [
        {"total": {r: float((row.get("resources_total") or {}).get(r, 0.0)) for r in RESOURCES}}
        for row in rows
        if isinstance(row, dict) and row.get("state") == "ALIVE"
    ]
    return {"nodes": nodes, "source": "nodes"} if nodes else None
