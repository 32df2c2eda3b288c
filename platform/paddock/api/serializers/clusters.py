"""The Ray clusters a team may use."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from paddock.clusters.environments import offered_environments
from paddock.clusters.models import RayCluster


class ClusterSerializer(serializers.ModelSerializer):
    # what a run there may name as env.name: the built-ins every worker has, then those it
    # advertises (a registration lists only the latter); the launcher offers these
    environments = serializers.SerializerMethodField(
        help_text="the multi-turn environments a run there may name (env.name): the built-ins "
        "and those the cluster advertises"
    )

    class Meta:
        model = RayCluster
        fields = ["id", "name", "team", "dashboard_url", "labels", "capacity", "backends",
                  "environments", "healthy", "last_seen_at"]  # fmt: skip

    @extend_schema_field({"type": "array", "items": {"type": "string"}})
    def get_environments(self, cluster) -> list[str]:
        return offered_environments(cluster)
