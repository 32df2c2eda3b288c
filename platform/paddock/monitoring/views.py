"""`GET /metrics`: the Prometheus scrape, not public by default.

With `PADDOCK_METRICS_TOKEN` set, a scrape must send `Authorization: Bearer <token>` (what a
ServiceMonitor's `authorization` sends). Without it, only a scraper on the same machine
gets in: the peer must be a loopback address and the request must not have come through a
proxy (no `X-Forwarded-For` / `Forwarded`), since a proxy on the same host would make every
outside request look local."""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from paddock.monitoring.metrics import scrape


def _allowed(request: HttpRequest) -> bool:
    token = settings.PADDOCK_METRICS_TOKEN
    if token:
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)
    if "X-Forwarded-For" in request.headers or "Forwarded" in request.headers:
        return False
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not _allowed(request):
        reply = HttpResponse(
            "metrics: send Authorization: Bearer <PADDOCK_METRICS_TOKEN>, or scrape from this "
            "machine when no token is set\n",
            status=403,
            content_type="text/plain; charset=utf-8",
        )
        return reply
    return HttpResponse(scrape(), content_type=CONTENT_TYPE_LATEST)
