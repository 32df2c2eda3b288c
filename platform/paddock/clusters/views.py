"""POST /api/v1/runs/{id}/bootstrap: a job's first contact (see bootstrap_tokens)."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from paddock.core.client_address import request_client_address
from paddock.core.errors import DomainError, ErrorCode
from paddock.core.job_doors import bearer_secret, error_answer, refusal
from paddock.core.jsonbody import JsonBodyError, json_parse

from .bootstrap_tokens import bootstrap_exchange


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
