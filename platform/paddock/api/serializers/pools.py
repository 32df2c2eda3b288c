"""Pools as a team sees them (docs/pools.md): a pool may host runs of several teams, so
every shape here holds the caller's own teams' members only, and a count of the rest."""

from __future__ import annotations

from rest_framework import serializers


class PoolMemberSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    experiment_name = serializers.CharField()
    team = serializers.IntegerField()
    team_name = serializers.CharField()
    state = serializers.CharField()
    dispatch = serializers.IntegerField(help_text="the run's dispatch this membership is of")
    weight = serializers.FloatField(help_text="resources.pool_weight")
    share = serializers.FloatField(
        allow_null=True, help_text="its weight over the current members' (null once it left)"
    )
    gpus = serializers.FloatField(
        allow_null=True, help_text="what it counts for in its team's GPU quota"
    )
    joined_at = serializers.DateTimeField()
    left_at = serializers.DateTimeField(allow_null=True)
    left_reason = serializers.CharField()
    latest = serializers.DictField(
        child=serializers.FloatField(),
        help_text="last throughput/tokens_per_s, pool/* (workers/names.py POOL_METRICS) and "
        "memory/* values, those reported",
    )


class PoolSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    state = serializers.CharField()
    cluster_name = serializers.CharField()
    team = serializers.IntegerField(
        allow_null=True, required=False,
        help_text="staff sessions only (absent for anyone else): the team of a named pool "
        "(its name is unique in that team only); null for an auto pool",
    )  # fmt: skip
    team_name = serializers.CharField(
        allow_null=True, required=False, help_text="staff sessions only, with team"
    )
    capacity = serializers.IntegerField(help_text="runs it hosts at most")
    members_total = serializers.IntegerField(help_text="the runs it hosts now, of every team")
    gpus = serializers.FloatField(help_text="GPUs its job holds")
    dispatch_count = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    key = serializers.DictField(help_text="what its runs share (workers/pool_key.py)")
    members = PoolMemberSerializer(many=True, help_text="the caller's teams' runs only")


class RunPoolSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    state = serializers.CharField()
    share = serializers.FloatField(allow_null=True, help_text="null once the run left")
    weight = serializers.FloatField()
    joined_at = serializers.DateTimeField()
    left_at = serializers.DateTimeField(allow_null=True)
    members_of_your_team = serializers.ListField(child=serializers.IntegerField())
    members_total = serializers.IntegerField()
