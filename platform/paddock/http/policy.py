"""The request policy: the rules a request meets at every door of the platform, written once.

The doors are Django's middleware chain (middleware.py: every page and API view), the
ingest door (live/ingest_asgi.py), the fast reads (api/fast_reads.py) and the websocket
handshake (live/handshake.py). Each asks these functions; tests/platform/http/
test_front_door.py runs each rule against every door.

- Host: one of ALLOWED_HOSTS, matched as Django matches it; else 400 `bad_host`.
- https: under SECURE_SSL_REDIRECT a plain-http request is redirected to https when it is a
  GET or HEAD and refused 403 `https_required` otherwise (a client following a redirect
  re-sends a POST as a GET, and its token has crossed in clear already). The probes of
  SECURE_REDIRECT_EXEMPT are served over http. "https" is Django's `is_secure()`: the
  connection's scheme, or the proxy's SECURE_PROXY_SSL_HEADER when it sends one.
- Response headers (`security_headers`), each set unless the answer sets its own:
  nosniff, Referrer-Policy and Cross-Origin-Opener-Policy, X-Frame-Options, HSTS over
  https; a Content-Security-Policy on every HTML page (scripts only from this origin, no
  inline script, no plugins, no framing, no `<base>` rewrites, forms post here only;
  inline styles stay allowed: the admin and Swagger UI set them, and a style cannot run
  code); `Cache-Control: no-store` on API answers (one user's data, some with secrets: a
  new token, a run token at bootstrap).
- Credentials: `Authorization: Bearer <token>`, read by `bearer_token` and nowhere else.
- The Prometheus scrape (`metrics_scrape_allowed`): the bearer PADDOCK_METRICS_TOKEN when
  one is set, else only a loopback peer that no proxy forwarded.
- Rate limits: limits.py."""

from __future__ import annotations

import hmac
import ipaddress
import re
from functools import cache

from django.conf import settings
from django.http.request import split_domain_port, validate_host

from paddock.core.errors import DomainError, ErrorCode

from .answers import Answer, error_answer, refusal

SAFE_METHODS = ("GET", "HEAD")


class MalformedBearer(ValueError):
    """`Authorization: Bearer` without exactly one token after it."""


def bearer_token(authorization: str) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (the scheme in any case); None
    when the header is empty or names another scheme."""
    scheme, _, rest = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = rest.strip()
    if not token or len(token.split()) != 1:
        raise MalformedBearer("use 'Authorization: Bearer <token>'")
    return token


def job_bearer(authorization: str, *, client_ip: str | None, what: str) -> str | Answer:
    """The bearer secret of a job door's request (`what` names it in the refusal), or the
    answer when there is none (401 `not_authenticated`) or the header is malformed (401
    `token_invalid`, counted as a failed authentication)."""
    try:
        raw = bearer_token(authorization)
    except MalformedBearer as exc:
        return refusal(DomainError(ErrorCode.TOKEN_INVALID, str(exc)), client_ip)
    if raw is None:
        message = f"send the {what} as 'Authorization: Bearer …'"
        return error_answer(ErrorCode.NOT_AUTHENTICATED, message)
    return raw


def _allowed_hosts() -> list[str]:
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        return [".localhost", "127.0.0.1", "[::1]"]  # as Django's get_host allows then
    return allowed


def host_allowed(host: str) -> bool:
    """Whether `host` (a Host header: name and port) is one of ALLOWED_HOSTS."""
    domain, _ = split_domain_port(host)
    return bool(domain) and validate_host(domain, _allowed_hosts())


def bad_host() -> Answer:
    return error_answer(ErrorCode.BAD_HOST, "the Host header is not one this server answers to")


def proxy_https(proto: str | None) -> bool | None:
    """What the proxy's SECURE_PROXY_SSL_HEADER says (`proto`: its value, None when it was
    not sent): True for https, False for anything else, None when it says nothing."""
    header = settings.SECURE_PROXY_SSL_HEADER
    if not header or proto is None:
        return None
    return proto.split(",", 1)[0].strip() == header[1]


def proxy_header_name() -> bytes | None:
    """SECURE_PROXY_SSL_HEADER's header as an ASGI scope names it (`x-forwarded-proto`)."""
    header = settings.SECURE_PROXY_SSL_HEADER
    if not header:
        return None
    return header[0].removeprefix("HTTP_").lower().replace("_", "-").encode("latin-1")


def scope_is_https(scope, headers: dict[bytes, bytes]) -> bool:
    """Django's `request.is_secure()` for an ASGI scope and its headers."""
    name = proxy_header_name()
    sent = headers.get(name) if name else None
    said = proxy_https(None if sent is None else sent.decode("latin-1"))
    return said if said is not None else scope.get("scheme") in ("https", "wss")


@cache
def _exempt(patterns: tuple[str, ...]) -> list[re.Pattern]:
    return [re.compile(p) for p in patterns]


def https_refusal(
    *, secure: bool, method: str, path: str, host: str, full_path: str
) -> Answer | None:
    """The answer to a request that must not be served over plain http, else None."""
    if secure or not settings.SECURE_SSL_REDIRECT:
        return None
    if any(p.search(path.lstrip("/")) for p in _exempt(tuple(settings.SECURE_REDIRECT_EXEMPT))):
        return None
    if method in SAFE_METHODS:
        location = f"https://{settings.SECURE_SSL_HOST or host}{full_path}"
        return Answer(301, None, {"Location": location})
    return error_answer(ErrorCode.HTTPS_REQUIRED, "this server takes requests over https only")


def scope_refusal(scope, headers: dict[bytes, bytes], *, secure: bool) -> Answer | None:
    """The refusal of an ASGI request (a door around Django's chain) by the host rule, then
    the https rule; None: go on."""
    host = headers.get(b"host", b"").decode("latin-1")
    if not host_allowed(host):
        return bad_host()
    path, query = scope["path"], scope.get("query_string", b"")
    full_path = f"{path}?{query.decode('latin-1')}" if query else path
    method = scope.get("method", "GET")  # a websocket handshake is a GET
    return https_refusal(secure=secure, method=method, path=path, host=host, full_path=full_path)


@cache
def _content_security_policy(public_url: str) -> str:
    connect = ["'self'"]
    # websockets to this site: 'self' covers ws(s) of the same host in current browsers;
    # the public URL's spelling is named too, for the ones that read 'self' as http(s) only
    if public_url.startswith(("http://", "https://")):
        connect.append("ws" + public_url.removeprefix("http"))
    directives = {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'", "data:"],
        "connect-src": connect,
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
    return "; ".join(f"{name} {' '.join(values)}" for name, values in directives.items())


def content_security_policy() -> str:
    return _content_security_policy(getattr(settings, "PADDOCK_PUBLIC_URL", ""))


def security_headers(*, path: str, content_type: str, secure: bool) -> list[tuple[str, str]]:
    """The headers an answer to `path` of `content_type` carries, each unless it sets its
    own (and X-Frame-Options unless the view is exempt from it)."""
    headers = []
    if content_type.startswith("text/html"):
        headers.append(("Content-Security-Policy", content_security_policy()))
    if path.startswith("/api/"):
        headers.append(("Cache-Control", "no-store"))
    headers.append(("X-Frame-Options", getattr(settings, "X_FRAME_OPTIONS", "DENY").upper()))
    if secure and settings.SECURE_HSTS_SECONDS:
        hsts = f"max-age={settings.SECURE_HSTS_SECONDS}"
        if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS:
            hsts += "; includeSubDomains"
        if settings.SECURE_HSTS_PRELOAD:
            hsts += "; preload"
        headers.append(("Strict-Transport-Security", hsts))
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        headers.append(("X-Content-Type-Options", "nosniff"))
    referrer = settings.SECURE_REFERRER_POLICY
    if referrer:
        value = referrer if isinstance(referrer, str) else ",".join(referrer)
        headers.append(("Referrer-Policy", ",".join(v.strip() for v in value.split(","))))
    if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
        headers.append(("Cross-Origin-Opener-Policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY))
    return headers


def metrics_scrape_allowed(*, authorization: str, peer: str | None, proxied: bool) -> bool:
    """Whether a scrape of the Prometheus series may be answered: with PADDOCK_METRICS_TOKEN
    set, it must send that bearer token (what a ServiceMonitor's `authorization` sends);
    without it, only a scraper on this machine gets in: a loopback `peer`, not `proxied`
    (a request with X-Forwarded-For or Forwarded: a proxy on this host would make every
    outside request look local)."""
    token = settings.PADDOCK_METRICS_TOKEN
    if token:
        try:
            given = bearer_token(authorization)
        except MalformedBearer:
            return False
        return given is not None and hmac.compare_digest(given.encode(), token.encode())
    if proxied:
        return False
    try:
        return ipaddress.ip_address(peer or "").is_loopback
    except ValueError:
        return False


def request_scrape_allowed(request) -> bool:
    """`metrics_scrape_allowed` for a Django request (REMOTE_ADDR is the peer)."""
    return metrics_scrape_allowed(
        authorization=request.headers.get("Authorization", ""),
        peer=request.META.get("REMOTE_ADDR"),
        proxied="X-Forwarded-For" in request.headers or "Forwarded" in request.headers,
    )
