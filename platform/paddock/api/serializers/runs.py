"""Runs, their events, sample sets and checkpoints."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from paddock.experiments.configs import rollout_backends
from paddock.experiments.metrics import LATEST_KEYS, metric_latest_of
from paddock.experiments.models import (
    Checkpoint,
    Run,
    RunEvent,
    RunState,
    SampleSet,
)

from .common import MAX_ID, Id, UserBriefSerializer, datetime_text
from .pools import RunPoolSerializer


class CursorSerializer(serializers.Serializer):
    dispatch = serializers.IntegerField(source="last_dispatch")
    seq = serializers.IntegerField(source="last_seq")


# A run in the OpenAPI schema. Every answer builds it with `run_rows` (the lists, a run, a
# launch's runs); this serializer is its annotation, and the reference that
# tests/platform/api/test_run_rows.py holds `run_rows` equal to.
class RunSerializer(serializers.ModelSerializer):
    experiment_name = serializers.CharField(source="experiment.name")
    created_by = UserBriefSerializer(allow_null=True)
    cluster_name = serializers.CharField(source="cluster.name", allow_null=True, default=None)
    cursor = CursorSerializer(source="*")
    latest = serializers.SerializerMethodField(
        help_text=f"the value at the highest stored step of each of {', '.join(LATEST_KEYS)}; "
        "a key with no value yet is absent"
    )

    class Meta:
        model = Run
        fields = ["id", "experiment", "experiment_name", "team", "config", "backend", "seed",
                  "purpose", "gpus", "state", "desired_state", "queued_reason", "error", "cluster",
                  "cluster_name", "dispatch_count", "ray_submission_id", "attempts",
                  "max_attempts", "step", "total_steps", "cursor", "latest", "created_by",
                  "created_at", "updated_at", "started_at", "finished_at"]  # fmt: skip

    @extend_schema_field({"type": "object", "additionalProperties": {"type": "number"}})
    def get_latest(self, run) -> dict[str, float]:
        return metric_latest_of(run)


# What `run_rows` reads of a run: `.values(*RUN_COLUMNS)` of a queryset of runs.
RUN_COLUMNS = ("id", "experiment_id", "experiment__name", "team_id", "config_id", "backend",
               "seed", "purpose", "gpus", "state", "desired_state", "queued_reason", "error",
               "cluster_id", "cluster__name", "dispatch_count", "ray_submission_id",
               "attempts", "max_attempts", "step", "total_steps", "last_dispatch",
               "last_seq", "created_by_id", "created_by__username", "created_at",
               "updated_at", "started_at", "finished_at")  # fmt: skip


def run_rows(rows: list[dict], latest: dict[int, dict[str, float]]) -> list[dict]:
    """RunSerializer's answer for each row of RUN_COLUMNS, with `latest` (run id → its
    `metric_latest_many` values), built by hand: DRF's fields cost more CPU than the page's
    query on the run list (tests/platform/api/test_run_rows.py holds them equal)."""
    zone = timezone.get_current_timezone()
    return [
        {
            "id": r["id"], "experiment": r["experiment_id"],
            "experiment_name": r["experiment__name"], "team": r["team_id"],
            "config": r["config_id"], "backend": r["backend"], "seed": r["seed"],
            "purpose": r["purpose"], "gpus": float(r["gpus"]), "state": r["state"],
            "desired_state": r["desired_state"],
            "queued_reason": r["queued_reason"], "error": r["error"],
            "cluster": r["cluster_id"],
            "cluster_name": r["cluster__name"] if r["cluster_id"] is not None else None,
            "dispatch_count": r["dispatch_count"], "ray_submission_id": r["ray_submission_id"],
            "attempts": r["attempts"], "max_attempts": r["max_attempts"], "step": r["step"],
            "total_steps": r["total_steps"],
            "cursor": {"dispatch": r["last_dispatch"], "seq": r["last_seq"]},
            "latest": latest.get(r["id"], {}),
            "created_by": None if r["created_by_id"] is None
            else {"id": r["created_by_id"], "username": r["created_by__username"]},
            "created_at": datetime_text(r["created_at"], zone),
            "updated_at": datetime_text(r["updated_at"], zone),
            "started_at": datetime_text(r["started_at"], zone),
            "finished_at": datetime_text(r["finished_at"], zone),
        }
        for r in rows
    ]  # fmt: skip


class RunDetailSerializer(RunSerializer):
    """One run, with the pool that hosts it (`pool_info`, set by the view: clusters'
    run_pool_info) or null."""

    pool = RunPoolSerializer(source="pool_info", allow_null=True, read_only=True)

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "pool"]


class RunFilterSerializer(serializers.Serializer):
    team = Id(required=False)
    experiment = Id(required=False)
    state = serializers.CharField(required=False, help_text="one state, or several: a,b")
    backend = serializers.ChoiceField(choices=rollout_backends(), required=False)
    tag = serializers.CharField(required=False, max_length=50)
    creator = serializers.CharField(required=False, max_length=150)

    def validate_state(self, value: str) -> list[str]:
        states = [s for s in value.split(",") if s]
        bad = [s for s in states if s not in RunState.values]
        if bad:
            raise serializers.ValidationError(f"unknown state(s) {bad}; one of {RunState.values}")
        return states


class RunEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = RunEvent
        fields = ["id", "dispatch", "kind", "level", "message", "time"]


class RunEventQuerySerializer(serializers.Serializer):
    after = serializers.IntegerField(min_value=0, max_value=MAX_ID, default=0)
    before = serializers.IntegerField(
        min_value=1, max_value=MAX_ID, required=False,
        help_text="the events before this id, newest first (scrolling a log tail back)",
    )  # fmt: skip
    kind = serializers.ChoiceField(choices=RunEvent.Kind.choices, required=False)
    limit = serializers.IntegerField(min_value=1, max_value=1000, default=200)


class RunEventPageSerializer(serializers.Serializer):
    results = RunEventSerializer(many=True)
    last_id = serializers.IntegerField(help_text="pass as ?after= to get what follows")
    next_before = serializers.IntegerField(
        allow_null=True,
        help_text="with ?before=: pass as ?before= for the older events; null when there are "
        "none (always null without ?before=)",
    )


class SampleSetSerializer(serializers.ModelSerializer):
    items = serializers.ListField(
        child=serializers.DictField(),
        help_text='[{"prompt", "completion", "reward", "advantage", "adapter_version", …}]',
    )

    class Meta:
        model = SampleSet
        fields = ["id", "step", "dispatch", "items", "created_at"]


class SampleQuerySerializer(serializers.Serializer):
    step = serializers.IntegerField(min_value=0, max_value=MAX_ID, required=False)
    before_step = serializers.IntegerField(min_value=0, max_value=MAX_ID, required=False)
    limit = serializers.IntegerField(min_value=1, max_value=200, default=20)


class SampleSetPageSerializer(serializers.Serializer):
    results = SampleSetSerializer(many=True)
    next_before_step = serializers.IntegerField(
        allow_null=True, help_text="pass as ?before_step= for older steps; null at the first"
    )


class CheckpointSerializer(serializers.ModelSerializer):
    class Meta:
        model = Checkpoint
        fields = ["id", "run", "step", "adapter_version", "uri", "size_bytes", "dispatch",
                  "created_at"]  # fmt: skip
