"""`Authorization: Bearer pdk_…`: personal API tokens (the CLI, scripts). Browsers use the
session (with CSRF), through DRF's SessionAuthentication."""

from __future__ import annotations

from drf_spectacular.authentication import SessionScheme
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import (
    BaseAuthentication,
    SessionAuthentication,
    get_authorization_header,
)
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied, Throttled

from paddock.core.client_address import request_client_address
from paddock.core.csrf import csrf_message
from paddock.core.errors import DomainError, ErrorCode
from paddock.core.ratelimit import auth_failure_record
from paddock.teams.services import api_token_authenticate


class BearerTokenAuthentication(BaseAuthentication):
    keyword = "bearer"

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword.encode():
            return None
        if len(parts) != 2:
            raise AuthenticationFailed(
                "use 'Authorization: Bearer <token>'", code=ErrorCode.TOKEN_INVALID
            )
        try:
            token = api_token_authenticate(raw=parts[1].decode("ascii"))
        except UnicodeDecodeError:
            raise _refusal(request, "unknown API token", ErrorCode.TOKEN_INVALID) from None
        except DomainError as exc:
            raise _refusal(request, exc.message, exc.code) from None
        return token.user, token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="paddock"'


def _refusal(request, message: str, code: ErrorCode) -> Exception:
    """401, or 429 once the client's address has failed too often (core/ratelimit.py)."""
    wait = auth_failure_record(ip=request_client_address(request))
    if wait:
        return Throttled(wait, "too many failed authentications")
    return AuthenticationFailed(message, code=code)


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
