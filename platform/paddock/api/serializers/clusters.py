"""The Ray clusters a team may use."""

from __future__ import annotations

from rest_framework import serializers

from paddock.clusters.models import RayCluster


class ClusterSerializer(serializers.ModelSerializer):
    class Meta:
        model = RayCluster
        fields = ["id", "name", "team", "dashboard_url", "labels", "capacity", "backends",
                  "environments", "healthy", "last_seen_at"]  # fmt: skip
