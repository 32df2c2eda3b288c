"""Teams, who belongs to them with which role, their API tokens, quotas and audit log."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Role(models.TextChoices):
    VIEWER = "viewer"
    MEMBER = "member"
    ADMIN = "admin"
    OWNER = "owner"

    @property
    def rank(self) -> int:
        return ROLE_RANK[self.value]


# viewer: read everything of the team · member: launch, clone, control runs ·
# admin: members, everyone's tokens, the audit log · owner: owners and the team itself.
ROLE_RANK = {Role.VIEWER: 0, Role.MEMBER: 1, Role.ADMIN: 2, Role.OWNER: 3}


class Team(models.Model):
    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=60, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="membership_once")]

    def __str__(self) -> str:
        return f"{self.user_id}@{self.team_id}:{self.role}"


class ApiToken(models.Model):
    """A personal token for one team. The secret is shown once; only its SHA-256 is kept
    (the secret has 256 bits of entropy, so a plain hash is enough: no password stretching).
    `prefix` (the first characters of the secret) finds the row and names it in listings."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="api_tokens")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    hashed = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class TeamQuota(models.Model):
    """Set by platform staff. `max_concurrent_runs` and `max_gpus` bound what runs at once
    (the dispatcher queues the rest); `max_queued_runs` bounds what a launch may add."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="quota")
    max_concurrent_runs = models.PositiveIntegerField(default=4)
    max_gpus = models.FloatField(default=8)
    max_queued_runs = models.PositiveIntegerField(default=50)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"quota of {self.team_id}"


class UserQuota(models.Model):
    """Set by platform staff (the admin), per user, over all of their teams: what a team's
    quota bounds for a team, this bounds for the person who launches, so a user who creates
    teams does not multiply what they may run (docs/security.md#limits). A user without a
    row has the deployment's defaults (PADDOCK_USER_MAX_*), written here on first use."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="run_quota"
    )
    max_concurrent_runs = models.PositiveIntegerField()
    max_gpus = models.FloatField()
    max_queued_runs = models.PositiveIntegerField()
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"quota of user {self.user_id}"


class AuditEvent(models.Model):
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    team = models.ForeignKey(
        Team, null=True, blank=True, on_delete=models.CASCADE, related_name="audit_events"
    )
    action = models.CharField(max_length=60)  # "<entity>.<verb>": run.pause, token.create
    target_type = models.CharField(max_length=40)
    target_id = models.CharField(max_length=64, blank=True)
    data = models.JSONField(default=dict, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        indexes = [models.Index(fields=["team", "-id"], name="audit_team_recent")]

    def __str__(self) -> str:
        return f"{self.action} {self.target_type}:{self.target_id}"


class TeamSecret(models.Model):
    """A value a team's runs use without anyone reading it back (a reward service's token):
    named in a spec (`secret: NAME`), handed to the run's job at bootstrap, never shown by
    the API after it is set (only `masked`). `sealed` is the value encrypted with a key
    derived from the deployment's secret key, bound to the team and the name
    (teams/secret_box.py)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=64)
    sealed = models.TextField()
    masked = models.CharField(max_length=16)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="team_secret_once")]

    def __str__(self) -> str:
        return f"secret {self.name} of {self.team_id}"
