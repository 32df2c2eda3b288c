"""The registry of Ray clusters that runs are dispatched to."""

from __future__ import annotations

from django.db import models


class RayCluster(models.Model):
    """A Ray cluster reachable through its Jobs API. `team` null means shared by all teams.
    `backends` lists the rollout backends it can run (declared, or found by a probe job);
    a launch is checked against it. `environments` lists the multi-turn environments
    installed there besides the built-ins every worker has (workers/names.py), which a run's
    `env.name` is checked against the same way. `capacity` is what an operator declares
    the cluster can grow to, e.g. {"cpus": 16, "gpus": 8} for one that autoscales: when set,
    it replaces the observed totals in the launch's "can this ever be placed" check.
    `resources` is what the health check last observed (placement.py: per node, total and
    free CPUs and GPUs)."""

    name = models.CharField(max_length=100, unique=True)
    team = models.ForeignKey(
        "teams.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="clusters"
    )
    address = models.CharField(max_length=300, help_text="Jobs API, e.g. http://head:8265")
    # the platform calls this address (with the deployment's Ray token) only when an
    # operator approved it: set by a staff user or the operator on the server, who write
    # rows; a team's registration through the API writes False, and is called only while its
    # address lies in PADDOCK_CLUSTER_NETWORKS (approval.py)
    address_approved = models.BooleanField(
        default=True,
        help_text="an operator approved this address: the platform sends the Ray token there",
    )
    dashboard_url = models.CharField(max_length=300, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    capacity = models.JSONField(default=dict, blank=True)
    resources = models.JSONField(default=dict, blank=True)
    backends = models.JSONField(default=list, blank=True)
    environments = models.JSONField(default=list, blank=True)
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


class Pool(models.Model):
    """A pool job: one base model on one cluster hosting several runs (docs/pools.md). A
    named pool (`resources.pool: <name>`) is its team's: `team` set, its name unique in the
    team, hosting that team's runs only, so no team can take or even find a name another
    team uses. An `auto` pool (`team` null, named `auto_<id>`) packs runs of any team; what a
    team may see of it is its own members only. `key` is the pool key (workers/pool_key.py)
    plus the cluster; a run joins only a pool of its own key. Every start of its Ray job is a
    dispatch N, submitted as `paddock-pool-<id>-d<N>`; its bootstrap token is derived per
    (pool, dispatch) like a run's, and the pool token it is exchanged for is stored as a
    SHA-256 only."""

    class State(models.TextChoices):
        STARTING = "starting"  # its job was submitted and has not bootstrapped yet
        RUNNING = "running"  # its job bootstrapped and polls its members
        STOPPING = "stopping"  # no members were left: its job was told to stop
        ENDED = "ended"  # its job is gone (stopped, failed, vanished)

    name = models.CharField(max_length=40)
    team = models.ForeignKey(
        "teams.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    cluster = models.ForeignKey(RayCluster, on_delete=models.CASCADE, related_name="pools")
    key = models.JSONField()
    capacity = models.PositiveIntegerField()
    # what the pool's job reserves: its founding run's driver resources
    num_cpus = models.FloatField(default=1)
    num_gpus = models.FloatField(default=0)
    state = models.CharField(max_length=10, choices=State.choices, default=State.STARTING)
    dispatch_count = models.PositiveIntegerField(default=0)
    ray_submission_id = models.CharField(max_length=100, blank=True)
    token_prefix = models.CharField(max_length=16, blank=True)
    token_hashed = models.CharField(max_length=64, blank=True)
    bootstrapped_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="pool_name_per_team"),
            models.UniqueConstraint(
                fields=["name"], condition=models.Q(team__isnull=True), name="pool_auto_name_once"
            ),
        ]

    def __str__(self) -> str:
        return f"pool {self.name}"


class PoolMember(models.Model):
    """A run's stay in a pool, for one dispatch of the run: from its join (the dispatch that
    packed it) to its leave (it finished, failed, or was dispatched again). `weight` is the
    run's `resources.pool_weight`; its share is its weight over the current members'."""

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="members")
    run = models.ForeignKey("experiments.Run", on_delete=models.CASCADE, related_name="+")
    run_dispatch = models.PositiveIntegerField()
    weight = models.FloatField(default=1.0)
    joined_at = models.DateTimeField(auto_now_add=True)
    left_at = models.DateTimeField(null=True, blank=True)
    left_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "run_dispatch"], name="pool_member_once")
        ]
        indexes = [models.Index(fields=["pool", "left_at"], name="pool_member_current")]
