"""The ingest endpoint answered straight from the ASGI server, around Django's request cycle.

Why: under ASGI a sync Django view costs several thread hops per request (a sync middleware
runs in a thread that calls back into the event loop for the rest of the chain, then the view
runs in a thread again, and its broadcast hops back to the loop), and at tens of batches a
second those hops, the middleware and the request object were a large share of the server's
CPU. Here a request costs one hop: the body is read in the loop, `ingest_answer` (the same
function the Django view calls, so both answer alike) runs in a worker thread with Django's
database connection, and the broadcast is awaited in the loop before the reply, so a job's
next batch is never broadcast before this one.

Only `POST /api/v1/runs/<id>/ingest` is taken; everything else, other methods of that path
included, goes to Django."""

from __future__ import annotations

import logging
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from paddock.core.errors import ErrorCode
from paddock.http.answers import Answer, error_answer
from paddock.http.client_address import scope_client_address
from paddock.http.policy import scope_is_https, scope_refusal, security_headers
from workers.events import MAX_BODY_BYTES

from .broadcast import broadcast_batch_async
from .views import ingest_answer, too_large

log = logging.getLogger(__name__)
PATH = re.compile(r"/api/v1/runs/([0-9]+)/ingest")  # the Django route's <int:run_id>
PATH_PREFIX = "/api/v1/runs/"  # what the response headers depend on (an API path)
# Ingests in flight per server process. An ingest waits on PostgreSQL about half its time, so
# two threads keep the database busy while one of them parses; more threads only contend
# for the GIL with the event loop, which does the websocket fan-out (bench/live_latency.py:
# 2 threads took less server CPU per batch than asyncio's default pool of 6; 1 fell behind).
INGEST_THREADS = 2
_executor = ThreadPoolExecutor(INGEST_THREADS, thread_name_prefix="ingest")


def ingest_router(django_app):
    """An ASGI app: ingest POSTs answered here, the rest by `django_app`."""

    async def app(scope, receive, send):
        match = PATH.fullmatch(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None or scope["method"] != "POST":
            await django_app(scope, receive, send)
            return
        await _serve(int(match[1]), scope, receive, send)

    return app


async def _serve(run_id: int, scope, receive, send) -> None:
    headers = {name.lower(): value for name, value in scope["headers"]}
    secure = scope_is_https(scope, headers)
    refused = scope_refusal(scope, headers, secure=secure)
    if refused is not None:
        await _respond(send, refused, secure)
        return
    try:
        length = int(headers.get(b"content-length") or 0)
    except ValueError:
        length = 0
    body = await _read_body(receive, length)
    if body is None:
        return  # the client went away
    published: list[dict[str, Any]] = []
    if isinstance(body, int):
        answer = too_large(body)
    else:
        answer = await sync_to_async(_answer, thread_sensitive=False, executor=_executor)(
            run_id=run_id,
            authorization=headers.get(b"authorization", b"").decode("latin-1"),
            body=body,
            client_ip=scope_client_address(scope),
            published=published,
        )
    for batch in published:
        await broadcast_batch_async(**batch)
    await _respond(send, answer, secure)


async def _read_body(receive, length: int) -> bytes | int | None:
    """The body; its length (an int) once it is over MAX_BODY_BYTES; None on disconnect."""
    if length > MAX_BODY_BYTES:
        return length
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return size
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _answer(*, published: list[dict[str, Any]], **request: Any) -> Answer:
    # What Django's request cycle does around a view: connections checked before and
    # handed back (to the pool) after, since any request may run next in this thread.
    close_old_connections()
    try:
        return ingest_answer(**request, publish=lambda **batch: published.append(batch))
    except Exception:
        log.exception("ingest of run %s failed", request["run_id"])
        return error_answer(ErrorCode.SERVER_ERROR, "server error")
    finally:
        close_old_connections()


async def _respond(send, answer: Answer, secure: bool) -> None:
    body, headers = answer.asgi_head()
    extra = security_headers(path=PATH_PREFIX, content_type="application/json", secure=secure)
    headers += [(name.lower().encode(), value.encode()) for name, value in extra]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
