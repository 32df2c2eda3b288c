"""POST /api/v1/runs/{id}/ingest — the data plane's one door into the platform.

A plain Django view rather than DRF: it is the hot path (tens of thousands of points a
second), authenticates with a run token rather than a user, and answers in the API's one
error shape. Under the ASGI server the same requests are answered by ingest_asgi.py, which
skips Django's request cycle; both go through `ingest_answer`, so they answer alike."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from paddock.core.errors import DomainError, ErrorCode
from paddock.core.jsonbody import JsonBodyError, json_parse
from paddock.http.answers import Answer, error_answer, refusal
from paddock.http.client_address import request_client_address
from paddock.http.policy import job_bearer
from workers.events import MAX_BODY_BYTES

from .broadcast import broadcast_batch
from .ingest import ingest_receive


def too_large(length: int) -> Answer:
    return error_answer(
        ErrorCode.BATCH_TOO_LARGE,
        f"an ingest batch may hold at most {MAX_BODY_BYTES // (1024 * 1024)} MiB; "
        f"this one has {length} bytes: send smaller batches",
    )


def ingest_answer(
    *, run_id: int, authorization: str, body: bytes, client_ip: str | None,
    publish: Callable[..., None] = broadcast_batch,
) -> Answer:  # fmt: skip
    """The answer to one ingest request whose body is within MAX_BODY_BYTES. `publish`
    gets the stored batch after commit (the channel-layer broadcast by default)."""
    raw = job_bearer(authorization, client_ip=client_ip, what="run token")
    if isinstance(raw, Answer):
        return raw
    try:
        parsed = json_parse(body)
    except JsonBodyError as exc:
        return error_answer(ErrorCode.INVALID_JSON, exc.message, exc.field)
    try:
        reply = ingest_receive(run_id=run_id, raw_token=raw, body=parsed, publish=publish)
    except DomainError as exc:
        return refusal(exc, client_ip)
    return Answer(200, reply.as_dict())


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
    return answer.response()
