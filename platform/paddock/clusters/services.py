"""Registering a Ray cluster and checking its health: what the API, `manage.py
paddock_cluster` and the health beat share.

Who may register: a team's admins and owners, a cluster of that team; a cluster shared by
every team, a staff session (never a token: tokens carry no staff rights) or an operator on
the server (`actor=None`, the management command)."""

from __future__ import annotations

import math
from urllib.parse import urlparse

from django.db import IntegrityError, transaction
from django.utils import timezone

from paddock.core.errors import DomainError, ErrorCode, forbidden
from paddock.teams.access import Actor
from paddock.teams.models import Role, Team
from paddock.teams.services import audit_record
from workers.names import BACKENDS, ENV_NAME

from .dispatch import cluster_resources_record
from .models import RayCluster
from .ray_jobs import ClusterUnreachable, cluster_version

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
    try:
        with transaction.atomic():
            cluster = RayCluster.objects.create(team=team, **fields)
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


def cluster_check(cluster: RayCluster) -> bool:
    """Ask the cluster's Jobs API for its version and its resources now, and store what it
    answered (healthy, the error, when it was last seen, the resource snapshot)."""
    try:
        version = cluster_version(address=cluster.address)
    except ClusterUnreachable as exc:
        RayCluster.objects.filter(pk=cluster.pk).update(healthy=False, health_error=str(exc))
        cluster.healthy, cluster.health_error = False, str(exc)
        return False
    labels = {**cluster.labels, "ray_version": version}
    now = timezone.now()
    RayCluster.objects.filter(pk=cluster.pk).update(
        healthy=True, health_error="", last_seen_at=now, labels=labels
    )
    cluster.healthy, cluster.health_error, cluster.last_seen_at = True, "", now
    cluster.labels = labels
    cluster_resources_record(cluster)
    return True
