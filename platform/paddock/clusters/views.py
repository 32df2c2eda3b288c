"""The job doors of the cluster registry: POST /api/v1/runs/{id}/bootstrap, a job's first
contact (see bootstrap_tokens), and a pool job's two (pools.py): its bootstrap and its
members."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from paddock.core.client_address import request_client_address
from paddock.core.errors import DomainError, ErrorCode
from paddock.core.job_doors import bearer_secret, error_answer, refusal
from paddock.core.jsonbody import JsonBodyError, json_parse

from .bootstrap_tokens import bootstrap_exchange
from .pools import pool_bootstrap as pool_bootstrap_exchange
from .pools import pool_members as pool_members_of


@csrf_exempt  # a bearer token, not a cookie
@require_POST
def bootstrap(request: HttpRequest, run_id: int) -> JsonResponse:
    try:
        body = json_parse(request.body or b"{}")
        dispatch = int(body["dispatch"])
    except (JsonBodyError, ValueError, KeyError, TypeError):
        answer = error_answer(ErrorCode.INVALID, "send {'dispatch': N}", "dispatch")
        return answer.json_response()
    raw = bearer_secret(request.headers.get("Authorization", ""))
    if raw is None:
        return error_answer(ErrorCode.NOT_AUTHENTICATED, "send the bootstrap token").json_response()
    try:
        reply = bootstrap_exchange(run_id=run_id, dispatch=dispatch, raw=raw)
    except DomainError as exc:
        return refusal(exc, request_client_address(request)).json_response()
    return JsonResponse(reply)


@csrf_exempt  # a bearer token, not a cookie
@require_POST
def pool_bootstrap(request: HttpRequest, pool_id: int) -> JsonResponse:
    """POST /api/v1/pools/{id}/bootstrap: a pool job's first contact (pools.pool_bootstrap)."""
    try:
        body = json_parse(request.body or b"{}")
        dispatch = int(body["dispatch"])
    except (JsonBodyError, ValueError, KeyError, TypeError):
        answer = error_answer(ErrorCode.INVALID, "send {'dispatch': N}", "dispatch")
        return answer.json_response()
    raw = bearer_secret(request.headers.get("Authorization", ""))
    if raw is None:
        return error_answer(ErrorCode.NOT_AUTHENTICATED, "send the bootstrap token").json_response()
    try:
        reply = pool_bootstrap_exchange(pool_id=pool_id, dispatch=dispatch, raw=raw)
    except DomainError as exc:
        return refusal(exc, request_client_address(request)).json_response()
    return JsonResponse(reply)


@require_GET
def pool_members(request: HttpRequest, pool_id: int) -> JsonResponse:
    """GET /api/v1/pools/{id}/members?dispatch=N: what the pool's job hosts now."""
    try:
        dispatch = int(request.GET["dispatch"])
        if not 0 < dispatch < 2**31:
            raise ValueError(dispatch)
    except (KeyError, ValueError):
        return error_answer(ErrorCode.INVALID, "send ?dispatch=N", "dispatch").json_response()
    raw = bearer_secret(request.headers.get("Authorization", ""))
    if raw is None:
        return error_answer(ErrorCode.NOT_AUTHENTICATED, "send the pool token").json_response()
    try:
        reply = pool_members_of(pool_id=pool_id, dispatch=dispatch, raw=raw)
    except DomainError as exc:
        return refusal(exc, request_client_address(request)).json_response()
    return JsonResponse(reply)
