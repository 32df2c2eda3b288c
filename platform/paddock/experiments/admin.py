from django.contrib import admin

from paddock.experiments.models import (
    Checkpoint,
    ConfigVersion,
    Dataset,
    Experiment,
    ExperimentTag,
    Run,
    RunEvent,
)


class TagInline(admin.TabularInline):
    model = ExperimentTag
    extra = 0


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "created_by", "created_at"]
    list_filter = ["team"]
    search_fields = ["name"]
    raw_id_fields = ["config", "cloned_from"]
    inlines = [TagInline]


@admin.register(ConfigVersion)
class ConfigVersionAdmin(admin.ModelAdmin):
    list_display = ["id", "team", "hash", "parent", "created_at"]
    list_filter = ["team"]

    def has_change_permission(self, request, obj=None):
        return False  # immutable


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    # state is read-only here: it changes through run_transition only
    list_display = ["id", "experiment", "backend", "seed", "state", "desired_state", "step",
                    "cluster", "dispatch_count", "created_at"]  # fmt: skip
    list_filter = ["state", "backend", "team"]
    readonly_fields = ["state", "desired_state", "dispatch_count", "ray_submission_id",
                       "last_dispatch", "last_seq", "config"]  # fmt: skip
    raw_id_fields = ["experiment"]


@admin.register(RunEvent)
class RunEventAdmin(admin.ModelAdmin):
    list_display = ["time", "run", "dispatch", "kind", "level", "message"]
    list_filter = ["kind", "level"]
    raw_id_fields = ["run"]


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ["run", "step", "adapter_version", "uri", "size_bytes"]
    raw_id_fields = ["run"]


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "rows", "size_bytes", "sha256", "created_at"]
    list_filter = ["team"]
