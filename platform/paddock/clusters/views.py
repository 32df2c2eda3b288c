"""POST /api/v1/runs/{id}/bootstrap: a job's first contact (see bootstrap_tokens)."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from paddock.api.errors import DomainError
from paddock.core.client_address import request_client_address
from paddock.core.jsonbody import JsonBodyError, json_parse
from paddock.core.ratelimit import auth_failure_record

from .bootstrap_tokens import bootstrap_exchange


@csrf_exempt  # a bearer token, not a cookie
@require_POST
def bootstrap(request: HttpRequest, run_id: int) -> JsonResponse:
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    try:
        body = json_parse(request.body or b"{}")
        dispatch = int(body["dispatch"])
    except (JsonBodyError, ValueError, KeyError, TypeError):
        return JsonResponse(
            {"code": "invalid", "message": "send {'dispatch': N}", "field": "dispatch"}, status=400
        )
    if scheme.lower() != "bearer" or not raw:
        return JsonResponse(
            {"code": "not_authenticated", "message": "send the bootstrap token", "field": None},
            status=401,
        )
    try:
        reply = bootstrap_exchange(run_id=run_id, dispatch=dispatch, raw=raw.strip())
    except DomainError as exc:
        wait = auth_failure_record(ip=request_client_address(request)) if exc.status == 401 else 0
        if wait:
            return JsonResponse(
                {"code": "rate_limited", "message": "too many failed authentications",
                 "field": None}, status=429, headers={"Retry-After": str(wait)},
            )  # fmt: skip
        return JsonResponse(exc.as_dict(), status=exc.status)
    return JsonResponse(reply)
