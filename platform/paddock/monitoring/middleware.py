"""Request counts and latency by route name (the URL pattern's name, `run-metrics`, never
the path: ids would make a series per object). Outermost of the middleware, so a request is
timed whole; works under ASGI without a thread hop (async-capable).

It also answers `/metrics` itself, ahead of the other middleware: a scraper reaches a pod
by its IP, with no Host that ALLOWED_HOSTS knows and over plain http, so Django's host check
and https redirect must not see that request (the view's own access rule applies)."""

from __future__ import annotations

import time

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async

from paddock.monitoring.metrics import HTTP_LATENCY, HTTP_REQUESTS
from paddock.monitoring.views import metrics

SCRAPE_PATH = "/metrics"


def route_of(request) -> str:
    match = getattr(request, "resolver_match", None)
    if match is None:
        return "unmatched"
    return match.view_name or match.route or "unnamed"


METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}


def _record(request, status: int, started: float) -> None:
    # a method is the client's to choose: anything unusual is one series, not one each
    route, method = route_of(request), request.method if request.method in METHODS else "other"
    HTTP_LATENCY.labels(route, method).observe(time.perf_counter() - started)
    HTTP_REQUESTS.labels(route, method, str(status)).inc()


class RequestMetricsMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        if request.path == SCRAPE_PATH:
            return metrics(request)
        started = time.perf_counter()
        response = self.get_response(request)
        _record(request, response.status_code, started)
        return response

    async def _acall(self, request):
        if request.path == SCRAPE_PATH:
            return await sync_to_async(metrics)(request)  # it reads the database
        started = time.perf_counter()
        response = await self.get_response(request)
        _record(request, response.status_code, started)
        return response
