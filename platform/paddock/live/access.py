"""Who may open which stream: decided here, once, outside the consumers.

A websocket authenticates with the browser's session (Channels' AuthMiddlewareStack) or an
API token, then becomes an `Actor` exactly as a REST request does, so a stream never sees
more than the same user's API calls would. A token travels in a header, never in the URL
(a URL reaches the access logs of the server and of every proxy): `Authorization: Bearer`
for a program, or for a client that cannot set headers (a browser's WebSocket) the
subprotocol `paddock.bearer.<token>` offered beside `paddock`, which the server accepts.
A `?token=` in the URL is not read.

A stream closes as soon as its credentials stop working: `access_changed` tells it which
(a token revoked, a member removed, a session logged out); `ACCESS_RECHECK_S` in the
consumers catches the rest (an expiry)."""

from __future__ import annotations

import hashlib
from urllib.parse import parse_qs

from paddock.core.errors import DomainError
from paddock.experiments.models import Experiment, Run
from paddock.experiments.selectors import run_visible
from paddock.http.client_address import scope_client_address
from paddock.http.limits import auth_failure_record
from paddock.http.policy import MalformedBearer, bearer_token
from paddock.teams.access import Actor, actor_for
from paddock.teams.services import api_token_authenticate

SUBPROTOCOL = "paddock"
BEARER_SUBPROTOCOL = "paddock.bearer."


def _query(scope) -> dict[str, str]:
    raw = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    return {k: v[-1] for k, v in raw.items()}


def _headers(scope) -> dict[bytes, bytes]:
    return dict(scope.get("headers") or [])


def scope_bearer(scope) -> str | None:
    """The API token a handshake sends (Authorization, or the bearer subprotocol); None
    when it sends none. A malformed Authorization header raises MalformedBearer."""
    token = bearer_token(_headers(scope).get(b"authorization", b"").decode("latin-1"))
    if token is not None:
        return token
    for offered in scope.get("subprotocols") or ():
        if offered.startswith(BEARER_SUBPROTOCOL):
            return offered.removeprefix(BEARER_SUBPROTOCOL) or None
    return None


def accepted_subprotocol(scope) -> str | None:
    """The subprotocol the server answers with: `paddock` when the client offered it (a
    browser fails the connection when it offered some and none is chosen)."""
    return SUBPROTOCOL if SUBPROTOCOL in (scope.get("subprotocols") or ()) else None


def scope_actor(scope) -> Actor:
    """The actor of a websocket scope; anonymous (no teams) when nothing authenticates."""
    ip = scope_client_address(scope)
    agent = _headers(scope).get(b"user-agent", b"").decode("latin-1")
    try:
        raw = scope_bearer(scope)
        if raw is None:
            return actor_for(user=scope.get("user"), ip=ip, user_agent=agent)
        token = api_token_authenticate(raw=raw)
    except (MalformedBearer, DomainError):
        auth_failure_record(ip=ip)  # a websocket refusal is a close either way
        return actor_for(user=None)
    return actor_for(user=token.user, token=token, ip=ip, user_agent=agent)


def session_mark(session_key: str | None) -> str | None:
    """What names a session in an `access_changed` message: never the key itself."""
    return hashlib.sha256(session_key.encode()).hexdigest()[:32] if session_key else None


def access_change_applies(event: dict, *, actor: Actor, session: str | None) -> str | None:
    """What an open stream of `actor` (authenticated by the session `session_mark`s) does on
    an `access_changed` group message: "close" (its session logged out), "recheck" (its
    token, or its user's membership, changed), or None (not its credentials)."""
    if session is not None and session in event.get("sessions", ()):
        return "close"
    token = actor.token
    if token is not None and token.pk in event.get("tokens", ()):
        return "recheck"
    user = actor.user
    if user is not None and user.pk in event.get("users", ()):
        return "recheck"
    return None


def stream_run(actor: Actor, run_id: int) -> Run | None:
    """The run if the actor may watch it (any role in its team), else None."""
    return Run.objects.filter(pk=run_id, team_id__in=actor.team_ids).first()


def stream_run_allowed(actor: Actor, run_id: int) -> bool:
    """Whether the actor may watch the run: `stream_run`'s check without reading the run
    (a connect's and each recheck's, where a model row cost more than the query)."""
    return run_visible(actor=actor, run_id=run_id)


def stream_experiment(actor: Actor, experiment_id: int) -> Experiment | None:
    return Experiment.objects.filter(pk=experiment_id, team_id__in=actor.team_ids).first()


# a cursor's numbers are refused past what their columns hold (a dispatch is 32-bit), so
# a crafted `?after=` never reaches the database as a value it cannot compare
_RUN, _DISPATCH, _SEQ = 2**63 - 1, 2**31 - 1, 2**63 - 1


def _bounded(text: str, top: int) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 19 or int(text) > top:
        raise ValueError(text)
    return int(text)


def parse_cursors(scope) -> dict[int, tuple[int, int]]:
    """`?after=1:43` (a run stream) or `?after=7:1:43,8:2:5` (run:dispatch:seq each)."""
    after = _query(scope).get("after", "")
    cursors: dict[int, tuple[int, int]] = {}
    for part in filter(None, after.split(",")[:1000]):
        numbers = part.split(":")
        try:
            if len(numbers) == 2:
                cursors[0] = (_bounded(numbers[0], _DISPATCH), _bounded(numbers[1], _SEQ))
            elif len(numbers) == 3:
                cursors[_bounded(numbers[0], _RUN)] = (
                    _bounded(numbers[1], _DISPATCH), _bounded(numbers[2], _SEQ),
                )  # fmt: skip
        except ValueError:
            continue  # a malformed cursor means "from the snapshot"
    return cursors
