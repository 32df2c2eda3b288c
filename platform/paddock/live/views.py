"""POST /api/v1/runs/{id}/ingest — the data plane's one door into the platform.

A plain Django view rather than DRF: it is the hot path (tens of thousands of points a
second), authenticates with a run token rather than a user, and answers in the API's one
error shape. Under the ASGI server the same requests are answered by ingest_asgi.py, which
skips Django's request cycle; both go through `ingest_answer`, so they answer alike."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from paddock.api.errors import DomainError
from paddock.core.client_address import request_client_address
from paddock.core.jsonbody import JsonBodyError, json_parse
from paddock.core.ratelimit import auth_failure_record
from workers.events import MAX_BODY_BYTES

from .broadcast import broadcast_batch
from .ingest import ingest_receive


@dataclass
class Answer:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


def _error(code: str, message: str, status: int, field: str | None = None) -> Answer:
    return Answer(status, {"code": code, "message": message, "field": field})


def too_large(length: int) -> Answer:
    return _error(
        "batch_too_large",
        f"an ingest batch may hold at most {MAX_BODY_BYTES // (1024 * 1024)} MiB; "
        f"this one has {length} bytes: send smaller batches",
        413,
    )


def ingest_answer(
    *, run_id: int, authorization: str, body: bytes, client_ip: str | None,
    publish: Callable[..., None] = broadcast_batch,
) -> Answer:  # fmt: skip
    """The answer to one ingest request whose body is within MAX_BODY_BYTES. `publish`
    gets the stored batch after commit (the channel-layer broadcast by default)."""
    scheme, _, raw = authorization.partition(" ")
    if scheme.lower() != "bearer" or not raw:
        return _error("not_authenticated", "send the run token as 'Authorization: Bearer …'", 401)
    try:
        parsed = json_parse(body)
    except JsonBodyError as exc:
        return _error("invalid_json", exc.message, 400, exc.field)
    try:
        reply = ingest_receive(run_id=run_id, raw_token=raw.strip(), body=parsed, publish=publish)
    except DomainError as exc:
        return _refusal(client_ip, exc)
    return Answer(200, reply.as_dict())


def _refusal(client_ip: str | None, exc: DomainError) -> Answer:
    """A failed token is counted (core/ratelimit.py); a valid one never is."""
    if exc.status == 401:
        wait = auth_failure_record(ip=client_ip)
        if wait:
            answer = _error("rate_limited", "too many failed authentications", 429)
            answer.headers["Retry-After"] = str(wait)
            return answer
    return Answer(exc.status, exc.as_dict())


@csrf_exempt  # a bearer token, not a cookie: nothing for a cross-site request to ride on
@require_POST
def ingest(request: HttpRequest, run_id: int) -> JsonResponse:
    length = int(request.META.get("CONTENT_LENGTH") or 0)
    if length > MAX_BODY_BYTES:
        answer = too_large(length)
    else:
        answer = ingest_answer(
            run_id=run_id, authorization=request.headers.get("Authorization", ""),
            body=request.body, client_ip=request_client_address(request),
        )  # fmt: skip
    response = JsonResponse(answer.body, status=answer.status)
    for name, value in answer.headers.items():
        response[name] = value
    return response
