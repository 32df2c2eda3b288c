"""What the teams app tells the apps above it, after commit: credentials that stopped
working (a token revoked, a member removed from a team, a session logged out), so that
whatever they opened (a websocket stream) ends now, not at its next periodic check.
The live stream subscribes (live/subscribers.py)."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.dispatch import Signal

# keyword arguments, lists: token_ids, user_ids (whose memberships changed), session_keys
access_revoked = Signal()


def access_revoked_on_commit(
    *, token_ids: Iterable[int] = (), user_ids: Iterable[int] = (),
    session_keys: Iterable[str] = (),
) -> None:  # fmt: skip
    sent = {"token_ids": list(token_ids), "user_ids": list(user_ids),
            "session_keys": list(session_keys)}  # fmt: skip
    transaction.on_commit(lambda: access_revoked.send(sender=None, **sent))
