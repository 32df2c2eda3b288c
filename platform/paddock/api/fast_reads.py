"""The front door's fast path: the hot GET reads of an API token (the run list, a run, a
run's metrics, the experiment list, /me), the way scripts, the CLI and dashboards poll,
answered in their HTTP lane (http/lanes.py) before Django's middleware chain and DRF's
request cycle.

Why: on these reads the chain of middlewares, URL resolution and DRF's view cycle (request
wrapper, negotiation, authenticators, permissions, exception handler, renderer) cost about
as much CPU as the read itself (bench/load/server_cost.py, docs/reliability.md "Load").

It answers with the same parts as the full path, not copies of them: the request policy
(http/policy.py: host, https, headers), the token (`request_token`: one authentication
and one count per request, however many paths ask), the views' own answer functions and
query serializers, DRF's content negotiation and JSON renderer, the request metrics. It
answers only what it answers with 200; anything else (no token, a session cookie, a bad or
dead token, another team's run, a bad parameter or cursor, an Accept it cannot meet, a
refused host, plain http under https) goes down the chain untouched, which answers as it
always has. tests/platform/api/test_fast_reads.py holds its answers equal to the full
path's (status, body, headers, statements) over the same fixtures."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from functools import cache

from django.core.exceptions import DisallowedHost, ValidationError
from django.http import Http404, HttpResponse
from django.urls import resolve
from rest_framework.exceptions import APIException
from rest_framework.fields import empty
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import JSONRenderer

from paddock.api import serializers as s
from paddock.api.authentication import request_token
from paddock.api.pagination import NewestFirst
from paddock.api.views_experiments import experiment_page_answer
from paddock.api.views_runs import run_detail_answer, run_metrics_answer, run_page_answer
from paddock.core.errors import DomainError
from paddock.http.client_address import request_client_address
from paddock.http.policy import https_refusal, security_headers
from paddock.monitoring.metrics import HTTP_LATENCY, HTTP_REQUESTS
from paddock.teams.access import Actor, actor_for
from paddock.teams.selectors import team_list_rows

_FALL_THROUGH = (DomainError, APIException, ValidationError, Http404, DisallowedHost)
_RENDERERS = [JSONRenderer()]


_VIEWS: dict[re.Pattern, tuple[str, str]] = {}


def _view(pattern: re.Pattern, path: str) -> tuple[str, str]:
    """(route name, Allow) of the view that answers `path` (a path of `pattern`) on the full
    path: the request metrics' label and the header DRF's view sets. Read from the URL conf
    once per route."""
    if pattern not in _VIEWS:
        _VIEWS[pattern] = _resolved(path)
    return _VIEWS[pattern]


def _resolved(path: str) -> tuple[str, str]:
    match = resolve(path)
    cls, actions = match.func.cls, dict(getattr(match.func, "actions", None) or {})
    view = cls(**match.func.initkwargs)
    if actions:  # a viewset: what its as_view does before dispatching
        actions.setdefault("head", actions.get("get"))
    for method, action in actions.items():
        setattr(view, method, getattr(view, action))
    return match.view_name, ", ".join(view.allowed_methods)


@cache
def _fields(serializer_class) -> dict:
    return dict(serializer_class().fields)  # bound once: building them is most of the cost


def _params(serializer_class, request) -> dict:
    """The view's validated query: its serializer's, or for a query naming none of its
    fields (a plain list) what validation gives then, the fields' defaults (a field without
    one left out), without building the serializer's fields for each request."""
    fields = _fields(serializer_class)
    if fields.keys().isdisjoint(request.GET):
        defaults = {name: field.get_default() for name, field in fields.items()
                    if field.default is not empty}  # fmt: skip
        return serializer_class().validate(defaults)
    serializer = serializer_class(data=request.GET)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _run_list(actor, request, _match) -> dict:
    params = _params(s.RunFilterSerializer, request)
    return run_page_answer(actor=actor, params=params, paginator=NewestFirst(), request=request)


def _run_detail(actor, _request, match) -> dict:
    return run_detail_answer(actor=actor, run_id=int(match[1]))


def _run_metrics(actor, request, match) -> dict:
    params = _params(s.MetricsQuerySerializer, request)
    return run_metrics_answer(actor=actor, run_id=int(match[1]), params=params)


def _experiment_list(actor, request, _match) -> dict:
    params = _params(s.ExperimentFilterSerializer, request)
    return experiment_page_answer(
        actor=actor, params=params, paginator=NewestFirst(), request=request
    )


def _me(actor, _request, _match) -> dict:
    return s.me_answer(actor, team_list_rows(actor=actor, columns=s.TEAM_COLUMNS))


# the paths as the URL conf spells them (ids as its [0-9]+ lookup, within a bigint)
Answer = Callable[[Actor, object, re.Match], dict]
ROUTES: tuple[tuple[re.Pattern, Answer], ...] = tuple(
    (re.compile(pattern), answer)
    for pattern, answer in (
        (r"/api/v1/runs", _run_list),
        (r"/api/v1/runs/([1-9][0-9]{0,17})", _run_detail),
        (r"/api/v1/runs/([1-9][0-9]{0,17})/metrics", _run_metrics),
        (r"/api/v1/experiments", _experiment_list),
        (r"/api/v1/me", _me),
    )
)


def _route(path: str) -> tuple[re.Pattern, Answer, re.Match] | None:
    for pattern, answer in ROUTES:
        match = pattern.fullmatch(path)  # as the URL conf reads it
        if match is not None:
            return pattern, answer, match
    return None


def fast_read(request) -> HttpResponse | None:
    """The answer of a hot read, or None: the middleware chain answers it."""
    if request.method != "GET" or "HTTP_COOKIE" in request.META:
        return None
    route = _route(request.path_info)
    if route is None:
        return None
    pattern, answer, match = route
    started = time.perf_counter()
    request.query_params = request.GET  # what DRF's paginator and serializers read
    try:
        secure = request.is_secure()
        refused = https_refusal(
            secure=secure, method="GET", path=request.path, host=request.get_host(),
            full_path=request.get_full_path(),
        )  # fmt: skip
        if refused is not None:
            return None
        renderer, media_type = DefaultContentNegotiation().select_renderer(request, _RENDERERS)
        token = request_token(request)
        if token is None:
            return None
        actor = actor_for(
            user=token.user, token=token, ip=request_client_address(request),
            user_agent=request.META.get("HTTP_USER_AGENT", ""),
        )  # fmt: skip
        data = answer(actor, request, match)
    except _FALL_THROUGH:
        return None
    body = renderer.render(data, media_type)
    name, allow = _view(pattern, request.path_info)
    response = HttpResponse(body, content_type=renderer.media_type)
    response["Allow"] = allow
    response["Content-Length"] = str(len(body))
    headers = security_headers(path=request.path, content_type=renderer.media_type, secure=secure)
    for header, value in headers:
        response[header] = value
    HTTP_LATENCY.labels(name, "GET").observe(time.perf_counter() - started)
    HTTP_REQUESTS.labels(name, "GET", "200").inc()
    return response
