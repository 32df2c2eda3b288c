"""Browser session endpoints for the SPA: log in and out with Django's session, read who is
logged in, and get the CSRF cookie the SPA echoes in `X-CSRFToken` on every write.

Plain Django views on purpose: Django's CSRF middleware checks every POST here, including
the login itself (login CSRF), which DRF's SessionAuthentication would skip for an
anonymous user. Errors use the API's one shape, `{"code", "message", "field"}`."""

from __future__ import annotations

from django.contrib.auth import authenticate, login, logout
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_GET, require_POST

from paddock.core.errors import ErrorCode, error_body
from paddock.core.jsonbody import JsonBodyError, json_parse
from paddock.http.client_address import request_client_address
from paddock.http.limits import login_blocked, login_failure_record
from paddock.teams.access import actor_for
from paddock.teams.selectors import team_list
from paddock.teams.signals import access_revoked_on_commit


def _error(code: ErrorCode, message: str, field: str | None = None) -> JsonResponse:
    return JsonResponse(error_body(code, message, field), status=code.status)


def session_payload(user) -> dict:
    """The logged-in user and the teams they belong to, with their role in each (the same
    access rules as the API: teams.access and teams.selectors)."""
    actor = actor_for(user=user)
    return {
        "user": {
            "id": user.pk,
            "username": user.get_username(),
            "email": user.email,
            "is_staff": user.is_staff,
        },
        "teams": [
            {"id": t.pk, "name": t.name, "slug": t.slug, "role": actor.role_in(t.pk)}
            for t in team_list(actor=actor)
        ],
    }


@require_GET
@ensure_csrf_cookie
def session_csrf(request: HttpRequest) -> JsonResponse:
    """Sets the `csrftoken` cookie (the SPA calls this once before its first write)."""
    return JsonResponse({"ok": True})


@require_GET
@ensure_csrf_cookie
def session_me(request: HttpRequest) -> JsonResponse:
    if not request.user.is_authenticated:
        return _error(ErrorCode.NOT_AUTHENTICATED, "not logged in")
    return JsonResponse(session_payload(request.user))


@require_POST
def session_login(request: HttpRequest) -> JsonResponse:
    try:
        body = json_parse(request.body or b"{}")
    except JsonBodyError as exc:
        return _error(ErrorCode.INVALID_JSON, exc.message, exc.field)
    if not isinstance(body, dict):
        return _error(ErrorCode.INVALID_JSON, "the body must be a JSON object")
    username = body.get("username")
    password = body.get("password")
    if not isinstance(username, str) or not username:
        return _error(ErrorCode.REQUIRED, "enter your username", "username")
    if not isinstance(password, str) or not password:
        return _error(ErrorCode.REQUIRED, "enter your password", "password")
    # no account has a longer name (Django's limit), and nothing longer is worth hashing
    if len(username) > 150:
        return _error(ErrorCode.INVALID, "at most 150 characters", "username")
    if len(password) > 4096:
        return _error(ErrorCode.INVALID, "at most 4096 characters", "password")
    ip = request_client_address(request)
    wait = login_blocked(ip=ip, username=username)
    if wait:
        reply = _error(ErrorCode.RATE_LIMITED, f"too many failed logins; try again in {wait} s")
        reply["Retry-After"] = str(wait)
        return reply
    user = authenticate(request, username=username, password=password)
    if user is None:
        login_failure_record(ip=ip, username=username)
        return _error(ErrorCode.INVALID_CREDENTIALS, "wrong username or password", "password")
    login(request, user)  # rotates the session key and the CSRF token
    return JsonResponse(session_payload(user))


@require_POST
def session_logout(request: HttpRequest) -> JsonResponse:
    ended = request.session.session_key
    logout(request)
    if ended:  # its open websockets close (teams/signals.py)
        access_revoked_on_commit(session_keys=[ended])
    return JsonResponse({"ok": True})
