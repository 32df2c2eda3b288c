"""What the job-facing endpoints (bootstrap, ingest) share: the bearer secret read from the
header, and their answers, refusals included, as one small value both Django views and the
raw ASGI ingest path send.

A failed token is counted per client address (core/ratelimit.py) and, past the limit,
answered 429 `rate_limited` with `Retry-After` instead of 401; a valid one never is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.http import JsonResponse

from paddock.core.errors import DomainError, ErrorCode, error_body
from paddock.core.ratelimit import auth_failure_record


@dataclass
class Answer:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    def json_response(self) -> JsonResponse:
        return JsonResponse(self.body, status=self.status, headers=self.headers)


def error_answer(code: ErrorCode, message: str, field: str | None = None) -> Answer:
    return Answer(code.status, error_body(code, message, field))


def bearer_secret(authorization: str) -> str | None:
    """The secret of an `Authorization: Bearer <secret>` header; None without one."""
    scheme, _, raw = authorization.partition(" ")
    if scheme.lower() != "bearer" or not raw:
        return None
    return raw.strip()


def refusal(exc: DomainError, client_ip: str | None) -> Answer:
    """The answer to a refused request; a refused token is counted first."""
    if exc.status == 401:
        wait = auth_failure_record(ip=client_ip)
        if wait:
            answer = error_answer(ErrorCode.RATE_LIMITED, "too many failed authentications")
            answer.headers["Retry-After"] = str(wait)
            return answer
    return Answer(exc.status, exc.as_dict())
