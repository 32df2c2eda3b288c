"""How large a request body Django's handler takes in, before it reads it: Django's ASGI
handler spools a whole body (to disk past 2.5 MiB) before any view can refuse it, so a
client could fill the disk with one request. This wraps that handler: a body declared (or
found while it arrives) over its path's cap is answered 413 `body_too_large` and never read
further. The ingest door has its own cap (live/ingest_asgi.py).

Caps: a dataset upload (POST /api/v1/datasets), the upload limit and room for the form's
other fields (PADDOCK_MAX_DATASET_BYTES); anything else, the JSON body limit
(DATA_UPLOAD_MAX_MEMORY_SIZE, 8 MiB), which no other body of the API comes near."""

from __future__ import annotations

from django.conf import settings

from paddock.core.errors import ErrorCode

from .answers import error_answer

UPLOAD_PATH = "/api/v1/datasets"
FORM_ROOM = 1024 * 1024  # the multipart framing and the form's other fields


def body_cap(scope) -> int:
    if scope.get("method") == "POST" and scope.get("path", "").rstrip("/") == UPLOAD_PATH:
        return settings.PADDOCK_MAX_DATASET_BYTES + FORM_ROOM
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def body_capped(app):
    """`app` (Django's handler) with each request's body held to `body_cap`."""

    async def capped(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        cap = body_cap(scope)
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > cap:
            return await _too_large(send, cap)
        received, over, started = 0, False, False

        async def counted():
            nonlocal received, over
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > cap:  # a body that did not say its length, or lied
                    over = True
                    return {"type": "http.disconnect"}  # Django stops reading and answers nothing
            return message

        async def watched(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        await app(scope, counted, watched)
        if over and not started:
            await _too_large(send, cap)

    return capped


async def _too_large(send, cap: int) -> None:
    answer = error_answer(ErrorCode.BODY_TOO_LARGE, f"the body is larger than {cap} bytes")
    body, headers = answer.asgi_head()
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
