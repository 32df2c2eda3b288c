"""JSON over HTTP to a team's own service: the reward service (rewards/service.py) and
environment servers (envs/http_env.py) both reach theirs through this one client.

- Request headers come from a secret the spec only names: an environment variable on the
  worker holding a JSON object of headers, or a token sent as `Authorization: Bearer`.
- One attempt has a deadline (`timeout_s`); a connection error, a timeout, a 429 or a 5xx
  is retried up to `max_retries` times with exponential backoff; any other status fails at
  once. The failure names the service's URL and the reason, never the secret.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from typing import Any

import aiohttp

BACKOFF_S = 0.5  # first retry after 0.5 s, then 1, 2, 4 ... capped at BACKOFF_MAX_S
BACKOFF_MAX_S = 8.0


class _Retryable(Exception):
    pass


def secret_headers(
    what: str,
    secret: str | None,
    error: type[Exception],
    environ: dict[str, str] | None = None,
) -> dict[str, str]:
    """The headers the environment variable named `secret` holds (see the module doc);
    `what` names the service in errors."""
    if secret is None:
        return {}
    env = os.environ if environ is None else environ
    value = env.get(secret)
    if value is None or not value.strip():
        raise error(
            f"{what}: headers_secret names the environment variable {secret}, which is not "
            "set on this worker"
        )
    value = value.strip()
    if not value.startswith("{"):
        return {"Authorization": f"Bearer {value}"}
    try:
        headers = json.loads(value)
    except ValueError:
        headers = None
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        # never echo the value: it is a secret
        raise error(f"{what}: {secret} holds neither a JSON object of string headers nor a token")
    return headers


async def post_json(
    session: aiohttp.ClientSession,
    url: str,
    body: Any,
    *,
    what: str,
    timeout_s: float,
    max_retries: int,
    error: type[Exception],
    on_attempt: Callable[[], None] | None = None,
) -> bytes:
    """POST `body` (JSON-encoded here unless bytes) and return the body of a 200 reply,
    retrying as the module doc says; `error` is raised with `what` and the reason."""
    data = body if isinstance(body, bytes) else json.dumps(body, default=str).encode()
    last = ""
    for attempt in range(max_retries + 1):
        if attempt:
            await asyncio.sleep(min(BACKOFF_S * 2 ** (attempt - 1), BACKOFF_MAX_S))
        if on_attempt is not None:
            on_attempt()
        try:
            return await _post(session, url, data, what, timeout_s, error)
        except _Retryable as exc:
            last = str(exc)
    raise error(f"{what} failed after {max_retries + 1} attempt(s): {last}")


async def _post(session, url, data: bytes, what: str, timeout_s: float, error) -> bytes:
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with session.post(url, data=data, timeout=timeout) as resp:
            payload = await resp.read()
            status, reason = resp.status, resp.reason or ""
    except TimeoutError:
        raise _Retryable(f"no reply within timeout_s={timeout_s:g} s") from None
    except aiohttp.ClientError as exc:  # refused, reset, DNS, a broken reply
        raise _Retryable(f"{type(exc).__name__}: {exc}") from None
    if status == 429 or status >= 500:
        raise _Retryable(f"HTTP {status} {reason}: {payload[:200]!r}")
    if status != 200:
        raise error(f"{what}: HTTP {status} {reason}: {payload[:200]!r}")
    return payload
