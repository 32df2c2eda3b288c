"""Writers of the teams app: teams, members, API tokens, quotas, and the audit log.

Every function is keyword-only, checks the actor's role itself (callers need not), and
records an AuditEvent in the same transaction as its write."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from django.utils.text import slugify

from paddock.core.errors import DomainError, ErrorCode, forbidden, not_found
from paddock.core.fixed_sql import FixedStatement, concrete_fields, instances, select_columns
from paddock.teams.access import Actor
from paddock.teams.models import (
    ApiToken,
    AuditEvent,
    Membership,
    Role,
    Team,
    TeamQuota,
    UserQuota,
)
from paddock.teams.secrets import secret_matches, secret_new, secret_prefix
from paddock.teams.signals import access_revoked_on_commit

API_TOKEN_KIND = "pdk"
# last_used_at is written at most this often per token: not a write on every request
LAST_USED_RESOLUTION_S = 60


def audit_record(
    *,
    actor: Actor | None,
    team_id: int | None,
    action: str,
    target_type: str,
    target_id: object = "",
    data: dict | None = None,
) -> AuditEvent:
    user = actor.user if actor is not None and actor.user.is_authenticated else None
    if actor is not None and actor.token is not None:
        data = {**(data or {}), "via_token": actor.token.prefix}
    return AuditEvent.objects.create(
        actor=user,
        team_id=team_id,
        action=action,
        target_type=target_type,
        target_id=str(target_id),
        data=data or {},
        ip=actor.ip if actor else None,
        user_agent=actor.user_agent if actor else "",
    )


# --- teams ---------------------------------------------------------------------------------


@transaction.atomic
def team_create(*, actor: Actor, name: str, slug: str = "") -> Team:
    """Any signed-in user may create a team; they become its owner."""
    if actor.token is not None:
        raise forbidden("create teams from a signed-in session, not with a team's token")
    slug = slugify(slug or name)[:60]
    if not slug:
        raise DomainError(
            ErrorCode.INVALID, "a team needs a name with letters or digits", field="name"
        )
    if Team.objects.filter(slug=slug).exists():
        raise DomainError(ErrorCode.SLUG_TAKEN, f"a team '{slug}' exists already", field="slug")
    team = Team.objects.create(name=name, slug=slug)
    Membership.objects.create(team=team, user=actor.user, role=Role.OWNER)
    TeamQuota.objects.create(team=team)
    audit_record(
        actor=actor, team_id=team.pk, action="team.create", target_type="team",
        target_id=team.pk, data={"name": name, "slug": slug},
    )  # fmt: skip
    return team


@transaction.atomic
def team_update(*, actor: Actor, team: Team, name: str) -> Team:
    actor.require(team.pk, Role.ADMIN, what="team")
    old = team.name
    team.name = name
    team.save(update_fields=["name"])
    audit_record(
        actor=actor, team_id=team.pk, action="team.update", target_type="team",
        target_id=team.pk, data={"name": [old, name]},
    )  # fmt: skip
    return team


# --- members -------------------------------------------------------------------------------


def _check_role_change(*, actor: Actor, team_id: int, old: str | None, new: str | None) -> None:
    """Admins manage viewers, members and admins; only an owner grants or takes `owner`."""
    actor.require(team_id, Role.ADMIN, what="team")
    if Role.OWNER in (old, new) and not actor.can(team_id, Role.OWNER):
        raise forbidden("only an owner may grant or take the owner role")


def _check_owner_remains(*, team_id: int, membership: Membership) -> None:
    if membership.role != Role.OWNER:
        return
    owners = Membership.objects.select_for_update().filter(team_id=team_id, role=Role.OWNER)
    if owners.count() <= 1:
        raise DomainError(
            ErrorCode.LAST_OWNER,
            "a team keeps at least one owner; make someone else owner first",
            field="role",
        )


@transaction.atomic
def member_add(*, actor: Actor, team: Team, username: str, role: str) -> Membership:
    _check_role_change(actor=actor, team_id=team.pk, old=None, new=role)
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise DomainError(ErrorCode.USER_NOT_FOUND, f"no user '{username}'", field="username")
    try:
        with transaction.atomic():
            membership = Membership.objects.create(team=team, user=user, role=role)
    except IntegrityError:
        raise DomainError(
            ErrorCode.ALREADY_MEMBER, f"{username} is in the team already", field="username"
        ) from None
    audit_record(
        actor=actor, team_id=team.pk, action="member.add", target_type="user",
        target_id=user.pk, data={"username": username, "role": role},
    )  # fmt: skip
    return membership


@transaction.atomic
def member_set_role(*, actor: Actor, membership: Membership, role: str) -> Membership:
    old = membership.role
    _check_role_change(actor=actor, team_id=membership.team_id, old=old, new=role)
    if old == Role.OWNER and role != Role.OWNER:
        _check_owner_remains(team_id=membership.team_id, membership=membership)
    membership.role = role
    membership.save(update_fields=["role"])
    audit_record(
        actor=actor, team_id=membership.team_id, action="member.role", target_type="user",
        target_id=membership.user_id, data={"role": [old, role]},
    )  # fmt: skip
    return membership


@transaction.atomic
def member_remove(*, actor: Actor, membership: Membership) -> None:
    """Remove a member and revoke their tokens of the team (member_tokens_revoke)."""
    if membership.user_id != actor.user.pk:  # anyone may leave; removing others needs admin
        _check_role_change(actor=actor, team_id=membership.team_id, old=membership.role, new=None)
    _check_owner_remains(team_id=membership.team_id, membership=membership)
    revoked = member_tokens_revoke(team_id=membership.team_id, user_id=membership.user_id)
    membership.delete()
    audit_record(
        actor=actor, team_id=membership.team_id, action="member.remove", target_type="user",
        target_id=membership.user_id, data={"role": membership.role, "tokens_revoked": revoked},
    )  # fmt: skip


def member_tokens_revoke(*, team_id: int, user_id: int) -> int:
    """Revoke every live token of the user for the team; the number revoked.

    Revoked rather than merely disarmed while the user is out: a token's life ends with
    the membership it was made under. Had validity followed the membership alone, re-adding
    the user (perhaps as a viewer, perhaps a year later) would have revived every token
    they ever made, at their new role, including ones they reported lost. Revocation also
    shows in the token list and cannot be undone. The membership removal paths that bypass
    this service (the Django admin, a team deleted) call it through the post_delete signal
    (teams/apps.py), and api_token_authenticate refuses a token without its membership in
    any case."""
    live = ApiToken.objects.filter(team_id=team_id, user_id=user_id, revoked_at=None)
    token_ids = list(live.values_list("pk", flat=True))
    revoked = ApiToken.objects.filter(pk__in=token_ids).update(revoked_at=timezone.now())
    access_revoked_on_commit(token_ids=token_ids, user_ids=[user_id])
    return revoked


# --- API tokens ----------------------------------------------------------------------------


@transaction.atomic
def api_token_create(
    *, actor: Actor, team: Team, name: str, expires_at: datetime | None = None
) -> tuple[ApiToken, str]:
    """A personal token of the actor for `team`. Returns (token, secret); the secret is
    never stored nor shown again. It acts with the user's role in the team, until
    `expires_at`: at most PADDOCK_TOKEN_MAX_DAYS from now, and that long without one."""
    actor.require(team.pk, Role.VIEWER, what="team")
    now = timezone.now()
    if expires_at is not None and expires_at <= now:
        raise DomainError(ErrorCode.INVALID, "must be in the future", field="expires_at")
    longest = _token_lifetime()
    if longest is not None:
        if expires_at is None:
            expires_at = now + longest
        elif expires_at > now + longest:
            message = f"at most {longest.days} days from now (PADDOCK_TOKEN_MAX_DAYS)"
            raise DomainError(ErrorCode.INVALID, message, field="expires_at")
    new = secret_new(API_TOKEN_KIND)
    token = ApiToken.objects.create(
        team=team,
        user=actor.user,
        name=name,
        prefix=new.prefix,
        hashed=new.hashed,
        expires_at=expires_at,
    )
    audit_record(
        actor=actor, team_id=team.pk, action="token.create", target_type="token",
        target_id=token.pk, data={"name": name, "prefix": new.prefix},
    )  # fmt: skip
    return token, new.raw


@transaction.atomic
def api_token_revoke(*, actor: Actor, token: ApiToken) -> ApiToken:
    """Its owner may revoke a token; team admins and owners may revoke anyone's."""
    actor.require(token.team_id, Role.VIEWER, what="token")
    if token.user_id != actor.user.pk and not actor.can(token.team_id, Role.ADMIN):
        raise not_found("token")
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        access_revoked_on_commit(token_ids=[token.pk])
        audit_record(
            actor=actor, team_id=token.team_id, action="token.revoke", target_type="token",
            target_id=token.pk, data={"name": token.name, "prefix": token.prefix},
        )  # fmt: skip
    return token


def _token_lifetime() -> timedelta | None:
    days = settings.PADDOCK_TOKEN_MAX_DAYS
    return timedelta(days=days) if days > 0 else None


def _live_token_sql(_shape=None) -> str:
    """The token of a prefix with its user and its user's role in the token's team, in one
    statement written once (core/fixed_sql.py): the ORM built this join anew on every
    request (about a third of a cheap request's CPU, bench/load/server_cost.py). The
    columns come from the models, so a field added to either is read too."""
    quote = connection.ops.quote_name
    user = get_user_model()
    columns = select_columns(ApiToken, "t") + select_columns(user, "u")
    return (
        f"SELECT {', '.join(columns)}, m.{quote('role')}"
        f" FROM {quote(ApiToken._meta.db_table)} t"
        f" JOIN {quote(user._meta.db_table)} u ON u.{quote('id')} = t.{quote('user_id')}"
        f" JOIN {quote(Membership._meta.db_table)} m"
        f" ON m.{quote('user_id')} = t.{quote('user_id')}"
        f" AND m.{quote('team_id')} = t.{quote('team_id')}"
        f" WHERE t.{quote('prefix')} = %s LIMIT 1"
    )


_LIVE_TOKEN = FixedStatement(_live_token_sql, lambda: concrete_fields(ApiToken, get_user_model()))


def _live_token(prefix: str) -> ApiToken | None:
    """The token of `prefix`, its user loaded, `member_role` set; None when there is no such
    token or its user is not (any more) a member of its team."""
    values = _LIVE_TOKEN.fetch_one([prefix])
    if values is None:
        return None
    token, user = instances(values[:-1], ApiToken, get_user_model())
    token.user = user
    token.member_role = values[-1]
    return token


def api_token_authenticate(*, raw: str) -> ApiToken:
    """The live token whose secret is `raw`, with its user; DomainError 401 otherwise."""
    prefix = secret_prefix(raw, API_TOKEN_KIND)
    # only while its user is in its team (the same query): a removed member's token is dead
    # even where a removal skipped revocation (member_tokens_revoke); the user's role in
    # the token's team comes from the same row, so actor_for needs no query
    token = _live_token(prefix) if prefix else None
    if token is None or not secret_matches(raw, token.hashed):
        raise DomainError(ErrorCode.TOKEN_INVALID, "unknown API token")
    now = timezone.now()
    if token.revoked_at is not None:
        raise DomainError(ErrorCode.TOKEN_REVOKED, "this API token was revoked")
    if token.expires_at is not None and token.expires_at <= now:
        raise DomainError(ErrorCode.TOKEN_EXPIRED, "this API token has expired")
    longest = _token_lifetime()  # a token older than the limit (made before it was lowered)
    if longest is not None and token.created_at + longest <= now:
        raise DomainError(ErrorCode.TOKEN_EXPIRED, "this API token is past the longest life "
                          "a token may have (PADDOCK_TOKEN_MAX_DAYS)")  # fmt: skip
    if not token.user.is_active:
        raise DomainError(ErrorCode.TOKEN_INVALID, "the token's user is deactivated")
    stale = token.last_used_at is None or (
        (now - token.last_used_at).total_seconds() > LAST_USED_RESOLUTION_S
    )
    if stale:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


# --- quotas --------------------------------------------------------------------------------


@transaction.atomic
def user_quota_lock(*, user_id: int) -> UserQuota:
    """The user's quota row, locked until the transaction ends (taken after the team's, by
    a launch and by a dispatch, so the user's dispatches in all of their teams check one at
    a time); made with the deployment's defaults on first use."""
    quota, _ = UserQuota.objects.select_for_update().get_or_create(
        user_id=user_id,
        defaults={
            "max_concurrent_runs": settings.PADDOCK_USER_MAX_CONCURRENT_RUNS,
            "max_gpus": settings.PADDOCK_USER_MAX_GPUS,
            "max_queued_runs": settings.PADDOCK_USER_MAX_QUEUED_RUNS,
        },
    )
    return quota


def team_quota_set(
    *,
    actor: Actor,
    team: Team,
    max_concurrent_runs: int | None = None,
    max_gpus: float | None = None,
    max_queued_runs: int | None = None,
) -> TeamQuota:
    """Platform staff only (a session, not a token). Fields left None keep their value."""
    if not actor.is_staff:
        if actor.role_in(team.pk) is None:
            raise not_found("team")
        raise forbidden("quotas are set by platform staff")
    quota, _ = TeamQuota.objects.select_for_update().get_or_create(team=team)
    changes = {}
    for name, value in (
        ("max_concurrent_runs", max_concurrent_runs),
        ("max_gpus", max_gpus),
        ("max_queued_runs", max_queued_runs),
    ):
        if value is not None and getattr(quota, name) != value:
            changes[name] = [getattr(quota, name), value]
            setattr(quota, name, value)
    quota.save()
    audit_record(
        actor=actor, team_id=team.pk, action="quota.set", target_type="team",
        target_id=team.pk, data=changes,
    )  # fmt: skip
    return quota
