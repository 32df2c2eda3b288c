"""A sweep: one search over spec keys, its members (one run each once launched), its budget
and early-stopping rule (docs/sweeps.md)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


# At module level (Sweep.State, SweepMember.State name them) so the OpenAPI schema can name
# each enum once (settings.SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]).
class SweepMethod(models.TextChoices):
    GRID = "grid"
    RANDOM = "random"


class SweepState(models.TextChoices):
    RUNNING = "running"  # members start as slots free
    STOPPING = "stopping"  # stopped (by a user or its budget): its runs are being stopped
    FINISHED = "finished"  # no member runs or waits


class MemberState(models.TextChoices):
    PENDING = "pending"  # waits for a slot (or for the team's quota: `reason`)
    ACTIVE = "active"  # its run is queued or training
    STOPPING = "stopping"  # the rule (or a stop) asked its run to pause, then abort
    STOPPED = "stopped"  # stopped early: its run was aborted after a checkpoint
    DONE = "done"  # its run ended on its own (succeeded, failed, aborted by a user)
    SKIPPED = "skipped"  # never launched: the sweep stopped or spent its budget first


class Sweep(models.Model):
    """A grid or random search over a base spec's keys. Its runs are the runs of its
    experiment (one per launched member), so they are seen, compared and streamed as any
    experiment's; the sweep adds which member each is, when the next one starts, which are
    stopped early, and the budget. `parallel` members hold a run at once; the rest wait as
    `pending` members and start as slots free. `gpu_seconds` is what its members' runs have
    counted for in the team's GPUs (a pooled run: its share of its pool's), summed at each
    advance: the GPUs they held at one advance times the time to the next."""

    Method = SweepMethod
    State = SweepState

    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="sweeps")
    experiment = models.OneToOneField(
        "experiments.Experiment", on_delete=models.CASCADE, related_name="sweep"
    )
    method = models.CharField(max_length=6, choices=Method.choices)
    params = models.JSONField(help_text="the search space: spec key → values or a range")
    seed = models.BigIntegerField(default=0, help_text="random search: the draw's seed")
    metric = models.CharField(max_length=100)
    mode = models.CharField(max_length=3, choices=[("max", "max"), ("min", "min")])
    stopping = models.JSONField(null=True, blank=True)
    budget_members = models.PositiveIntegerField()
    budget_gpu_hours = models.FloatField(null=True, blank=True)
    parallel = models.PositiveIntegerField()
    cluster = models.ForeignKey(
        "clusters.RayCluster", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    state = models.CharField(max_length=10, choices=State.choices, default=State.RUNNING)
    end_reason = models.CharField(max_length=300, blank=True)
    gpu_seconds = models.FloatField(default=0)
    # the GPUs its members' runs counted for at the last advance, charged until the next
    gpus_now = models.FloatField(default=0)
    accounted_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["team", "-id"], name="sweep_team_recent")]

    def __str__(self) -> str:
        return f"sweep {self.pk}"


class SweepMember(models.Model):
    """One point of the space: its settings, its effective spec (a config version, stored
    at creation, so what it will run was validated before anything launched) and, once
    launched, its run."""

    State = MemberState

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="members")
    index = models.PositiveIntegerField()
    settings = models.JSONField()
    config = models.ForeignKey(
        "experiments.ConfigVersion", on_delete=models.PROTECT, related_name="+"
    )
    run = models.OneToOneField(
        "experiments.Run", null=True, blank=True, on_delete=models.SET_NULL,
        related_name="sweep_member",
    )  # fmt: skip
    state = models.CharField(max_length=8, choices=State.choices, default=State.PENDING)
    reason = models.CharField(max_length=300, blank=True)
    stopped_step = models.PositiveIntegerField(null=True, blank=True)
    # the run's step when the rule last looked at it: it looks again only after a new step
    evaluated_step = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["sweep", "index"], name="sweep_member_once")]

    def __str__(self) -> str:
        return f"sweep {self.sweep_id} member {self.index}"
