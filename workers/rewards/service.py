"""The service term: a team's own verifier (a code sandbox, an LLM judge) behind HTTP.

Contract (docs/train-your-own-model.md#rewards): the job POSTs
`{"items": [{"prompt", "completion", "answer", "metadata"}]}` as JSON, at most `batch_size`
items a request, and reads `{"rewards": [float, one per item], "details": [object | null]?}`.
A connection error, a timeout (`timeout_s` for one attempt), a 429 or a 5xx is retried up to
`max_retries` times with exponential backoff; then, or at once on any other status or on a
malformed reply, the step fails with an error naming the URL and the reason (the client is
workers/http_json.py, shared with environment servers). A reward is never made up.

The URL is reached under the run's egress policy (workers/egress.py: no private, loopback,
link-local or metadata address unless the operator allows it, no redirect), with the headers
of the team secret that `secret` names (workers/grants.py). An error quotes the status, never
the reply's body: a body may come from a service the run's users must not read.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import aiohttp

from ..egress import EgressRefused, egress_session
from ..grants import Grants
from ..http_json import post_json
from ..spec import ServiceTerm
from .base import RewardError, Role, ScoreItem, TermScore, run_all

_DETAILS_MAX = 2000  # characters of one item's details kept for the inspector


class RewardServiceError(RewardError):
    pass


def _json_safe(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def parse_reply(url: str, body: bytes, n: int) -> list[TermScore]:
    """The rewards (and details) of one reply, or an error saying what is wrong with it."""
    where = f"reward service {url}"
    try:
        data = json.loads(body)
    except ValueError:
        raise RewardServiceError(f"{where}: the reply is not JSON ({len(body)} bytes)") from None
    if not isinstance(data, dict) or not isinstance(data.get("rewards"), list):
        raise RewardServiceError(f'{where}: the reply has no "rewards" list')
    rewards = data["rewards"]
    if len(rewards) != n:
        raise RewardServiceError(f"{where}: {len(rewards)} rewards for a batch of {n} items")
    for i, r in enumerate(rewards):
        if isinstance(r, bool) or not isinstance(r, int | float) or not math.isfinite(r):
            raise RewardServiceError(f"{where}: rewards[{i}] is {r!r}, not a finite number")
    details = data.get("details")
    if details is None:
        details = [None] * n
    elif not isinstance(details, list) or len(details) != n:
        raise RewardServiceError(f'{where}: "details" must be a list of {n} objects or nulls')
    out = []
    for i, d in enumerate(details):
        if d is not None and not isinstance(d, dict):
            raise RewardServiceError(f"{where}: details[{i}] is not an object")
        d = {k: _json_safe(v) for k, v in (d or {}).items()}
        if len(json.dumps(d)) > _DETAILS_MAX:
            d = {"truncated": json.dumps(d)[:_DETAILS_MAX]}
        out.append(TermScore(float(rewards[i]), None, d))
    return out


class ServiceScorer:
    def __init__(self, term: ServiceTerm, grants: Grants):
        self.term = term
        self.role: Role = "shaping" if term.correct_threshold is None else "verifier"
        self.egress = grants.egress
        # checked now, so that a refused URL or a missing secret fails the run at its start,
        # not at step 1
        try:
            self.egress.check_url(term.url)
        except EgressRefused as exc:
            raise RewardServiceError(f"reward service {term.url}: {exc}") from None
        secret = grants.secret_headers(
            f"reward service {term.url}", term.secret, RewardServiceError
        )
        self.headers = {"Content-Type": "application/json", **secret}
        self.requests = 0  # attempts made, for tests and logs

    async def score(self, items: list[ScoreItem]) -> list[TermScore]:
        n = self.term.batch_size
        batches = [items[i : i + n] for i in range(0, len(items), n)]
        gate = asyncio.Semaphore(self.term.max_concurrency)
        async with egress_session(self.egress, headers=self.headers) as session:

            async def one(batch: list[ScoreItem]) -> list[TermScore]:
                async with gate:
                    return await self._batch(session, batch)

            done = await run_all([one(b) for b in batches])  # one failure cancels the rest
        scores = [s for batch in done for s in batch]
        threshold = self.term.correct_threshold
        if threshold is None:
            return scores
        return [TermScore(s.score, s.score >= threshold, s.details) for s in scores]

    async def _batch(self, session: aiohttp.ClientSession, batch: list[ScoreItem]):
        term = self.term
        body = {
            "items": [
                {
                    "prompt": it.prompt,
                    "completion": it.completion,
                    "answer": it.answer,
                    "metadata": it.metadata,
                }
                for it in batch
            ]
        }
        payload = await post_json(
            session, term.url, body, what=f"reward service {term.url}",
            timeout_s=term.timeout_s, max_retries=term.max_retries, error=RewardServiceError,
            on_attempt=self._attempt,
        )  # fmt: skip
        return parse_reply(term.url, payload, len(batch))

    def _attempt(self) -> None:
        self.requests += 1

    async def close(self) -> None:
        pass
