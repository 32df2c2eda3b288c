"""Who may open which stream: decided here, once, outside the consumers.

A websocket authenticates with the browser's session (Channels' AuthMiddlewareStack) or an
API token (`?token=` or `Authorization: Bearer`), then becomes an `Actor` exactly as a REST
request does, so a stream never sees more than the same user's API calls would."""

from __future__ import annotations

from urllib.parse import parse_qs

from paddock.core.client_address import scope_client_address
from paddock.core.errors import DomainError
from paddock.core.fixed_sql import QueryTemplate
from paddock.core.job_doors import bearer_secret
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
    bearer = bearer_secret(headers.get(b"authorization", b"").decode("latin-1"))
    raw = _query(scope).get("token") or bearer
    ip = scope_client_address(scope)
    agent = headers.get(b"user-agent", b"").decode("latin-1")
    if raw:
        try:
            token = api_token_authenticate(raw=raw)
        except DomainError:
            auth_failure_record(ip=ip)  # a websocket refusal is a close either way
            return actor_for(user=None)
        return actor_for(user=token.user, token=token, ip=ip, user_agent=agent)
    return actor_for(user=scope.get("user"), ip=ip, user_agent=agent)


def stream_run(actor: Actor, run_id: int) -> Run | None:
    """The run if the actor may watch it (any role in its team), else None."""
    return Run.objects.filter(pk=run_id, team_id__in=actor.team_ids).first()


def _allowed(_shape, ids):
    return Run.objects.filter(pk=ids[0], team_id__in=ids[1:]).values("id")[:1]


_ALLOWED = QueryTemplate(_allowed)  # compiled once per number of teams (core/fixed_sql.py)


def stream_run_allowed(actor: Actor, run_id: int) -> bool:
    """Whether the actor may watch the run: `stream_run`'s check without reading the run
    (a connect's and each recheck's, where a model row cost more than the query)."""
    team_ids = actor.team_ids
    return bool(team_ids) and bool(_ALLOWED.rows([run_id, *team_ids]))


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
