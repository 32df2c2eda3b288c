"""Sweeps (docs/sweeps.md): the request that creates one, a sweep in a list, one sweep with
its members."""

from __future__ import annotations

from rest_framework import serializers

from paddock.sweeps.models import Sweep, SweepMember
from paddock.sweeps.plan import MAX_PARALLEL
from paddock.sweeps.space import MAX_MEMBERS

from .common import Description, Id, Name, UserBriefSerializer
from .experiments import TagsField


class SweepBudgetSerializer(serializers.Serializer):
    members = serializers.IntegerField(
        min_value=1, max_value=MAX_MEMBERS, required=False,
        help_text="how many members: a random search's draws (required); a grid's default is "
        "its size, which it may not be under",
    )  # fmt: skip
    gpu_hours = serializers.FloatField(
        min_value=0, required=False, allow_null=True,
        help_text="once the members' runs have counted for this many GPU-hours (a pooled "
        "run: its share of its pool's GPUs), the sweep stops",
    )  # fmt: skip


class EarlyStoppingSerializer(serializers.Serializer):
    rule = serializers.ChoiceField(choices=["median", "threshold"])
    min_steps = serializers.IntegerField(
        min_value=1, help_text="no member is stopped before it has trained this many steps"
    )
    min_members = serializers.IntegerField(
        min_value=1, max_value=MAX_PARALLEL, required=False,
        help_text="median: other members that must have reached the step compared at (3)",
    )  # fmt: skip
    threshold = serializers.FloatField(
        required=False, help_text="threshold: the value a member must have reached"
    )


class SweepCreateSerializer(serializers.Serializer):
    team = Id()
    name = Name(max_length=200)
    description = Description(max_length=10_000, required=False, default="", allow_blank=True)
    tags = TagsField(required=False, default=list)
    spec = serializers.JSONField(help_text="the base RunSpec every member starts from")
    method = serializers.ChoiceField(choices=Sweep.Method.choices)
    params = serializers.DictField(
        child=serializers.JSONField(),
        help_text='spec key → a list of values, or (random only) a range: {"lora.r": [8, 16], '
        '"train.lr": {"min": 1e-4, "max": 1e-2, "log": true}, "seed": [0, 1]}',
    )  # fmt: skip
    budget = SweepBudgetSerializer(required=False, default=dict)
    parallel = serializers.IntegerField(
        min_value=1, max_value=MAX_PARALLEL, required=False,
        help_text="members holding a run at once (default: what one pool hosts)",
    )  # fmt: skip
    metric = serializers.CharField(
        max_length=100, default="reward/mean", help_text="the objective: best and stopping"
    )
    mode = serializers.ChoiceField(choices=["max", "min"], default="max")
    early_stopping = EarlyStoppingSerializer(required=False, allow_null=True, default=None)
    seed = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=2**31 - 1,
        help_text="random search: the draw's seed (default: the spec's seed)",
    )  # fmt: skip
    cluster = Id(required=False, allow_null=True)
    validate_only = serializers.BooleanField(default=False)


class SweepPlannedMemberSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    settings = serializers.DictField(child=serializers.JSONField())


class SweepValidationSerializer(serializers.Serializer):
    valid = serializers.BooleanField()
    errors = serializers.ListField(child=serializers.DictField())
    members = SweepPlannedMemberSerializer(many=True)
    parallel = serializers.IntegerField(allow_null=True)


class SweepCountsSerializer(serializers.Serializer):
    pending = serializers.IntegerField(source="n_pending")
    active = serializers.IntegerField(source="n_active")
    stopping = serializers.IntegerField(source="n_stopping")
    stopped = serializers.IntegerField(source="n_stopped")
    done = serializers.IntegerField(source="n_done")
    skipped = serializers.IntegerField(source="n_skipped")


class SweepBudgetOutSerializer(serializers.Serializer):
    members = serializers.IntegerField(source="budget_members")
    gpu_hours = serializers.FloatField(source="budget_gpu_hours", allow_null=True)


class SweepSerializer(serializers.ModelSerializer):
    name = serializers.CharField(source="experiment.name")
    created_by = UserBriefSerializer(allow_null=True)
    counts = SweepCountsSerializer(source="*")
    gpu_hours = serializers.SerializerMethodField(help_text="what its runs have counted for")
    budget = SweepBudgetOutSerializer(source="*")

    class Meta:
        model = Sweep
        fields = ["id", "team", "experiment", "name", "method", "params", "seed", "metric",
                  "mode", "stopping", "budget", "parallel", "cluster", "state", "end_reason",
                  "gpu_hours", "counts", "created_by", "created_at", "finished_at"]  # fmt: skip

    def get_gpu_hours(self, sweep) -> float:
        return round(sweep.gpu_seconds / 3600, 6)


class SweepMemberRunSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    state = serializers.CharField()
    desired_state = serializers.CharField()
    step = serializers.IntegerField()
    total_steps = serializers.IntegerField()
    queued_reason = serializers.CharField()
    latest = serializers.DictField(child=serializers.FloatField())


class SweepMemberSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    settings = serializers.DictField(child=serializers.JSONField())
    state = serializers.ChoiceField(choices=SweepMember.State.choices)
    reason = serializers.CharField(help_text="why it waits, was stopped or skipped")
    stopped_step = serializers.IntegerField(allow_null=True)
    config = serializers.IntegerField(help_text="its effective spec's config version")
    run = SweepMemberRunSerializer(allow_null=True, help_text="null until it is launched")
    best = serializers.FloatField(allow_null=True, help_text="its best value of the metric")
    last = serializers.FloatField(allow_null=True, help_text="its last value of the metric")
    is_best = serializers.BooleanField(help_text="the best member so far")


class SweepDetailSerializer(SweepSerializer):
    members = SweepMemberSerializer(many=True, source="member_rows")

    class Meta(SweepSerializer.Meta):
        fields = [*SweepSerializer.Meta.fields, "members"]


class SweepFilterSerializer(serializers.Serializer):
    team = Id(required=False)
