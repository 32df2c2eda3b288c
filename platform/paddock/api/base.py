"""What every API view shares: the request's actor, and ids parsed without surprises."""

from __future__ import annotations

from rest_framework import viewsets

from paddock.core.errors import DomainError, ErrorCode, not_found
from paddock.http.client_address import request_client_address
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
            ip=request_client_address(request),
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
    """Validated body; a key the serializer does not know is refused, naming it (silently
    dropping it would launch something other than what the client meant: a misspelt
    `seed` or `validate_only`)."""
    data = request.data
    if not hasattr(data, "keys"):
        raise DomainError(ErrorCode.INVALID, "the body must be a JSON object", field=None)
    serializer = serializer_class(data=data)
    unknown = [key for key in data if key not in serializer.fields]
    if unknown:
        raise DomainError(
            ErrorCode.UNKNOWN_FIELD,
            f"{unknown[0]}: unknown key; one of {sorted(serializer.fields)}",
            field=str(unknown[0]),
        )
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class ActorViewSet(viewsets.GenericViewSet):
    lookup_value_regex = r"[0-9]+"

    @property
    def actor(self) -> Actor:
        return request_actor(self.request)

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "actor": self.actor}
