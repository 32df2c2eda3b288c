"""Streamed responses that stream under ASGI too.

Django's ASGI handler reads a synchronous iterator of a StreamingHttpResponse whole into a
list before sending a byte (it cannot call blocking code on the event loop), so a large
export would sit in memory. Under ASGI the chunks are pulled one at a time in Django's
request thread instead (`sync_to_async`, thread-sensitive: the ORM there keeps its
connection); under WSGI and the test client the iterator is handed over as it is."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse

_END = object()


async def _pulled(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    pull = sync_to_async(next, thread_sensitive=True)
    try:
        while (piece := await pull(chunks, _END)) is not _END:
            yield piece
    finally:  # a client that went away: the generator's own cleanup (a temporary file) runs
        close = getattr(chunks, "close", None)
        if close is not None:
            await sync_to_async(close, thread_sensitive=True)()


def streaming_response(
    request: HttpRequest, chunks: Iterator[bytes], content_type: str, filename: str
) -> StreamingHttpResponse:
    django_request = getattr(request, "_request", request)  # DRF's Request wraps Django's
    content = _pulled(chunks) if isinstance(django_request, ASGIRequest) else chunks
    response = StreamingHttpResponse(content, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
