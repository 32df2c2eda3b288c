"""The job doors of the cluster registry: POST /api/v1/runs/{id}/bootstrap, a job's first
contact (see bootstrap_tokens), and a pool job's two (pools.py): its bootstrap and its
members. Each answers with its model of workers/job_replies.py, which the job reads back."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST
from pydantic import BaseModel

from paddock.core.errors import DomainError, ErrorCode
from paddock.core.jsonbody import JsonBodyError, json_parse
from paddock.http.answers import Answer, error_answer, refusal
from paddock.http.client_address import request_client_address
from paddock.http.policy import job_bearer

from .bootstrap_tokens import bootstrap_exchange
from .pools import pool_bootstrap as pool_bootstrap_exchange
from .pools import pool_members as pool_members_of


def _door(
    request: HttpRequest, dispatch: int | None, what: str, answer: Callable[..., BaseModel]
) -> JsonResponse:
    """`answer(dispatch=…, raw=…)` for a request that sent its dispatch and a bearer secret;
    the refusals (a 401 counted against the address) otherwise."""
    if dispatch is None:
        answer_ = error_answer(ErrorCode.INVALID, "send the dispatch number N", "dispatch")
        return answer_.response()
    client_ip = request_client_address(request)
    raw = job_bearer(request.headers.get("Authorization", ""), client_ip=client_ip, what=what)
    if isinstance(raw, Answer):
        return raw.response()
    try:
        return JsonResponse(answer(dispatch=dispatch, raw=raw).model_dump(mode="json"))
    except DomainError as exc:
        return refusal(exc, client_ip).response()


def _body_dispatch(request: HttpRequest) -> int | None:
    try:
        return int(json_parse(request.body or b"{}")["dispatch"])
    except (JsonBodyError, ValueError, KeyError, TypeError):
        return None


@csrf_exempt  # a bearer token, not a cookie
@require_POST
def bootstrap(request: HttpRequest, run_id: int) -> JsonResponse:
    exchange = partial(bootstrap_exchange, run_id=run_id)
    return _door(request, _body_dispatch(request), "bootstrap token", exchange)


@csrf_exempt
@require_POST
def pool_bootstrap(request: HttpRequest, pool_id: int) -> JsonResponse:
    exchange = partial(pool_bootstrap_exchange, pool_id=pool_id)
    return _door(request, _body_dispatch(request), "bootstrap token", exchange)


@require_GET
def pool_members(request: HttpRequest, pool_id: int) -> JsonResponse:
    """GET /api/v1/pools/{id}/members?dispatch=N: what the pool's job hosts now."""
    raw = request.GET.get("dispatch", "")
    dispatch = int(raw) if raw.isascii() and raw.isdigit() and 0 < len(raw) < 10 else None
    return _door(request, dispatch, "pool token", partial(pool_members_of, pool_id=pool_id))
