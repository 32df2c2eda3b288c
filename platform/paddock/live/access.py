"""Who may open which stream: decided here, once, outside the consumers.

A websocket authenticates with the browser's session (Channels' AuthMiddlewareStack) or an
API token (`?token=` or `Authorization: Bearer`), then becomes an `Actor` exactly as a REST
request does, so a stream never sees more than the same user's API calls would."""

from __future__ import annotations

from urllib.parse import parse_qs

from paddock.api.errors import DomainError
from paddock.core.ratelimit import auth_failure_record
from paddock.experiments.models import Experiment, Run
from paddock.teams.access import Actor, actor_for
from paddock.teams.services import api_token_authenticate


def _query(scope) -> dict[str, str]:
    raw = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    return {k: v[-1] for k, v in raw.items()}


def scope_actor(scope) -> Actor:
    """The actor of a websocket scope; anonymous (no teams) when nothing authenticates."""
    headers = dict(scope.get("headers") or [])
    bearer = headers.get(b"authorization", b"").decode("latin-1")
    raw = _query(scope).get("token") or bearer.partition(" ")[2].strip()
    client = scope.get("client") or (None, None)
    agent = headers.get(b"user-agent", b"").decode("latin-1")
    if raw:
        try:
            token = api_token_authenticate(raw=raw)
        except DomainError:
            auth_failure_record(ip=client[0])  # a websocket refusal is a close either way
            return actor_for(user=None)
        return actor_for(user=token.user, token=token, ip=client[0], user_agent=agent)
    return actor_for(user=scope.get("user"), ip=client[0], user_agent=agent)


def stream_run(actor: Actor, run_id: int) -> Run | None:
    """The run if the actor may watch it (any role in its team), else None."""
    return Run.objects.filter(pk=run_id, team_id__in=actor.team_ids).first()


def stream_experiment(actor: Actor, experiment_id: int) -> Experiment | None:
    return Experiment.objects.filter(pk=experiment_id, team_id__in=actor.team_ids).first()


def parse_cursors(scope) -> dict[int, tuple[int, int]]:
    """`?after=1:43` (a run stream) or `?after=7:1:43,8:2:5` (run:dispatch:seq each)."""
    after = _query(scope).get("after", "")
    cursors: dict[int, tuple[int, int]] = {}
    for part in filter(None, after.split(",")):
        numbers = part.split(":")
        try:
            if len(numbers) == 2:
                cursors[0] = (int(numbers[0]), int(numbers[1]))
            elif len(numbers) == 3:
                cursors[int(numbers[0])] = (int(numbers[1]), int(numbers[2]))
        except ValueError:
            continue  # a malformed cursor means "from the snapshot"
    return cursors
