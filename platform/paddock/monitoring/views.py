"""`GET /metrics`: the Prometheus scrape, not public by default: the rule is the request
policy's (http/policy.py: metrics_scrape_allowed), as at the Celery worker's scrape."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from paddock.http.policy import request_scrape_allowed
from paddock.monitoring.metrics import scrape


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not request_scrape_allowed(request):
        reply = HttpResponse(
            "metrics: send Authorization: Bearer <PADDOCK_METRICS_TOKEN>, or scrape from this "
            "machine when no token is set\n",
            status=403,
            content_type="text/plain; charset=utf-8",
        )
        return reply
    return HttpResponse(scrape(), content_type=CONTENT_TYPE_LATEST)
