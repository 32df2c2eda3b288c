"""`Authorization: Bearer pdk_…`: personal API tokens (the CLI, scripts). Browsers use the
session (with CSRF), through DRF's SessionAuthentication."""

from __future__ import annotations

from drf_spectacular.authentication import SessionScheme
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied, Throttled

from paddock.core.csrf import csrf_message
from paddock.core.errors import DomainError, ErrorCode
from paddock.http.client_address import request_client_address
from paddock.http.limits import auth_failure_record, token_request_record
from paddock.http.policy import MalformedBearer, bearer_token
from paddock.teams.models import ApiToken
from paddock.teams.services import api_token_authenticate


def request_token(request) -> ApiToken | None:
    """The live API token of a request's `Authorization: Bearer` header (http/policy.py
    reads it), or None when it sends none. Raises as the API answers: a malformed header or
    a refused token 401 (429 `rate_limited` once the address has failed too often: the
    failure is counted, as at the job doors), a token over its requests a minute 429
    `rate_limited` too (http/limits.py).
    Once per request: the fast reads (fast_reads.py) and DRF's authenticator both ask,
    and a request the fast path leaves to DRF is not authenticated nor counted twice."""
    request = getattr(request, "_request", request)  # DRF's Request wraps Django's
    outcome = getattr(request, "_paddock_token", None)
    if outcome is None:
        outcome = request._paddock_token = _authenticate(request)
    if isinstance(outcome, Exception):
        raise outcome
    return outcome or None


def _authenticate(request) -> ApiToken | Exception | bool:
    try:
        raw = bearer_token(request.META.get("HTTP_AUTHORIZATION", ""))
    except MalformedBearer as exc:
        return AuthenticationFailed(str(exc), code=ErrorCode.TOKEN_INVALID)
    if raw is None:
        return False
    try:
        token = api_token_authenticate(raw=raw)
    except DomainError as exc:
        wait = auth_failure_record(ip=request_client_address(request))
        if wait:
            return Throttled(wait, "too many failed authentications", code=ErrorCode.RATE_LIMITED)
        return AuthenticationFailed(exc.message, code=exc.code)
    wait = token_request_record(token_id=token.pk)
    if wait:
        message = "too many requests with this API token (PADDOCK_API_RATE_LIMIT a minute)"
        return Throttled(wait, message, code=ErrorCode.RATE_LIMITED)
    return token


class BearerTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer pdk_…`: personal API tokens (the CLI, scripts)."""

    def authenticate(self, request):
        token = request_token(request)
        return None if token is None else (token.user, token)

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="paddock"'


class SessionCsrfAuthentication(SessionAuthentication):
    """DRF's session authentication, its CSRF refusal in the shape Django's middleware
    gives on the session endpoints (core/csrf.py): one `csrf_failed` code for clients."""

    def enforce_csrf(self, request):
        try:
            super().enforce_csrf(request)
        except PermissionDenied as exc:
            reason = str(exc.detail).removeprefix("CSRF Failed: ")
            raise PermissionDenied(csrf_message(reason), code=ErrorCode.CSRF_FAILED) from None


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = BearerTokenAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "a personal API token, pdk_…"}


class SessionCsrfScheme(SessionScheme):
    """The session cookie in the OpenAPI schema, as for DRF's own class."""

    target_class = SessionCsrfAuthentication
