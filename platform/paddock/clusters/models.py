"""The registry of Ray clusters that runs are dispatched to."""

from __future__ import annotations

from django.db import models


class RayCluster(models.Model):
    """A Ray cluster reachable through its Jobs API. `team` null means shared by all teams.
    `backends` lists the rollout backends it can run (declared, or found by a probe job);
    a launch is checked against it. `capacity` is what an operator declares the cluster can
    grow to, e.g. {"cpus": 16, "gpus": 8} for one that autoscales: when set, it replaces the
    observed totals in the launch's "can this ever be placed" check. `resources` is what the
    health check last observed (placement.py: per node, total and free CPUs and GPUs)."""

    name = models.CharField(max_length=100, unique=True)
    team = models.ForeignKey(
        "teams.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="clusters"
    )
    address = models.CharField(max_length=300, help_text="Jobs API, e.g. http://head:8265")
    dashboard_url = models.CharField(max_length=300, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    capacity = models.JSONField(default=dict, blank=True)
    resources = models.JSONField(default=dict, blank=True)
    backends = models.JSONField(default=list, blank=True)
    healthy = models.BooleanField(default=True)
    health_error = models.TextField(blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class BootstrapUse(models.Model):
    """A spent bootstrap token: one per (run, dispatch)."""

    run = models.ForeignKey("experiments.Run", on_delete=models.CASCADE, related_name="+")
    dispatch = models.PositiveIntegerField()
    used_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "dispatch"], name="bootstrap_once")]
