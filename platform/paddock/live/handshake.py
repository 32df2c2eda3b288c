"""What a websocket handshake must pass before a consumer sees it (asgi.py wires these).

- The request policy (http/policy.py): an allowed Host, and https when the platform takes
  https only; refused as any other handshake below.
- The route: a path no route takes (an unknown path, a run id that is not a number or is
  negative, a missing trailing slash) is refused with a close before accept, which the
  ASGI server answers with HTTP 403. Channels' router raises instead, which the server
  turned into a 500. Ids are at most 19 digits and within a database id's range.
- The origin: a browser always sends `Origin` on a websocket handshake, and a page of
  another site must not ride on the user's session cookie (cross-site websocket
  hijacking), so a handshake with an `Origin` must come from one of ALLOWED_HOSTS, as
  Channels checks it. A handshake without `Origin` is a program, not a browser (the CLI,
  a script with a token header, docs/live-protocol.md): it is let through, but its cookies are
  dropped first, so only a token can authenticate it.
- The session: read only when the handshake carries a session cookie (`session_users`)."""

from __future__ import annotations

from urllib.parse import urlparse

from channels.security.websocket import AllowedHostsOriginValidator
from django.conf import settings
from django.http.cookie import parse_cookie
from django.urls import register_converter

from paddock.http.policy import scope_is_https, scope_refusal

MAX_ID = 2**63 - 1
REFUSED = 4404  # sent before accept: the server answers the handshake with HTTP 403


class IdConverter:
    """`<id:run_id>`: a database id, 1 to 2**63 - 1 (Django's `int` takes any digits)."""

    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if not 1 <= number <= MAX_ID:
            raise ValueError("not a database id")  # the route does not match
        return number

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(IdConverter, "id")


async def _refuse(scope, receive, send) -> None:
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.close", "code": REFUSED})


def request_policy(application):
    """An ASGI app: the request policy's host and https rules before `application`."""

    async def app(scope, receive, send):
        headers = dict(scope.get("headers") or [])
        if scope_refusal(scope, headers, secure=scope_is_https(scope, headers)) is not None:
            await _refuse(scope, receive, send)
            return
        await application(scope, receive, send)

    return app


def refuse_unrouted(router):
    """An ASGI app: `router` (a Channels URLRouter) for a path one of its routes takes, a
    refusal for any other."""

    def routed(path: str) -> bool:
        path = path.lstrip("/")
        return any(route.pattern.match(path) for route in router.routes)

    async def app(scope, receive, send):
        if not routed(scope.get("path", "")):
            await _refuse(scope, receive, send)
            return
        await router(scope, receive, send)

    return app


def _parses(origin: bytes) -> bool:
    """Whether an Origin can be read as a URL at all (`http://[::1` cannot: Channels'
    validator let urlparse's ValueError through, and the handshake was a 500)."""
    try:
        parsed = urlparse(origin.decode("latin-1"))
        parsed.port  # noqa: B018  (raises on a malformed port or IPv6 literal)
    except ValueError:
        return False
    return True


def origin_policy(application):
    """An ASGI app: the Origin rule of the module's docstring around `application`."""
    checked = AllowedHostsOriginValidator(application)

    async def app(scope, receive, send):
        headers = scope.get("headers") or []
        origins = [value for name, value in headers if name == b"origin"]
        if origins:
            if not all(map(_parses, origins)):
                await _refuse(scope, receive, send)  # Channels' check raised on these: a 500
                return
            await checked(scope, receive, send)
            return
        without_cookies = [(name, value) for name, value in headers if name != b"cookie"]
        await application(dict(scope, headers=without_cookies), receive, send)

    return app


def session_users(application):
    """An ASGI app: Channels' AuthMiddlewareStack (the session's user in `scope["user"]`)
    around `application` for a handshake that carries a session cookie; an anonymous user
    for one that carries none (a program with a token, or a browser not logged in). The
    stack looks the user up in a thread hop even when there is no session to read, and that
    hop queues behind every other consumer's database work in the process."""
    from channels.auth import AuthMiddlewareStack  # needs the apps loaded
    from django.contrib.auth.models import AnonymousUser

    with_session = AuthMiddlewareStack(application)
    cookie_name = settings.SESSION_COOKIE_NAME

    async def app(scope, receive, send):
        cookies = b"; ".join(v for k, v in scope.get("headers") or [] if k == b"cookie")
        if cookie_name in parse_cookie(cookies.decode("latin-1")):
            await with_session(scope, receive, send)
            return
        await application(dict(scope, user=AnonymousUser()), receive, send)

    return app
