"""Experiments, immutable config versions, runs, and what runs report: events, metric
points, checkpoints, and the ingest bookkeeping (batches seen, run tokens)."""

from __future__ import annotations

from functools import cached_property

from django.conf import settings
from django.db import models

from paddock.core.errors import DomainError, ErrorCode
from workers import names
from workers.spec import RunSpec, stored_spec


def _choices(name: str, values: tuple[str, ...]) -> type[models.TextChoices]:
    """Choices named after their values (`RunState.RUNNING == "running"`), from the names
    workers/names.py defines once for both halves and the browser. Each label is its value,
    as in the JSON Schema of workers/'s pydantic models, so that the API schema names one
    union once wherever a serializer or a model of workers/ has it."""
    return models.TextChoices(name, [(value.upper(), (value, value)) for value in values])


RunState = _choices("RunState", names.RUN_STATES)
DesiredState = _choices("DesiredState", names.DESIRED_STATES)
Backend = _choices("Backend", names.BACKENDS)
AlarmName = _choices("AlarmName", names.ALARM_NAMES)


class Purpose(models.TextChoices):
    TRAIN = "train"
    PREFLIGHT = (
        "preflight"  # a pre-flight check of the experiment's spec (experiments/preflight.py)
    )


class PreflightState(models.TextChoices):
    NONE = ""  # launched without one
    PENDING = "pending"  # its runs wait for the verdict
    PASSED = "passed"
    FAILED = "failed"  # its runs are held until a member overrides
    OVERRIDDEN = "overridden"


class ConfigVersion(models.Model):
    """A validated run spec, never changed once stored: `save()` on a stored row raises.
    `hash` is the SHA-256 of the canonical JSON (sorted keys, no spaces); `parent` is the
    lineage (a run's effective spec → the launched spec → the one it was cloned from)."""

    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="configs")
    spec = models.JSONField()
    hash = models.CharField(max_length=64, db_index=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise DomainError(
                ErrorCode.CONFIG_IMMUTABLE,
                "a config version never changes; create a new one",
            )
        super().save(*args, **kwargs)

    @cached_property
    def run_spec(self) -> RunSpec:
        """The stored spec read by the spec's own models, so the control plane holds none of
        its defaults (a key that a spec stored by an older release lacks reads as the spec's
        default), without this release's admission checks (`stored_spec`). Parsed once per
        loaded row: a config version never changes."""
        return stored_spec(self.spec)

    def __str__(self) -> str:
        return f"config {self.pk} ({self.hash[:12]})"


class Experiment(models.Model):
    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="experiments")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    config = models.ForeignKey(ConfigVersion, on_delete=models.PROTECT, related_name="+")
    cloned_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="clones"
    )
    # the pre-flight check of its spec (experiments/preflight.py): its runs wait for it
    preflight = models.CharField(
        max_length=10, choices=PreflightState.choices, default=PreflightState.NONE, blank=True
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class ExperimentTag(models.Model):
    # A row per tag rather than a JSON list: "runs tagged X" must filter on SQLite too.
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="tags")
    name = models.CharField(max_length=50)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["experiment", "name"], name="tag_once")]
        indexes = [models.Index(fields=["name"])]

    def __str__(self) -> str:
        return self.name


class Run(models.Model):
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="runs")
    # the experiment's team, copied: every run query is scoped by team without a join
    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="runs")
    config = models.ForeignKey(ConfigVersion, on_delete=models.PROTECT, related_name="runs")
    backend = models.CharField(max_length=10, choices=Backend.choices)
    seed = models.IntegerField()
    # what its job does: train, or check the spec before the experiment's runs train
    purpose = models.CharField(max_length=10, choices=Purpose.choices, default=Purpose.TRAIN)
    # a pre-flight run's verdict, as its job reported it (workers/events.py: PreflightEvent)
    verdict = models.JSONField(null=True, blank=True)
    gpus = models.FloatField(default=0, help_text="GPUs the spec asks for, for quotas")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    # lifecycle: `state` is what is true, `desired_state` what a user asked for
    state = models.CharField(max_length=12, choices=RunState.choices, default=RunState.QUEUED)
    # when `state` last changed (run_transition): the clock of the start deadline and of the
    # abort grace, which `updated_at` is not (any save moves it)
    state_since = models.DateTimeField(null=True, blank=True)
    desired_state = models.CharField(
        max_length=8, choices=DesiredState.choices, default=DesiredState.RUNNING
    )
    queued_reason = models.CharField(max_length=300, blank=True)
    error = models.TextField(blank=True)
    # dispatch: every start of a job is a dispatch, numbered 1, 2, 3… per run
    cluster = models.ForeignKey(
        "clusters.RayCluster", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    dispatch_count = models.PositiveIntegerField(default=0)
    ray_submission_id = models.CharField(max_length=100, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=3)
    # progress, and the cursor of the last stored ingest batch
    step = models.PositiveIntegerField(default=0)
    total_steps = models.PositiveIntegerField(default=0)
    last_dispatch = models.PositiveIntegerField(default=0)
    last_seq = models.BigIntegerField(default=-1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["team", "-id"], name="run_team_recent"),
            models.Index(fields=["state"], name="run_state"),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.backend}, seed {self.seed}, {self.state})"


class RunAlarm(models.Model):
    """One alarm of workers/alarms.py on one run: whether it fires, what it saw and since
    which step (experiments/alarms.py judges the run's series as they arrive), and whether
    it pauses the run when it fires. A row per (run, alarm), made when first judged or set."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="alarms")
    name = models.CharField(max_length=40, choices=AlarmName.choices)
    firing = models.BooleanField(default=False)
    since_step = models.BigIntegerField(null=True, blank=True)
    value = models.FloatField(null=True, blank=True)
    message = models.TextField(blank=True)
    # the run's step it was last judged at (the runs whose step moved past it are judged next)
    step = models.BigIntegerField(default=0)
    fired_at = models.DateTimeField(null=True, blank=True)
    pause = models.BooleanField(default=False, help_text="pause the run when it fires")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "name"], name="runalarm_once")]

    def __str__(self) -> str:
        return f"{self.name} of run {self.run_id}: {'firing' if self.firing else 'quiet'}"


class Checkpoint(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.PositiveIntegerField()
    adapter_version = models.PositiveIntegerField(default=0)
    uri = models.CharField(max_length=1000)
    size_bytes = models.BigIntegerField(null=True, blank=True)
    dispatch = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="checkpoint_step")]

    def __str__(self) -> str:
        return f"checkpoint {self.run_id}@{self.step}"


class RunEvent(models.Model):
    class Kind(models.TextChoices):
        LOG = "log"
        STATUS = "status"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    dispatch = models.PositiveIntegerField(default=0)
    kind = models.CharField(max_length=8, choices=Kind.choices)
    level = models.CharField(max_length=10, default="info")
    message = models.TextField()
    time = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["run", "id"], name="runevent_run_id")]

    def __str__(self) -> str:
        return f"{self.kind} {self.run_id}: {self.message[:40]}"


class MetricPoint(models.Model):
    """One value of one metric at one step. Unique per (run, key, step): a step re-emitted
    by a later dispatch replaces the earlier value. `time` is Unix seconds (as reported)."""

    # No database constraint and no index of its own on `run`: at tens of thousands of points
    # a second, PostgreSQL's per-row foreign-key check (a trigger locking the run's row) and
    # a second index cost as much as the insert itself; the unique (run, key, step) index
    # serves every lookup by run, the ingest writes only the run its token was minted for,
    # and deleting a run still deletes its points (Django's cascade).
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False
    )
    key = models.CharField(max_length=100)
    step = models.BigIntegerField()
    time = models.FloatField()
    value = models.FloatField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "key", "step"], name="metricpoint_run_key_step")
        ]

    def __str__(self) -> str:
        return f"{self.run_id} {self.key}@{self.step}={self.value}"


class IngestBatch(models.Model):
    """An ingest batch already stored; its (run, dispatch, seq) makes a retry idempotent."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    dispatch = models.PositiveIntegerField()
    seq = models.BigIntegerField()
    events = models.PositiveIntegerField(default=0)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "dispatch", "seq"], name="ingest_batch_once")
        ]


class RunToken(models.Model):
    """The credential of one dispatch of one run (ingest). Stored as SHA-256, like ApiToken."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tokens")
    dispatch = models.PositiveIntegerField()
    prefix = models.CharField(max_length=16, unique=True)
    hashed = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "dispatch"], name="runtoken_per_dispatch")
        ]


class Dataset(models.Model):
    """An uploaded JSONL or Parquet file, kept in the artifact store under the team, named by
    its SHA-256 (the same upload twice is one object). Specs name it `dataset://<id>` in
    `data.path` (the job is handed `uri` at bootstrap); the spec maps its columns."""

    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=200)
    sha256 = models.CharField(max_length=64)
    uri = models.CharField(max_length=1000)
    size_bytes = models.BigIntegerField()
    rows = models.PositiveIntegerField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "sha256"], name="dataset_once")]

    def __str__(self) -> str:
        return self.name


class SampleSet(models.Model):
    """A few prompts of one step with their completions, rewards and advantages, for the
    sample inspector (not the whole batch)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    step = models.BigIntegerField()
    dispatch = models.PositiveIntegerField(default=0)
    items = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "live_sampleset"  # where it was created, in the live app
        indexes = [models.Index(fields=["run", "step"], name="sampleset_run_step")]
