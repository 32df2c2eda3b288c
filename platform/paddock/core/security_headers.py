"""Headers every answer of the platform carries beyond Django's own (SecurityMiddleware:
nosniff, HSTS; XFrameOptionsMiddleware: DENY).

- A Content-Security-Policy on every HTML page: the browser app (frontend/dist's
  index.html), the admin and the API docs. Scripts only from this origin and no inline
  script, so an injected `<script>` or `onerror=` does not run; no plugins, no framing, no
  `<base>` rewrites, forms post here only. Inline *styles* stay allowed: the admin and
  Swagger UI set them, and a style cannot run code.
- `Cache-Control: no-store` on API answers that set no caching of their own: they are one
  user's data, and some carry secrets (a new token, a run token at bootstrap), which no
  shared or browser cache may keep."""

from __future__ import annotations

from django.conf import settings
from django.utils.deprecation import MiddlewareMixin


def content_security_policy() -> str:
    connect = ["'self'"]
    # websockets to this site: 'self' covers ws(s) of the same host in current browsers;
    # the public URL's spelling is named too, for the ones that read 'self' as http(s) only
    public = getattr(settings, "PADDOCK_PUBLIC_URL", "")
    if public.startswith(("http://", "https://")):
        connect.append("ws" + public.removeprefix("http"))
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


class SecurityHeadersMiddleware(MiddlewareMixin):
    """A process_response hook: MiddlewareMixin runs it in the event loop under ASGI as
    well as under WSGI, so it adds no thread hop to a request."""

    def __init__(self, get_response):
        super().__init__(get_response)
        self.policy = content_security_policy()

    def process_response(self, request, response):
        content_type = response.get("Content-Type", "")
        if content_type.startswith("text/html"):
            response.setdefault("Content-Security-Policy", self.policy)
        if request.path.startswith("/api/") and "Cache-Control" not in response:
            response["Cache-Control"] = "no-store"
        return response
