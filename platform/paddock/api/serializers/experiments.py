"""Experiments, launch and clone, config versions and their diffs, datasets."""

from __future__ import annotations

from django.utils import timezone
from rest_framework import serializers

from paddock.experiments.configs import rollout_backends
from paddock.experiments.launch import MAX_SEEDS
from paddock.experiments.models import (
    ConfigVersion,
    Dataset,
    Experiment,
)
from paddock.experiments.preflight import MODES as PREFLIGHT_MODES
from workers import names

from .common import Description, Id, Name, UserBriefSerializer, datetime_text


def _backends_field(**kw):
    return serializers.ListField(
        child=serializers.ChoiceField(choices=rollout_backends()),
        min_length=1,
        max_length=len(names.BACKENDS),  # each backend at most once
        **kw,
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
                  "cloned_from", "preflight", "created_by", "created_at", "run_count",
                  "active_run_count"]  # fmt: skip

    def get_tags(self, experiment) -> list[str]:
        return [t.name for t in experiment.tags.all()]


# What `experiment_rows` reads: `.values(*EXPERIMENT_COLUMNS)` of selectors.experiment_list.
EXPERIMENT_COLUMNS = ("id", "team_id", "team__slug", "name", "description", "config_id",
                      "cloned_from_id", "preflight", "created_by_id", "created_by__username",
                      "created_at", "run_count", "active_run_count")  # fmt: skip


def experiment_rows(rows: list[dict], tags: dict[int, list[str]]) -> list[dict]:
    """ExperimentSerializer's answer for each row of EXPERIMENT_COLUMNS, with `tags`
    (experiment id → its tag names, by name), built by hand as `run_rows` are."""
    zone = timezone.get_current_timezone()
    return [
        {
            "id": r["id"], "team": r["team_id"], "team_slug": r["team__slug"],
            "name": r["name"], "description": r["description"], "tags": tags.get(r["id"], []),
            "config": r["config_id"], "cloned_from": r["cloned_from_id"],
            "preflight": r["preflight"],
            "created_by": None if r["created_by_id"] is None
            else {"id": r["created_by_id"], "username": r["created_by__username"]},
            "created_at": datetime_text(r["created_at"], zone),
            "run_count": r["run_count"], "active_run_count": r["active_run_count"],
        }
        for r in rows
    ]  # fmt: skip


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
    preflight = serializers.ChoiceField(
        choices=PREFLIGHT_MODES, default="off",
        help_text="first: a pre-flight check of the spec on each backend, which the runs wait "
        "for; only: the check alone (docs/preflight.md)",
    )  # fmt: skip


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
    preflight = serializers.ChoiceField(choices=PREFLIGHT_MODES, default="off")


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


class SpecDiffSerializer(serializers.Serializer):
    """Each side is a stored config version (`a`, `b`: its id) or a spec sent here
    (`a_spec`, `b_spec`), validated as a launch's spec is and normalized as it would be
    stored (every default filled in): an edit before launch diffs as the version it makes."""

    a = Id(required=False, help_text="a config version's id (or a_spec)")
    a_spec = serializers.JSONField(required=False, help_text="a RunSpec (or a)")
    b = Id(required=False, help_text="a config version's id (or b_spec)")
    b_spec = serializers.JSONField(required=False, help_text="a RunSpec (or b)")

    def validate(self, data):
        for side in ("a", "b"):
            if (side in data) == (f"{side}_spec" in data):
                raise serializers.ValidationError(
                    {side: f"give {side} (a config version's id) or {side}_spec (a spec): one"}
                )
        return data


class DiffSerializer(serializers.Serializer):
    a = serializers.IntegerField()
    b = serializers.IntegerField()
    changes = ChangeSerializer(many=True)


class SpecDiffAnswerSerializer(DiffSerializer):
    a = serializers.IntegerField(allow_null=True, help_text="null: a_spec was diffed")
    b = serializers.IntegerField(allow_null=True, help_text="null: b_spec was diffed")


class ExperimentFilterSerializer(serializers.Serializer):
    team = Id(required=False)
    tag = serializers.CharField(required=False, max_length=50)
    creator = serializers.CharField(required=False, max_length=150)
    search = serializers.CharField(required=False, max_length=200)


class DatasetSerializer(serializers.ModelSerializer):
    class Meta:
        model = Dataset
        fields = ["id", "team", "name", "sha256", "uri", "size_bytes", "rows", "created_at"]


class DatasetUploadSerializer(serializers.Serializer):
    team = Id()
    name = Name(max_length=200)
    file = serializers.FileField()


# a pasted config or script: real ones are tens of kilobytes
MAX_IMPORT_TEXT = 256 * 1024


class ConfigImportSerializer(serializers.Serializer):
    config = serializers.CharField(required=False, allow_blank=True, max_length=MAX_IMPORT_TEXT,
                                   trim_whitespace=False)  # fmt: skip
    command = serializers.CharField(required=False, allow_blank=True, max_length=MAX_IMPORT_TEXT,
                                    trim_whitespace=False)  # fmt: skip
    source = serializers.ChoiceField(choices=["verl", "nemo-rl"], required=False, allow_null=True)
    dataset = Id(required=False, allow_null=True)

    def validate(self, attrs):
        if not (attrs.get("config") or "").strip() and not (attrs.get("command") or "").strip():
            raise serializers.ValidationError({"config": "give a config (YAML) or a command line"})
        return attrs


class UnmappedKeySerializer(serializers.Serializer):
    key = serializers.CharField()
    origin = serializers.CharField(help_text="the file (or 'command line') that set it")
    note = serializers.CharField(allow_null=True, help_text="why it was left out, where known")


class SpecImportSerializer(serializers.Serializer):
    source = serializers.ChoiceField(choices=["verl", "nemo-rl"])
    spec = serializers.JSONField(help_text="only the keys the import set")
    files = serializers.ListField(child=serializers.CharField(), help_text="base first")
    unmapped = UnmappedKeySerializer(many=True)
