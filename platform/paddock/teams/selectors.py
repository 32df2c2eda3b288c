"""Readers of the teams app, each scoped to what the actor may see."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q, QuerySet

from paddock.core.errors import not_found
from paddock.core.fixed_sql import QueryTemplate
from paddock.teams.access import Actor
from paddock.teams.models import ApiToken, AuditEvent, Membership, Role, Team, TeamQuota


def team_list(*, actor: Actor) -> QuerySet[Team]:
    return Team.objects.filter(pk__in=actor.team_ids).order_by("slug")


# `team_list(actor).values(*columns)`: its values are the actor's teams
_TEAM_ROWS = QueryTemplate(
    lambda columns, ids: team_list(actor=Actor.of_teams(ids)).values(*columns)
)


def team_list_rows(*, actor: Actor, columns: tuple[str, ...]) -> list[dict]:
    """`team_list(actor).values(*columns)`, compiled: /me reads it on every request."""
    team_ids = actor.team_ids
    return _TEAM_ROWS.rows(team_ids, shape=columns) if team_ids else []


def team_get(*, actor: Actor, team_id: int) -> Team:
    team = Team.objects.filter(pk=team_id, pk__in=actor.team_ids).first()
    if team is None:
        raise not_found("team")
    return team


def member_list(*, actor: Actor, team: Team) -> QuerySet[Membership]:
    actor.require(team.pk, Role.VIEWER, what="team")
    return team.memberships.select_related("user").order_by("user__username")


def member_get(*, actor: Actor, team: Team, user_id: int) -> Membership:
    actor.require(team.pk, Role.VIEWER, what="team")
    membership = team.memberships.select_related("user").filter(user_id=user_id).first()
    if membership is None:
        raise not_found("member")
    return membership


def api_token_list(*, actor: Actor, team: Team) -> QuerySet[ApiToken]:
    """Admins and owners see every token of the team; others their own."""
    actor.require(team.pk, Role.VIEWER, what="team")
    tokens = team.api_tokens.select_related("user").order_by("-id")
    if not actor.can(team.pk, Role.ADMIN):
        tokens = tokens.filter(user=actor.user)
    return tokens


def api_token_get(*, actor: Actor, team: Team, token_id: int) -> ApiToken:
    token = api_token_list(actor=actor, team=team).filter(pk=token_id).first()
    if token is None:
        raise not_found("token")
    return token


def team_quota_get(*, actor: Actor, team: Team) -> TeamQuota:
    actor.require(team.pk, Role.VIEWER, what="team")
    quota, _ = TeamQuota.objects.get_or_create(team=team)
    return quota


def audit_list(
    *,
    actor: Actor,
    team: Team,
    action: str = "",
    actor_id: int | None = None,
    target_type: str = "",
    target_id: str = "",
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[AuditEvent]:
    actor.require(team.pk, Role.ADMIN, what="team")
    events = AuditEvent.objects.filter(team=team).select_related("actor")
    if action:
        # "run" matches run.pause, run.abort…; "run.pause" only itself
        events = events.filter(Q(action=action) | Q(action__startswith=f"{action}."))
    if actor_id is not None:
        events = events.filter(actor_id=actor_id)
    if target_type:
        events = events.filter(target_type=target_type)
    if target_id:
        events = events.filter(target_id=target_id)
    if since is not None:
        events = events.filter(created_at__gte=since)
    if until is not None:
        events = events.filter(created_at__lt=until)
    return events
