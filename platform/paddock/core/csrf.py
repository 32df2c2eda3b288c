"""CSRF refusals in the API's one error shape.

Django's CSRF middleware guards the session endpoints (`/api/v1/session/*`, login CSRF
included) and DRF's SessionAuthentication guards every API write made with a session. Both
would answer with their own body (an HTML page, a generic `permission_denied`); an API
client switches on `code`, so both answer `{"code": "csrf_failed", "message", "field"}`
with Django's reason. Pages outside the API (the admin) keep Django's HTML page."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.csrf import csrf_failure as django_csrf_failure

from paddock.core.errors import ErrorCode, error_body


def csrf_message(reason: str) -> str:
    # the reason says which part was missing or wrong (cookie, token, origin, referer)
    return (
        f"CSRF check failed: {reason.rstrip('.')}. "
        "Send the csrftoken cookie's value in the X-CSRFToken header."
    )


def _wants_json(request: HttpRequest) -> bool:
    return (
        request.path.startswith("/api/")
        or request.content_type == "application/json"
        or "application/json" in request.headers.get("Accept", "")
    )


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """settings.CSRF_FAILURE_VIEW."""
    if not _wants_json(request):
        return django_csrf_failure(request, reason=reason)
    code = ErrorCode.CSRF_FAILED
    return JsonResponse(error_body(code, csrf_message(reason)), status=code.status)
