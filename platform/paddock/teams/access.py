"""Who may see and do what: the one place that decides it.

An `Actor` is a user as seen by one request (or one websocket): the teams they may act in
and their role in each. A personal API token narrows the user to the token's team. Every
selector filters by `actor.team_ids`; every service calls `actor.require(...)`. An object
of a team the actor is not in is reported as not found, never as forbidden, so its
existence does not leak."""

from __future__ import annotations

from dataclasses import dataclass, field

from paddock.core.errors import forbidden, not_found
from paddock.teams.models import ROLE_RANK, ApiToken, Membership, Role


@dataclass(frozen=True)
class Actor:
    user: object
    roles: dict[int, str] = field(default_factory=dict)  # team id → role
    token: ApiToken | None = None
    ip: str | None = None
    user_agent: str = ""

    @classmethod
    def of_teams(cls, team_ids: list[int]) -> Actor:
        """A user-less actor who sees `team_ids`: a compiled read's stand-in for a caller."""
        return cls(user=None, roles=dict.fromkeys(team_ids, Role.VIEWER))

    @property
    def team_ids(self) -> list[int]:
        return list(self.roles)

    @property
    def is_staff(self) -> bool:
        # a token never carries staff powers: those need a browser session
        return bool(getattr(self.user, "is_staff", False)) and self.token is None

    def role_in(self, team_id: int) -> str | None:
        return self.roles.get(team_id)

    def can(self, team_id: int, role: Role) -> bool:
        held = self.roles.get(team_id)
        return held is not None and ROLE_RANK[held] >= ROLE_RANK[role]

    def require(self, team_id: int, role: Role, *, what: str = "object") -> None:
        """Raise not_found (404) outside the actor's teams, forbidden (403) when the role
        is too low."""
        held = self.roles.get(team_id)
        if held is None:
            raise not_found(what)
        if ROLE_RANK[held] < ROLE_RANK[role]:
            raise forbidden(f"this needs the {role} role in the team; you are {held}")


def actor_for(
    *, user, token: ApiToken | None = None, ip: str | None = None, user_agent: str = ""
) -> Actor:
    """The actor of `user` (one query; none for a token just authenticated, which carries
    the role it was read with). With a token, only the token's team counts, with the user's
    current role there (removing a member disarms their tokens at once)."""
    if user is None or not user.is_authenticated:
        return Actor(user=user, ip=ip, user_agent=user_agent[:300])
    role = getattr(token, "member_role", None)  # read with the token (api_token_authenticate)
    if token is not None and role is not None and token.user_id == user.pk:
        roles = {token.team_id: role}
        return Actor(user=user, roles=roles, token=token, ip=ip, user_agent=user_agent[:300])
    memberships = Membership.objects.filter(user=user)
    if token is not None:
        memberships = memberships.filter(team_id=token.team_id)
    roles = dict(memberships.values_list("team_id", "role"))
    return Actor(user=user, roles=roles, token=token, ip=ip, user_agent=user_agent[:300])
