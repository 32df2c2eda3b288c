"""What every API view shares: the request's actor, and ids parsed without surprises."""

from __future__ import annotations

from rest_framework import viewsets

from paddock.api.errors import not_found
from paddock.teams.access import Actor, actor_for
from paddock.teams.models import ApiToken

MAX_ID = 2**63 - 1


def request_actor(request) -> Actor:
    """The actor of a DRF request, built once per request (one query)."""
    actor = getattr(request, "_paddock_actor", None)
    if actor is None:
        token = request.auth if isinstance(request.auth, ApiToken) else None
        actor = actor_for(
            user=request.user,
            token=token,
            ip=request.META.get("REMOTE_ADDR") or None,
            user_agent=request.META.get("HTTP_USER_AGENT", ""),
        )
        request._paddock_actor = actor
    return actor


def parse_id(value, what: str = "object") -> int:
    """A URL id as an int; anything a database column could not hold is simply not found."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise not_found(what) from None
    if not 1 <= number <= MAX_ID:
        raise not_found(what)
    return number


def query(serializer_class, request) -> dict:
    """Validated query parameters (a 400 naming the parameter otherwise)."""
    serializer = serializer_class(data=request.query_params)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def body(serializer_class, request) -> dict:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class ActorViewSet(viewsets.GenericViewSet):
    lookup_value_regex = r"[0-9]+"

    @property
    def actor(self) -> Actor:
        return request_actor(self.request)

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "actor": self.actor}
