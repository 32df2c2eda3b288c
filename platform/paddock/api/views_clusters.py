"""Ray clusters: list (shared and the caller's teams'), one with its health, registration
(team admins; staff for a shared cluster), and a health check on demand."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from paddock.api import serializers as s
from paddock.api.base import ActorViewSet, body, parse_id
from paddock.api.views_teams import ERRORS
from paddock.clusters import selectors
from paddock.clusters.services import cluster_check, cluster_register
from paddock.core.errors import not_found
from paddock.teams.selectors import team_get


class ClusterHealthSerializer(s.ClusterSerializer):
    class Meta(s.ClusterSerializer.Meta):
        fields = [*s.ClusterSerializer.Meta.fields, "health_error", "resources"]


class ClusterRegisterSerializer(serializers.Serializer):
    name = s.Name(max_length=100)
    address = serializers.CharField(max_length=300, help_text="Jobs API, e.g. http://head:8265")
    team = s.Id(required=False, allow_null=True, help_text="leave out: shared (staff only)")
    dashboard_url = serializers.CharField(max_length=300, required=False, allow_blank=True)
    labels = serializers.DictField(child=serializers.CharField(max_length=200), required=False)
    capacity = serializers.DictField(
        child=serializers.JSONField(), required=False, help_text='e.g. {"cpus": 16, "gpus": 8}'
    )
    backends = serializers.ListField(
        child=serializers.CharField(max_length=50), required=False, max_length=10
    )
    environments = serializers.ListField(
        child=serializers.CharField(max_length=64), required=False, max_length=100,
        help_text="multi-turn environments installed there besides the built-ins",
    )  # fmt: skip


class ClusterViewSet(ActorViewSet):
    serializer_class = s.ClusterSerializer

    def get_queryset(self):
        return selectors.cluster_list(actor=self.actor)

    def _cluster(self, pk):
        cluster = self.get_queryset().filter(pk=parse_id(pk, "cluster")).first()
        if cluster is None:
            raise not_found("cluster")
        return cluster

    def list(self, request):
        return Response(s.ClusterSerializer(self.get_queryset(), many=True).data)

    @extend_schema(responses={200: ClusterHealthSerializer, **ERRORS})
    def retrieve(self, request, pk=None):
        return Response(ClusterHealthSerializer(self._cluster(pk)).data)

    @extend_schema(
        request=ClusterRegisterSerializer,
        responses={201: ClusterHealthSerializer, 409: s.ErrorSerializer, **ERRORS},
        description="Register a Ray cluster: a team's (its admins and owners), or one shared "
        "by every team (a staff session; an API token never carries staff rights).",
    )
    def create(self, request):
        data = body(ClusterRegisterSerializer, request)
        team_id = data.pop("team", None)
        team = team_get(actor=self.actor, team_id=team_id) if team_id else None
        cluster = cluster_register(actor=self.actor, team=team, **data)
        return Response(ClusterHealthSerializer(cluster).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: ClusterHealthSerializer, **ERRORS})
    @action(detail=True, methods=["post"])
    def health(self, request, pk=None):
        """Check the cluster's Jobs API now (version and resources) and store the answer."""
        cluster = self._cluster(pk)
        cluster_check(cluster)
        return Response(ClusterHealthSerializer(cluster).data)
