"""The hot GET reads answered in their HTTP lane without Django's middleware chain and
DRF's request cycle: the run list, a run, a run's metrics, the experiment list and /me,
with an API token (`Authorization: Bearer`), the way scripts, the CLI and dashboards poll.

Why: on these reads the chain of ten middlewares, URL resolution and DRF's view cycle
(request wrapper, negotiation, authenticators, permissions, exception handler, renderer)
cost about as much CPU as the read itself (bench/load/server_cost.py,
docs/reliability.md "Load"), and they do nothing here that this path does not do too.

What it keeps, each with the code the full path runs:
- the host check and the https redirect (CommonMiddleware's and SecurityMiddleware's
  process_request), the response headers of the middlewares that set any here
  (SecurityHeadersMiddleware: Cache-Control no-store; XFrameOptions; CommonMiddleware's
  Content-Length; SecurityMiddleware: nosniff, HSTS, Referrer and Opener policies), DRF's
  content negotiation and renderer, the request metrics of monitoring/middleware.py;
- the token check (`api_token_authenticate`: hashed secrets, revoked, expired, removed
  members, inactive users) and the team scope (the same answer functions as the views:
  `run_page_answer`, `run_detail_answer`, `run_metrics_answer`, `experiment_page_answer`,
  `me_answer`), the query parameters through the views' own serializers.

It answers only what it answers with 200. Anything else goes to the full path untouched,
which then answers as it always has: no token, a session cookie, a bad or dead token (so
the failure is counted once, by the full path's limiter), another team's run, a bad
parameter or cursor, an Accept it cannot meet, another method. And it stands aside
entirely unless the settings are the ones it was written against (`_supported`): a
middleware added, or another renderer, authenticator, permission or throttle, turns it off
rather than letting it skip something new. tests/platform/api/test_lean_reads.py holds its
answers equal to the full path's (status, body, headers) over the same fixtures."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from functools import cache

from django.conf import settings
from django.core.exceptions import DisallowedHost, ValidationError
from django.http import Http404, HttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware
from django.middleware.security import SecurityMiddleware
from django.urls import resolve
from rest_framework.exceptions import APIException
from rest_framework.fields import empty
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.settings import api_settings

from paddock.api import serializers as s
from paddock.api.authentication import BearerTokenAuthentication
from paddock.api.pages import team_rows
from paddock.api.pagination import NewestFirst
from paddock.api.views_experiments import experiment_page_answer
from paddock.api.views_runs import run_detail_answer, run_metrics_answer, run_page_answer
from paddock.core.client_address import request_client_address
from paddock.core.errors import DomainError
from paddock.core.security_headers import SecurityHeadersMiddleware
from paddock.monitoring.metrics import HTTP_LATENCY, HTTP_REQUESTS
from paddock.teams.access import Actor, actor_for
from paddock.teams.services import api_token_authenticate

# The settings this path was written against: anything else and it stands aside.
MIDDLEWARE = (
    "paddock.monitoring.middleware.RequestMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",  # static files only: not these paths
    "django.contrib.sessions.middleware.SessionMiddleware",  # no session is read here
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",  # a GET with a token: nothing to check
    "django.contrib.auth.middleware.AuthenticationMiddleware",  # lazy request.user
    "django.contrib.messages.middleware.MessageMiddleware",  # no messages on the API
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "paddock.core.security_headers.SecurityHeadersMiddleware",
)
# the ones whose hooks run here, in the order the full chain runs them
_REQUEST_HOOKS = (SecurityMiddleware, CommonMiddleware)
_RESPONSE_HOOKS = (SecurityHeadersMiddleware, XFrameOptionsMiddleware, CommonMiddleware,
                   SecurityMiddleware)  # fmt: skip
_FALL_THROUGH = (DomainError, APIException, ValidationError, Http404, DisallowedHost)


@cache
def _middleware() -> tuple[list, list]:
    def instance(cls):
        return cls(lambda request: None)

    made = {cls: instance(cls) for cls in {*_REQUEST_HOOKS, *_RESPONSE_HOOKS}}
    return [made[c] for c in _REQUEST_HOOKS], [made[c] for c in _RESPONSE_HOOKS]


def _supported() -> bool:
    return (
        tuple(settings.MIDDLEWARE) == MIDDLEWARE
        and [c.__name__ for c in api_settings.DEFAULT_RENDERER_CLASSES] == ["JSONRenderer"]
        and api_settings.DEFAULT_AUTHENTICATION_CLASSES[:1] == [BearerTokenAuthentication]
        and [c.__name__ for c in api_settings.DEFAULT_PERMISSION_CLASSES] == ["IsAuthenticated"]
        and not api_settings.DEFAULT_THROTTLE_CLASSES
        and api_settings.DEFAULT_VERSIONING_CLASS is None
        and api_settings.DEFAULT_CONTENT_NEGOTIATION_CLASS is DefaultContentNegotiation
        and not api_settings.DEFAULT_FILTER_BACKENDS  # an ordering filter would reorder pages
    )


class _Route:
    """One read: its answer function and what the full path's view would add (the route's
    name for the request metrics, its Allow header), read from the URL conf once."""

    def __init__(self, pattern: str, answer: Callable[[Actor, object, re.Match], dict]):
        self.pattern, self.answer = re.compile(pattern), answer
        self._view: tuple[str, str, bool] | None = None

    def view(self, path: str) -> tuple[str, str, bool]:
        """(route name, Allow, whether the view is configured as the defaults are)."""
        if self._view is None:
            match = resolve(path)
            cls, actions = match.func.cls, dict(getattr(match.func, "actions", None) or {})
            view = cls(**match.func.initkwargs)
            if actions:  # a viewset: what its as_view does before dispatching
                actions.setdefault("head", actions.get("get"))
                for method, action in actions.items():
                    setattr(view, method, getattr(view, action))
            plain = (
                view.renderer_classes == api_settings.DEFAULT_RENDERER_CLASSES
                and view.authentication_classes == api_settings.DEFAULT_AUTHENTICATION_CLASSES
                and view.permission_classes == api_settings.DEFAULT_PERMISSION_CLASSES
                and view.throttle_classes == api_settings.DEFAULT_THROTTLE_CLASSES
                and view.content_negotiation_class is DefaultContentNegotiation
                and getattr(view, "filter_backends", []) == api_settings.DEFAULT_FILTER_BACKENDS
                and getattr(view, "pagination_class", NewestFirst) is NewestFirst  # the lists'
            )
            self._view = (match.view_name, ", ".join(view.allowed_methods), plain)
        return self._view


@cache
def _fields(serializer_class) -> dict:
    return dict(serializer_class().fields)  # bound once: building them is most of the cost


def _params(serializer_class, request) -> dict:
    """The view's validated query: its serializer's, or for a query naming none of its
    fields (a plain list) what validation gives then, the fields' defaults (a field without
    one left out), without building the serializer's fields for each request."""
    fields = _fields(serializer_class)
    if fields.keys().isdisjoint(request.query_params):
        defaults = {name: field.get_default() for name, field in fields.items()
                    if field.default is not empty}  # fmt: skip
        return serializer_class().validate(defaults)
    serializer = serializer_class(data=request.query_params)
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
    return s.me_answer(actor, team_rows(actor=actor))


# the paths as the URL conf spells them (ids as its [0-9]+ lookup, within a bigint)
ROUTES = (
    _Route(r"/api/v1/runs", _run_list),
    _Route(r"/api/v1/runs/([1-9][0-9]{0,17})", _run_detail),
    _Route(r"/api/v1/runs/([1-9][0-9]{0,17})/metrics", _run_metrics),
    _Route(r"/api/v1/experiments", _experiment_list),
    _Route(r"/api/v1/me", _me),
)


def _token_actor(request) -> Actor | None:
    """The token's actor as request_actor builds it; None for anything but a live API
    token (the full path then answers, and counts a failure once)."""
    parts = request.META.get("HTTP_AUTHORIZATION", "").encode("latin-1").split()
    if len(parts) != 2 or parts[0].lower() != BearerTokenAuthentication.keyword.encode():
        return None
    try:
        token = api_token_authenticate(raw=parts[1].decode("ascii"))
    except (UnicodeDecodeError, DomainError):
        return None
    return actor_for(
        user=token.user, token=token, ip=request_client_address(request),
        user_agent=request.META.get("HTTP_USER_AGENT", ""),
    )  # fmt: skip


def lean_response(request) -> HttpResponse | None:
    """The answer of a hot read, or None: the full path answers it."""
    if request.method != "GET" or "HTTP_COOKIE" in request.META:
        return None
    for route in ROUTES:
        match = route.pattern.fullmatch(request.path_info)  # as the URL conf reads it
        if match is not None:
            break
    else:
        return None
    started = time.perf_counter()
    if not _supported():
        return None
    name, allow, plain = route.view(request.path_info)
    if not plain:
        return None
    request_hooks, response_hooks = _middleware()
    request.query_params = request.GET  # what DRF's paginator and serializers read
    try:
        for hook in request_hooks:  # the https redirect; the host, a redirect to www
            if hook.process_request(request) is not None:
                return None
        renderer, media_type = DefaultContentNegotiation().select_renderer(
            request, [api_settings.DEFAULT_RENDERER_CLASSES[0]()]
        )
        actor = _token_actor(request)
        if actor is None:
            return None
        data = route.answer(actor, request, match)
    except _FALL_THROUGH:
        return None
    response = HttpResponse(renderer.render(data, media_type), content_type=renderer.media_type)
    response["Allow"] = allow
    for hook in response_hooks:
        response = hook.process_response(request, response)
    HTTP_LATENCY.labels(name, "GET").observe(time.perf_counter() - started)
    HTTP_REQUESTS.labels(name, "GET", "200").inc()
    return response
