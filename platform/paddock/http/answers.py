"""Answers built outside DRF (the job doors, the ingest door, the request policy's
refusals), as one small value that a Django view and a raw ASGI door both send.

A refused token is counted per client address (limits.py) and, past the limit, answered
429 `rate_limited` with `Retry-After` instead of 401; a valid one never is."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpResponse, JsonResponse

from paddock.core.errors import DomainError, ErrorCode, error_body

from .limits import auth_failure_record


@dataclass
class Answer:
    status: int
    body: dict[str, Any] | None  # JSON; None for an empty answer (a redirect)
    headers: dict[str, str] = field(default_factory=dict)

    def response(self) -> HttpResponse:
        if self.body is None:
            return HttpResponse(status=self.status, headers=self.headers)
        return JsonResponse(self.body, status=self.status, headers=self.headers)

    def asgi_head(self) -> tuple[bytes, list[tuple[bytes, bytes]]]:
        """(its body as bytes, its headers as an ASGI response starts with them)."""
        body = b"" if self.body is None else json.dumps(self.body).encode()
        headers = [(b"content-length", str(len(body)).encode())]
        if self.body is not None:
            headers.insert(0, (b"content-type", b"application/json"))
        headers += [(k.lower().encode(), v.encode("latin-1")) for k, v in self.headers.items()]
        return body, headers


def error_answer(code: ErrorCode, message: str, field: str | None = None) -> Answer:
    return Answer(code.status, error_body(code, message, field))


def refusal(exc: DomainError, client_ip: str | None) -> Answer:
    """The answer to a refused request; a refused token is counted first."""
    if exc.status == 401:
        wait = auth_failure_record(ip=client_ip)
        if wait:
            answer = error_answer(ErrorCode.RATE_LIMITED, "too many failed authentications")
            answer.headers["Retry-After"] = str(wait)
            return answer
    return Answer(exc.status, exc.as_dict())
