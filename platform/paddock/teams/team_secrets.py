"""A team's secrets: named values its runs use (a reward service's token) that no one reads
back through the API (docs/security.md#secrets).

- Set (create or replace) and delete: the team's admins and owners; every change is in the
  audit log (the name, never the value).
- Listed, masked, to every member.
- A spec names a secret (`secret: NAME`); the launch checks the team has it; the run's job
  receives, at bootstrap, the secrets its own spec names and none other
  (`secrets_for_run`), decrypted there and only there.
"""

from __future__ import annotations

import re

from django.db import transaction
from django.db.models import QuerySet

from paddock.core.errors import DomainError, ErrorCode, not_found
from paddock.teams.access import Actor
from paddock.teams.models import Role, Team, TeamSecret
from paddock.teams.secret_box import SecretUnreadable, secret_mask, secret_open, secret_seal
from paddock.teams.services import audit_record
from workers.spec import SECRET_NAME

MAX_SECRETS = 100  # per team
MAX_VALUE = 8192  # characters: a token or a JSON object of headers


def _name(name: str) -> str:
    if not re.fullmatch(SECRET_NAME, name or ""):
        raise DomainError(
            ErrorCode.INVALID,
            "a letter, then letters, digits, _ or -, at most 64 characters",
            field="name",
        )
    return name


def team_secret_list(*, actor: Actor, team: Team) -> QuerySet[TeamSecret]:
    actor.require(team.pk, Role.VIEWER, what="team")
    return team.secrets.select_related("updated_by").order_by("name")


def team_secret_get(*, actor: Actor, team: Team, name: str) -> TeamSecret:
    secret = team_secret_list(actor=actor, team=team).filter(name=name).first()
    if secret is None:
        raise not_found("secret")
    return secret


@transaction.atomic
def team_secret_set(*, actor: Actor, team: Team, name: str, value: str) -> tuple[TeamSecret, bool]:
    """Create or replace the secret `name`; True when it was created."""
    actor.require(team.pk, Role.ADMIN, what="team")
    name = _name(name)
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_VALUE:
        raise DomainError(
            ErrorCode.INVALID, f"a value of 1 to {MAX_VALUE} characters", field="value"
        )
    if "\0" in value:
        raise DomainError(ErrorCode.INVALID, "a value without NUL characters", field="value")
    Team.objects.select_for_update().filter(pk=team.pk).first()  # one writer counts at a time
    secret = TeamSecret.objects.filter(team=team, name=name).first()
    created = secret is None
    if created and team.secrets.count() >= MAX_SECRETS:
        raise DomainError(ErrorCode.INVALID, f"a team holds at most {MAX_SECRETS} secrets",
                          field="name")  # fmt: skip
    if created:
        secret = TeamSecret(team=team, name=name, created_by=actor.user)
    secret.sealed = secret_seal(team_id=team.pk, name=name, value=value)
    secret.masked = secret_mask(value)
    secret.updated_by = actor.user
    secret.save()
    audit_record(
        actor=actor, team_id=team.pk, action="secret.create" if created else "secret.update",
        target_type="secret", target_id=secret.pk, data={"name": name},
    )  # fmt: skip
    return secret, created


@transaction.atomic
def team_secret_delete(*, actor: Actor, secret: TeamSecret) -> None:
    actor.require(secret.team_id, Role.ADMIN, what="team")
    audit_record(
        actor=actor, team_id=secret.team_id, action="secret.delete", target_type="secret",
        target_id=secret.pk, data={"name": secret.name},
    )  # fmt: skip
    secret.delete()


def secrets_missing(*, team_id: int, names: list[tuple[str, str]]) -> list[dict]:
    """The errors ({field, message}) of the (field, name) pairs the team has no secret for."""
    have = set(
        TeamSecret.objects.filter(team_id=team_id, name__in=[n for _, n in names]).values_list(
            "name", flat=True
        )
    )
    return [
        {"field": field, "message": f"the team has no secret {name!r}: set it first "
                                    f"(`paddock secrets set {name}`)"}
        for field, name in names
        if name not in have
    ]  # fmt: skip


def secrets_for_run(*, team_id: int, names: list[str]) -> dict[str, str]:
    """The values of the secrets `names` (what one run's spec names), decrypted for its job.
    DomainError(SECRET_MISSING) naming one the team lacks or that no longer opens."""
    found = {s.name: s for s in TeamSecret.objects.filter(team_id=team_id, name__in=names)}
    values = {}
    for name in dict.fromkeys(names):
        secret = found.get(name)
        if secret is None:
            raise DomainError(
                ErrorCode.SECRET_MISSING,
                f"the run's spec names the secret {name!r}, which its team does not have: "
                f"set it (`paddock secrets set {name}`)",
            )
        try:
            values[name] = secret_open(team_id=team_id, name=name, sealed=secret.sealed)
        except SecretUnreadable as exc:
            raise DomainError(
                ErrorCode.SECRET_MISSING,
                f"the team's secret {name!r} cannot be read ({exc}): set it again",
            ) from None
    return values
