"""Team secrets at rest: AES-256-GCM under a key derived (HKDF-SHA256) from the deployment's
secret key, each value bound to its team and name (the associated data), so a sealed value
copied to another team's row, or renamed, does not open.

Whoever holds PADDOCK_SECRET_KEY and the database reads every team secret; a database dump
alone reads none. Changing the secret key makes the stored secrets unreadable: a run naming
one then fails at its start, saying to set it again (docs/security.md#secrets)."""

from __future__ import annotations

import base64
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

VERSION = "v1"
NONCE = 12


class SecretUnreadable(Exception):
    """The sealed value does not open with this deployment's key (the key changed)."""


def _key() -> bytes:
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"paddock team secrets v1")
    return hkdf.derive(settings.SECRET_KEY.encode())


def _bound(team_id: int, name: str) -> bytes:
    return f"team:{team_id}:secret:{name}".encode()


def secret_seal(*, team_id: int, name: str, value: str) -> str:
    nonce = os.urandom(NONCE)
    sealed = AESGCM(_key()).encrypt(nonce, value.encode(), _bound(team_id, name))
    return f"{VERSION}:{base64.b64encode(nonce + sealed).decode()}"


def secret_open(*, team_id: int, name: str, sealed: str) -> str:
    version, _, body = sealed.partition(":")
    if version != VERSION:
        raise SecretUnreadable(f"unknown sealing {version!r}")
    raw = base64.b64decode(body)
    try:
        value = AESGCM(_key()).decrypt(raw[:NONCE], raw[NONCE:], _bound(team_id, name))
    except InvalidTag:
        raise SecretUnreadable("it does not open with this deployment's secret key") from None
    return value.decode()


def secret_mask(value: str) -> str:
    """What the API shows of a value: its last four characters when it is long enough that
    they give little away, else nothing."""
    return f"••••{value[-4:]}" if len(value) >= 20 else "••••"
