"""Under https settings (SECURE_SSL_REDIRECT), the ingest route answered from ASGI refuses a
plain-http POST with a clear 403 instead of taking a run token sent in clear (Django would
redirect, and a client following it re-sends the POST as a GET). Behind a proxy that says
https (SECURE_PROXY_SSL_HEADER), the request goes on to the usual checks."""

from __future__ import annotations

import asyncio
import json

import pytest

from paddock.live.ingest_asgi import ingest_router

pytestmark = pytest.mark.django_db(transaction=True)


def post(scheme: str, extra_headers: list[tuple[bytes, bytes]]) -> tuple[int, dict]:
    async def never_django(scope, receive, send):
        raise AssertionError("an ingest POST must not reach Django")

    body = json.dumps({"dispatch": 1, "seq": 1, "events": []}).encode()
    scope = {
        "type": "http", "method": "POST", "path": "/api/v1/runs/1/ingest", "scheme": scheme,
        "headers": [(b"host", b"paddock.example.com"),
                    (b"content-length", str(len(body)).encode()), *extra_headers],
    }  # fmt: skip
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(ingest_router(never_django)(scope, receive, send))
    start, content = sent
    return start["status"], json.loads(content["body"])


def test_plain_http_ingest_is_refused_under_https_settings(settings):
    settings.SECURE_SSL_REDIRECT = True
    settings.ALLOWED_HOSTS = ["paddock.example.com"]
    status, body = post("http", [])
    assert (status, body["code"]) == (403, "https_required")

    # https at the connection, or said by the proxy: on to the token check (none sent here)
    for scheme, headers in (("https", []), ("http", [(b"x-forwarded-proto", b"https")])):
        status, body = post(scheme, headers)
        assert status == 401 and body["code"] != "https_required", (scheme, body)


def test_plain_http_ingest_is_served_without_https_settings(settings):
    settings.SECURE_SSL_REDIRECT = False
    settings.ALLOWED_HOSTS = ["paddock.example.com"]
    status, body = post("http", [])
    assert status == 401  # no token: the usual answer, not an https refusal
