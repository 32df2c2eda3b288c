"""POST /api/v1/runs/{id}/ingest — the data plane's one door into the platform.

A plain Django view rather than DRF: it is the hot path (tens of thousands of points a
second), authenticates with a run token rather than a user, and answers in the API's one
error shape."""

from __future__ import annotations

import json

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from paddock.api.errors import DomainError
from paddock.core.ratelimit import auth_failure_record

from .ingest import ingest_receive
from .ingest_schema import MAX_BODY_BYTES


def _error(code: str, message: str, status: int, field: str | None = None) -> JsonResponse:
    return JsonResponse({"code": code, "message": message, "field": field}, status=status)


@csrf_exempt  # a bearer token, not a cookie: nothing for a cross-site request to ride on
@require_POST
def ingest(request: HttpRequest, run_id: int) -> JsonResponse:
    length = int(request.META.get("CONTENT_LENGTH") or 0)
    if length > MAX_BODY_BYTES:
        return _error(
            "batch_too_large",
            f"an ingest batch may hold at most {MAX_BODY_BYTES // (1024 * 1024)} MiB; "
            f"this one has {length} bytes: send smaller batches",
            413,
        )
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not raw:
        return _error("not_authenticated", "send the run token as 'Authorization: Bearer …'", 401)
    try:
        body = json.loads(request.body)
    except (ValueError, UnicodeDecodeError):
        return _error("invalid_json", "the body is not JSON", 400)
    try:
        reply = ingest_receive(run_id=run_id, raw_token=raw.strip(), body=body)
    except DomainError as exc:
        return _refusal(request, exc)
    return JsonResponse(reply.as_dict())


def _refusal(request: HttpRequest, exc: DomainError) -> JsonResponse:
    """A failed token is counted (core/ratelimit.py); a valid one never is."""
    if exc.status == 401:
        wait = auth_failure_record(ip=request.META.get("REMOTE_ADDR"))
        if wait:
            reply = _error("rate_limited", "too many failed authentications", 429)
            reply["Retry-After"] = str(wait)
            return reply
    return JsonResponse(exc.as_dict(), status=exc.status)
