"""Readers of the cluster registry, scoped to what the actor may see."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from paddock.teams.access import Actor

from .models import RayCluster


def cluster_list(*, actor: Actor) -> QuerySet[RayCluster]:
    """Shared clusters and those of the actor's teams."""
    return RayCluster.objects.filter(Q(team__isnull=True) | Q(team_id__in=actor.team_ids)).order_by(
        "name"
    )
