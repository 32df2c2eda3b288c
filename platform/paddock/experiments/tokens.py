"""Run tokens: the credential a job presents on ingest, one per dispatch of a run.

Dispatch calls `run_token_mint` when it starts dispatch N and hands the secret to the job;
the ingest view calls `run_token_verify` with the run id of the URL and the bearer secret.

Once the run has ended its tokens only serve the retry of a batch already stored (the ingest
checks duplicates first), and only for `PADDOCK_RUN_TOKEN_GRACE_S`: a job's reporter
retries within seconds, and a later reporter of a finished dispatch never starts. Past the
grace the token is revoked: by `run_token_verify` itself on first use, and in bulk by the
reconcile beat (`run_tokens_revoke_finished`), so the rows say so too."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from paddock.core.errors import DomainError, ErrorCode
from paddock.experiments.models import Run, RunToken
from paddock.experiments.states import TERMINAL
from paddock.teams.secrets import secret_matches, secret_new, secret_prefix

RUN_TOKEN_KIND = "pdr"


def _grace() -> timedelta:
    return timedelta(seconds=getattr(settings, "PADDOCK_RUN_TOKEN_GRACE_S", 300))


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
    tokens = RunToken.objects.select_related("run").only(
        "id", "run_id", "dispatch", "hashed", "revoked_at", "run__state", "run__finished_at"
    )
    token = tokens.filter(prefix=prefix, run_id=run_id).first() if prefix else None
    if token is None or not secret_matches(raw, token.hashed):
        raise DomainError(ErrorCode.TOKEN_INVALID, "unknown run token")
    if token.revoked_at is None and _ended_before(token.run, timezone.now() - _grace()):
        RunToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
        token.revoked_at = timezone.now()
    if token.revoked_at is not None:
        raise DomainError(ErrorCode.TOKEN_REVOKED, "this run token was revoked")
    return token


def _ended_before(run: Run, when) -> bool:
    return run.state in TERMINAL and run.finished_at is not None and run.finished_at < when


def run_tokens_revoke_finished() -> int:
    """Revoke every token of a run that ended more than the grace ago (the reconcile beat)."""
    ended = Run.objects.filter(state__in=TERMINAL, finished_at__lt=timezone.now() - _grace())
    return RunToken.objects.filter(revoked_at__isnull=True, run__in=ended).update(
        revoked_at=timezone.now()
    )


def run_tokens_revoke(*, run_id: int, before_dispatch: int | None = None) -> int:
    """Revoke the run's tokens (those of dispatches before `before_dispatch`, if given)."""
    tokens = RunToken.objects.filter(run_id=run_id, revoked_at__isnull=True)
    if before_dispatch is not None:
        tokens = tokens.filter(dispatch__lt=before_dispatch)
    return tokens.update(revoked_at=timezone.now())
