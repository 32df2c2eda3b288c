"""Bearer secrets shown once and stored as a hash: API tokens (`pdk_…`) and run tokens
(`pdr_…`). A secret carries 256 random bits, so SHA-256 alone makes a stolen database
useless for logging in; the first characters after the kind are a lookup prefix."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

PREFIX_LEN = 12
# what secrets.token_urlsafe writes: anything else is no secret of ours, and is refused
# before it reaches a query (a NUL from a websocket's ?token= was a database error)
_ALPHABET = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class NewSecret:
    raw: str  # give to the holder, never store
    prefix: str
    hashed: str


def secret_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def secret_new(kind: str) -> NewSecret:
    raw = f"{kind}_{secrets.token_urlsafe(32)}"
    return NewSecret(raw=raw, prefix=secret_prefix(raw, kind), hashed=secret_hash(raw))


def secret_prefix(raw: str, kind: str) -> str | None:
    """The lookup prefix of `raw`, or None when it is not a secret of this kind."""
    head = f"{kind}_"
    if not raw.startswith(head) or len(raw) < len(head) + PREFIX_LEN + 8 or len(raw) > 200:
        return None
    if not _ALPHABET.fullmatch(raw, len(head)):
        return None
    return raw[len(head) : len(head) + PREFIX_LEN]


def secret_matches(raw: str, hashed: str) -> bool:
    return hmac.compare_digest(secret_hash(raw), hashed)
