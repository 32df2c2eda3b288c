"""Teams, members, API tokens, quotas, the audit log, who is asking (`/me`)."""

from __future__ import annotations

from django.utils import timezone
from rest_framework import serializers

from paddock.teams.models import ApiToken, AuditEvent, Membership, Role, Team, TeamQuota, TeamSecret

from .common import Id, Name, UserBriefSerializer, datetime_text


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


class SecretSerializer(serializers.ModelSerializer):
    """A team secret as the API shows it: never its value."""

    updated_by = UserBriefSerializer(allow_null=True)

    class Meta:
        model = TeamSecret
        fields = ["name", "masked", "updated_by", "created_at", "updated_at"]


class SecretSetSerializer(serializers.Serializer):
    value = serializers.CharField(
        max_length=8192, trim_whitespace=False, write_only=True,
        help_text="a token (sent as Authorization: Bearer) or a JSON object of headers; "
        "never shown again",
    )  # fmt: skip


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


# What `me_answer` reads of each team: `.values(*TEAM_COLUMNS)` of teams.selectors.team_list.
TEAM_COLUMNS = ("id", "name", "slug", "created_at")


def me_answer(actor, teams: list[dict]) -> dict:
    """MeSerializer's answer for `actor` and its teams' rows of TEAM_COLUMNS, built by hand
    (as the run list's rows are: `run_rows`)."""
    zone = timezone.get_current_timezone()
    return {
        "id": actor.user.pk, "username": actor.user.username,
        "is_staff": bool(actor.user.is_staff),
        "teams": [{"id": t["id"], "name": t["name"], "slug": t["slug"],
                   "role": actor.role_in(t["id"]),
                   "created_at": datetime_text(t["created_at"], zone)} for t in teams],
        "token": actor.token.prefix if actor.token else None,
    }  # fmt: skip
