"""Registering a Ray cluster and checking its health: what the API, `manage.py
paddock_cluster` and the health beat share.

Who may register (docs/security.md#clusters): a staff session (never a token: tokens carry
no staff rights) or the operator on the server (`actor=None`, the management command), any
cluster, shared or a team's; a team's admins and owners, a cluster of that team at an address
inside the networks the operator allows (PADDOCK_CLUSTER_NETWORKS), and nowhere else: the
platform sends the deployment's Ray token to every cluster it calls."""

from __future__ import annotations

import logging
import math
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from urllib.parse import urlparse

from django.db import IntegrityError, transaction
from django.utils import timezone

from paddock.core.errors import DomainError, ErrorCode, forbidden
from paddock.teams.access import Actor
from paddock.teams.models import Role, Team
from paddock.teams.services import audit_record
from workers.names import BACKENDS, ENV_NAME

from .approval import (
    ClusterNotApproved,
    Endpoint,
    approved_endpoint,
    cluster_endpoint,
    network_endpoint,
)
from .dispatch import cluster_resources_store
from .models import RayCluster
from .ray_jobs import (
    ClusterUnreachable,
    JobRow,
    cluster_resources,
    cluster_version,
    jobs_unfinished,
)

log = logging.getLogger(__name__)

CAPACITY_KEYS = ("cpus", "gpus")
MAX_LABELS = 50


def _http_url(value: str, field: str, *, required: bool) -> str:
    value = (value or "").strip()
    if not value and not required:
        return ""
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise DomainError(ErrorCode.INVALID, "an http(s) URL, e.g. http://head:8265", field=field)
    return value.rstrip("/")


def _capacity(value: dict) -> dict:
    unknown = sorted(set(value) - set(CAPACITY_KEYS))
    if unknown:
        raise DomainError(ErrorCode.INVALID, f"{unknown[0]}: unknown; one of {list(CAPACITY_KEYS)}",
            field=f"capacity.{unknown[0]}",
        )  # fmt: skip
    for key, number in value.items():
        is_number = isinstance(number, int | float) and not isinstance(number, bool)
        if not is_number or not math.isfinite(number) or number < 0:
            raise DomainError(ErrorCode.INVALID, "a number >= 0", field=f"capacity.{key}")
    return dict(value)


def _backends(value: list) -> list[str]:
    bad = [b for b in value if b not in BACKENDS]
    if bad:
        raise DomainError(
            ErrorCode.INVALID,
            f"unknown backend {bad[0]!r}; one of {list(BACKENDS)}",
            field="backends",
        )
    return list(dict.fromkeys(value))


def _environments(value: list) -> list[str]:
    bad = [e for e in value if not isinstance(e, str) or not ENV_NAME.fullmatch(e)]
    if bad:
        raise DomainError(
            ErrorCode.INVALID,
            f"{bad[0]!r} is not an environment name (lowercase letters, digits, _.-)",
            field="environments",
        )
    return list(dict.fromkeys(value))


def cluster_register(
    *,
    actor: Actor | None,
    name: str,
    address: str,
    team: Team | None = None,
    dashboard_url: str = "",
    labels: dict | None = None,
    capacity: dict | None = None,
    backends: list[str] | None = None,
    environments: list[str] | None = None,
) -> RayCluster:
    """A new cluster; `actor=None` is the operator on the server."""
    operator = actor is None or actor.is_staff
    if actor is not None:
        if team is not None:
            actor.require(team.pk, Role.ADMIN, what="team")
        elif not actor.is_staff:
            raise forbidden(
                "a cluster shared by every team needs a staff session (or, on the server, "
                "`manage.py paddock_cluster register`); name a team to register your own"
            )
    fields = {
        "name": name.strip(),
        "address": _http_url(address, "address", required=True),
        "dashboard_url": _http_url(dashboard_url, "dashboard_url", required=False),
        "labels": dict(labels or {}),
        "capacity": _capacity(capacity or {}),
        "backends": _backends(backends or []),
        "environments": _environments(environments or []),
    }
    if not fields["name"]:
        raise DomainError(ErrorCode.INVALID, "a name", field="name")
    if len(fields["labels"]) > MAX_LABELS:
        raise DomainError(ErrorCode.INVALID, f"at most {MAX_LABELS} labels", field="labels")
    if not operator and network_endpoint(fields["address"]) is None:
        raise forbidden(
            "registering a cluster at this address is a platform admin's action (the platform "
            "sends it the deployment's Ray token): ask a staff user to register it, or the "
            "operator to allow its network with PADDOCK_CLUSTER_NETWORKS"
        )
    try:
        with transaction.atomic():
            cluster = RayCluster.objects.create(team=team, address_approved=operator, **fields)
    except IntegrityError:
        raise DomainError(
            ErrorCode.NAME_TAKEN, f"a cluster named {fields['name']!r} exists", field="name"
        ) from None
    audit_record(
        actor=actor, team_id=team.pk if team else None, action="cluster.register",
        target_type="cluster", target_id=cluster.pk,
        data={"name": cluster.name, "address": cluster.address},
    )  # fmt: skip
    return cluster


@dataclass(frozen=True)
class Probe:
    """What a cluster's Jobs API answered: its version, its resources (None: no snapshot),
    the unfinished jobs carrying `metadata` (None: not asked, or no answer), or the error."""

    version: str | None = None
    resources: dict | None = None
    jobs: list[JobRow] | None = None
    error: str = ""


def cluster_probe(address: str | Endpoint, *, jobs_tagged: dict[str, str] | None = None) -> Probe:
    """Ask the cluster now: its version, its resources and, with `jobs_tagged`, its
    unfinished jobs of that metadata. `address`: an Endpoint approved already (no database:
    the health task calls this from threads), or an address approved here."""
    try:
        endpoint = address if isinstance(address, Endpoint) else cluster_endpoint(address)
        version = cluster_version(address=endpoint)
    except (ClusterUnreachable, ClusterNotApproved) as exc:
        return Probe(error=str(exc))
    try:
        resources = cluster_resources(address=endpoint)
    except ClusterUnreachable:
        resources = None
    jobs = None
    if jobs_tagged is not None:
        try:
            jobs = jobs_unfinished(address=endpoint, metadata=jobs_tagged)
        except (ClusterUnreachable, RuntimeError) as exc:  # the next check tries again
            log.warning("listing the jobs of %s: %s", endpoint.address, exc)
    return Probe(version=version, resources=resources, jobs=jobs)


def cluster_probe_record(cluster: RayCluster, probe: Probe) -> bool:
    """Store what a probe found (healthy, the error, when it was last seen, the resource
    snapshot); True when the cluster answered."""
    if probe.error:
        error = probe.error[:2000]
        RayCluster.objects.filter(pk=cluster.pk).update(healthy=False, health_error=error)
        cluster.healthy, cluster.health_error = False, error
        return False
    labels = {**cluster.labels, "ray_version": probe.version}
    now = timezone.now()
    RayCluster.objects.filter(pk=cluster.pk).update(
        healthy=True, health_error="", last_seen_at=now, labels=labels
    )
    cluster.healthy, cluster.health_error, cluster.last_seen_at = True, "", now
    cluster.labels = labels
    if probe.resources is not None:
        cluster_resources_store(cluster, probe.resources)
    return True


def cluster_check(cluster: RayCluster) -> bool:
    """Ask the cluster's Jobs API for its version and its resources now, and store what it
    answered."""
    return cluster_probe_record(cluster, cluster_probe(cluster.address))


def clusters_probe(
    clusters: list[RayCluster], *, deadline_s: float, jobs_tagged: dict[str, str]
) -> dict[int, Probe]:
    """Probe every cluster at once, each in a thread, and wait at most `deadline_s` for them
    all: one slow or hung cluster costs the others nothing and is reported as not answering
    (its thread ends when its calls' own timeouts do). Which rows approve an address is read
    here, in the caller's thread (the database); the threads only look names up and talk
    to the clusters."""
    if not clusters:
        return {}
    pool = ThreadPoolExecutor(max_workers=min(16, len(clusters)), thread_name_prefix="health")
    futures = {
        pool.submit(_probe, c.address, approved_endpoint(c.address), jobs_tagged): c.pk
        for c in clusters
    }
    done, _ = wait(futures, timeout=deadline_s)
    pool.shutdown(wait=False, cancel_futures=True)
    late = Probe(error=f"the Jobs API did not answer within {deadline_s:g} s")
    return {pk: future.result() if future in done else late for future, pk in futures.items()}


def _probe(address: str, approved: Endpoint | None, jobs_tagged: dict[str, str]) -> Probe:
    endpoint = approved or network_endpoint(address)
    if endpoint is None:
        return Probe(error=str(ClusterNotApproved(address)))
    return cluster_probe(endpoint, jobs_tagged=jobs_tagged)
