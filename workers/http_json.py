"""JSON over HTTP to a team's own service: the reward service (rewards/service.py) and
environment servers (envs/http_env.py) both post through this one client, on a session that
keeps the run's egress policy (workers/egress.py: `egress_session`).

One attempt has a deadline (`timeout_s`); a connection error, a timeout, a 429 or a 5xx is
retried up to `max_retries` times with exponential backoff; any other status, or a request
the egress policy refuses (a redirect, a name that now resolves elsewhere), fails at once.
The failure names the service and the reason, never the reply's body: a body may come from a
service the run's users must not read.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp

from .egress import EgressRefused

BACKOFF_S = 0.5  # first retry after 0.5 s, then 1, 2, 4 ... capped at BACKOFF_MAX_S
BACKOFF_MAX_S = 8.0


class _Retryable(Exception):
    pass


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
    except EgressRefused as exc:  # a redirect, or a name that now resolves elsewhere
        raise error(f"{what}: {exc}") from None
    except aiohttp.ClientError as exc:  # refused, reset, DNS, a broken reply
        raise _Retryable(f"{type(exc).__name__}: {exc}") from None
    if status == 429 or status >= 500:
        raise _Retryable(f"HTTP {status} {reason}")
    if status != 200:
        raise error(f"{what}: HTTP {status} {reason}")
    return payload
