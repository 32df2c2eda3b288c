"""Run tokens: the credential a job presents on ingest, one per dispatch of a run.

Dispatch calls `run_token_mint` when it starts dispatch N and hands the secret to the job;
the ingest view calls `run_token_verify` with the run id of the URL and the bearer secret."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from paddock.api.errors import DomainError
from paddock.experiments.models import Run, RunToken
from paddock.teams.secrets import secret_matches, secret_new, secret_prefix

RUN_TOKEN_KIND = "pdr"


@transaction.atomic
def run_token_mint(*, run: Run, dispatch: int) -> str:
    """A new secret for (run, dispatch), replacing one minted before for the same pair (a
    retried dispatch task cannot read the old secret back). Returns the secret; only its
    hash is stored."""
    new = secret_new(RUN_TOKEN_KIND)
    RunToken.objects.update_or_create(
        run=run,
        dispatch=dispatch,
        defaults={"prefix": new.prefix, "hashed": new.hashed, "revoked_at": None},
    )
    return new.raw


def run_token_verify(*, run_id: int, raw: str) -> RunToken:
    """The token of `raw` if it belongs to run `run_id` and is not revoked (its `dispatch`
    says which dispatch it was minted for); DomainError 401 otherwise. The token of another
    run is refused like an unknown one."""
    prefix = secret_prefix(raw, RUN_TOKEN_KIND)
    token = RunToken.objects.filter(prefix=prefix, run_id=run_id).first() if prefix else None
    if token is None or not secret_matches(raw, token.hashed):
        raise DomainError("token_invalid", "unknown run token", status=401)
    if token.revoked_at is not None:
        raise DomainError("token_revoked", "this run token was revoked", status=401)
    return token


def run_tokens_revoke(*, run_id: int, before_dispatch: int | None = None) -> int:
    """Revoke the run's tokens (those of dispatches before `before_dispatch`, if given)."""
    tokens = RunToken.objects.filter(run_id=run_id, revoked_at__isnull=True)
    if before_dispatch is not None:
        tokens = tokens.filter(dispatch__lt=before_dispatch)
    return tokens.update(revoked_at=timezone.now())
