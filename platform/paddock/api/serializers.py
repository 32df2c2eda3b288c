"""Input validation and output shapes. No logic: services decide, these only translate."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from paddock.clusters.models import RayCluster
from paddock.core.text import text_problem
from paddock.experiments.configs import rollout_backends
from paddock.experiments.launch import MAX_SEEDS
from paddock.experiments.metrics import LATEST_KEYS, MAX_POINTS_LIMIT, X_AXES, metric_latest_of
from paddock.experiments.metrics_export import FORMATS as EXPORT_FORMATS
from paddock.experiments.models import (
    Checkpoint,
    ConfigVersion,
    Dataset,
    Experiment,
    Run,
    RunEvent,
    RunState,
    SampleSet,
)
from paddock.teams.models import ApiToken, AuditEvent, Membership, Role, Team, TeamQuota

MAX_ID = 2**63 - 1
MAX_COMPARED_RUNS = 50  # an experiment's runs: 3 backends × up to 16 seeds
Id = lambda **kw: serializers.IntegerField(min_value=1, max_value=MAX_ID, **kw)  # noqa: E731


def _plain_text(multiline: bool):
    def check(value: str) -> None:
        problem = text_problem(value, multiline=multiline)
        if problem:
            raise serializers.ValidationError(problem, code="control_character")

    return check


def Name(**kw) -> serializers.CharField:  # noqa: N802  (a field, spelled like one)
    """A name or a tag: printable text on one line (core/text.py)."""
    return serializers.CharField(validators=[_plain_text(False)], **kw)


def Description(**kw) -> serializers.CharField:  # noqa: N802
    """Multi-line text: line breaks and tabs, no other control characters."""
    return serializers.CharField(validators=[_plain_text(True)], **kw)


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    field = serializers.CharField(allow_null=True)
    errors = serializers.ListField(child=serializers.DictField(), required=False)


class UserBriefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()


# --- teams ---------------------------------------------------------------------------------


class TeamSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Team
        fields = ["id", "name", "slug", "role", "created_at"]

    def get_role(self, team) -> str | None:
        return self.context["actor"].role_in(team.pk)


class TeamCreateSerializer(serializers.Serializer):
    name = Name(max_length=100)
    slug = serializers.SlugField(max_length=60, required=False, allow_blank=True)


class TeamUpdateSerializer(serializers.Serializer):
    name = Name(max_length=100)


class MemberSerializer(serializers.ModelSerializer):
    user = UserBriefSerializer()

    class Meta:
        model = Membership
        fields = ["user", "role", "created_at"]


class MemberAddSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=Role.choices, default=Role.MEMBER)


class MemberRoleSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices)


class TokenSerializer(serializers.ModelSerializer):
    user = UserBriefSerializer()

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "user", "created_at", "expires_at", "revoked_at",
                  "last_used_at"]  # fmt: skip


class TokenCreateSerializer(serializers.Serializer):
    name = Name(max_length=100)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)


class TokenCreatedSerializer(TokenSerializer):
    token = serializers.CharField(help_text="the secret: shown this once, never again")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]


class QuotaSerializer(serializers.ModelSerializer):
    active_runs = serializers.IntegerField(read_only=True)
    running_runs = serializers.IntegerField(read_only=True)
    gpus_in_use = serializers.FloatField(read_only=True)

    class Meta:
        model = TeamQuota
        fields = ["max_concurrent_runs", "max_gpus", "max_queued_runs", "active_runs",
                  "running_runs", "gpus_in_use", "updated_at"]  # fmt: skip


class QuotaUpdateSerializer(serializers.Serializer):
    max_concurrent_runs = serializers.IntegerField(min_value=0, max_value=100_000, required=False)
    max_gpus = serializers.FloatField(min_value=0, max_value=1_000_000, required=False)
    max_queued_runs = serializers.IntegerField(min_value=0, max_value=1_000_000, required=False)


class AuditEventSerializer(serializers.ModelSerializer):
    actor = UserBriefSerializer(allow_null=True)

    class Meta:
        model = AuditEvent
        fields = ["id", "actor", "action", "target_type", "target_id", "data", "ip",
                  "user_agent", "created_at"]  # fmt: skip


class AuditFilterSerializer(serializers.Serializer):
    action = serializers.CharField(required=False, max_length=60)
    actor = Id(required=False)
    target_type = serializers.CharField(required=False, max_length=40)
    target_id = serializers.CharField(required=False, max_length=64)
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)


class MeSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()
    is_staff = serializers.BooleanField()
    teams = TeamSerializer(many=True)
    token = serializers.CharField(allow_null=True, help_text="prefix of the token in use")


# --- experiments, configs ------------------------------------------------------------------


def _backends_field(**kw):
    return serializers.ListField(
        child=serializers.ChoiceField(choices=rollout_backends()), min_length=1, max_length=3, **kw
    )


class TagsField(serializers.ListField):
    child = Name(max_length=50)

    def __init__(self, **kw):
        super().__init__(max_length=20, **kw)


class ExperimentSerializer(serializers.ModelSerializer):
    tags = serializers.SerializerMethodField()
    created_by = UserBriefSerializer(allow_null=True)
    team_slug = serializers.CharField(source="team.slug")
    run_count = serializers.IntegerField()
    active_run_count = serializers.IntegerField()

    class Meta:
        model = Experiment
        fields = ["id", "team", "team_slug", "name", "description", "tags", "config",
                  "cloned_from", "created_by", "created_at", "run_count",
                  "active_run_count"]  # fmt: skip

    def get_tags(self, experiment) -> list[str]:
        return [t.name for t in experiment.tags.all()]


class ExperimentUpdateSerializer(serializers.Serializer):
    name = Name(max_length=200, required=False)
    description = Description(max_length=10_000, required=False, allow_blank=True)
    tags = TagsField(required=False)


class LaunchSerializer(serializers.Serializer):
    team = Id()
    name = Name(max_length=200)
    description = Description(max_length=10_000, required=False, default="", allow_blank=True)
    tags = TagsField(required=False, default=list)
    spec = serializers.JSONField(help_text="a RunSpec (GET /api/v1/spec/schema)")
    backends = _backends_field(required=False, help_text="default: the spec's rollout.backend")
    seeds = serializers.IntegerField(min_value=1, max_value=MAX_SEEDS, default=1)
    cluster = Id(required=False, allow_null=True)
    validate_only = serializers.BooleanField(default=False)


class CloneSerializer(serializers.Serializer):
    edits = serializers.DictField(
        child=serializers.JSONField(), required=False, default=dict,
        help_text='dotted path → value, e.g. {"algorithm.kl_coef": 0.05}',
    )  # fmt: skip
    config = Id(required=False, help_text="clone this version (default: the launched one)")
    name = Name(max_length=200, required=False, default="")
    description = Description(max_length=10_000, required=False, allow_blank=True)
    tags = TagsField(required=False)
    backends = _backends_field(required=False)
    seeds = serializers.IntegerField(min_value=1, max_value=MAX_SEEDS, required=False)
    cluster = Id(required=False, allow_null=True)
    validate_only = serializers.BooleanField(default=False)


class PlannedRunSerializer(serializers.Serializer):
    backend = serializers.CharField()
    seed = serializers.IntegerField()
    gpus = serializers.FloatField()


class ValidationReportSerializer(serializers.Serializer):
    valid = serializers.BooleanField()
    errors = serializers.ListField(child=serializers.DictField())
    runs = PlannedRunSerializer(many=True)


class ConfigVersionSerializer(serializers.ModelSerializer):
    class Meta:
        model = ConfigVersion
        fields = ["id", "team", "hash", "parent", "spec", "created_by", "created_at"]


class DiffQuerySerializer(serializers.Serializer):
    a = Id()
    b = Id()


class ChangeSerializer(serializers.Serializer):
    path = serializers.CharField()
    a = serializers.JSONField(allow_null=True)
    b = serializers.JSONField(allow_null=True)
    only_in = serializers.ChoiceField(choices=["a", "b"], required=False)


class DiffSerializer(serializers.Serializer):
    a = serializers.IntegerField()
    b = serializers.IntegerField()
    changes = ChangeSerializer(many=True)


class ExperimentFilterSerializer(serializers.Serializer):
    team = Id(required=False)
    tag = serializers.CharField(required=False, max_length=50)
    creator = serializers.CharField(required=False, max_length=150)
    search = serializers.CharField(required=False, max_length=200)


# --- runs ----------------------------------------------------------------------------------


class CursorSerializer(serializers.Serializer):
    dispatch = serializers.IntegerField(source="last_dispatch")
    seq = serializers.IntegerField(source="last_seq")


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
                  "gpus", "state", "desired_state", "queued_reason", "error", "cluster",
                  "cluster_name", "dispatch_count", "ray_submission_id", "attempts",
                  "max_attempts", "step", "total_steps", "cursor", "latest", "created_by",
                  "created_at", "updated_at", "started_at", "finished_at"]  # fmt: skip

    @extend_schema_field({"type": "object", "additionalProperties": {"type": "number"}})
    def get_latest(self, run) -> dict[str, float]:
        return metric_latest_of(run)


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


class MetricsQuerySerializer(serializers.Serializer):
    keys = serializers.CharField(required=False, help_text="comma-separated; default: all")
    max_points = serializers.IntegerField(min_value=2, max_value=MAX_POINTS_LIMIT, default=1000)
    x = serializers.ChoiceField(choices=X_AXES, default="step")
    x_min = serializers.FloatField(
        required=False, min_value=-1e300, max_value=1e300,
        help_text="only points with x ≥ x_min (a zoom: finer buckets over the window)",
    )  # fmt: skip
    x_max = serializers.FloatField(
        required=False, min_value=-1e300, max_value=1e300, help_text="only points with x ≤ x_max"
    )
    sample = serializers.ChoiceField(
        choices=("minmax", "stride"), default="minmax",
        help_text="minmax: the lowest and highest point per bucket (reads every point, keeps "
        "spikes); stride: evenly spaced steps by index probes (fast, for a first frame; "
        "count is null)",
    )  # fmt: skip

    def validate(self, attrs: dict) -> dict:
        lo, hi = attrs.get("x_min"), attrs.get("x_max")
        if lo is not None and hi is not None and lo > hi:
            raise serializers.ValidationError({"x_max": "must be ≥ x_min"})
        windowed = lo is not None or hi is not None
        if attrs.get("sample") == "stride" and windowed and attrs.get("x") != "step":
            raise serializers.ValidationError({"sample": "stride takes a window on x=step only"})
        return attrs

    def validate_keys(self, value: str) -> list[str]:
        keys = list(dict.fromkeys(k.strip() for k in value.split(",") if k.strip()))
        if len(keys) > 50:
            raise serializers.ValidationError("at most 50 keys")
        return keys


class MetricsExportQuerySerializer(serializers.Serializer):
    # `format` is this endpoint's own parameter: the view's content negotiation ignores it
    format = serializers.ChoiceField(choices=EXPORT_FORMATS, default="csv")
    keys = serializers.CharField(required=False, help_text="comma-separated; default: all")

    def validate_keys(self, value: str) -> list[str]:
        keys = list(dict.fromkeys(k.strip() for k in value.split(",") if k.strip()))
        if len(keys) > 1000:
            raise serializers.ValidationError("at most 1000 keys")
        return keys


class MultiMetricsQuerySerializer(MetricsQuerySerializer):
    runs = serializers.CharField(
        required=False,
        help_text=f"comma-separated run ids (at most {MAX_COMPARED_RUNS}); or `experiment`",
    )
    experiment = Id(required=False, help_text="every run of this experiment, oldest first")
    keys = serializers.CharField(help_text="comma-separated metric keys")

    def validate(self, attrs: dict) -> dict:
        attrs = super().validate(attrs)
        if ("runs" in attrs) == ("experiment" in attrs):
            raise serializers.ValidationError({"runs": "give runs or experiment (one of them)"})
        return attrs

    def validate_runs(self, value: str) -> list[int]:
        try:
            ids = list(dict.fromkeys(int(v) for v in value.split(",") if v.strip()))
        except ValueError:
            raise serializers.ValidationError("comma-separated run ids") from None
        if not ids or len(ids) > MAX_COMPARED_RUNS or not all(1 <= i <= MAX_ID for i in ids):
            raise serializers.ValidationError(f"1 to {MAX_COMPARED_RUNS} run ids")
        return ids


class SeriesSerializer(serializers.Serializer):
    key = serializers.CharField()
    x = serializers.ListField(child=serializers.FloatField())
    y = serializers.ListField(child=serializers.FloatField(allow_null=True))
    step = serializers.ListField(child=serializers.IntegerField())
    count = serializers.IntegerField(
        allow_null=True, help_text="points stored before downsampling (null with sample=stride)"
    )
    downsampled = serializers.BooleanField(allow_null=True)


class RunMetricsSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    x = serializers.CharField()
    series = SeriesSerializer(many=True)


class MultiMetricsSerializer(serializers.Serializer):
    x = serializers.CharField()
    runs = RunMetricsSerializer(many=True)


# --- clusters, datasets --------------------------------------------------------------------


class ClusterSerializer(serializers.ModelSerializer):
    class Meta:
        model = RayCluster
        fields = ["id", "name", "team", "dashboard_url", "labels", "capacity", "backends",
                  "healthy", "last_seen_at"]  # fmt: skip


class DatasetSerializer(serializers.ModelSerializer):
    class Meta:
        model = Dataset
        fields = ["id", "team", "name", "sha256", "uri", "size_bytes", "rows", "created_at"]


class DatasetUploadSerializer(serializers.Serializer):
    team = Id()
    name = Name(max_length=200)
    file = serializers.FileField()
