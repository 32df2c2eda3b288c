"""The one-time bootstrap token a job exchanges for its run token on first contact.

It travels in the job's environment, which other users of a shared Ray cluster can read
through the Jobs API; so it is only good once, and only for its own (run, dispatch). It is
derived (HMAC of the server's secret key), not stored: a retried dispatch task hands the
same token to the same job id, and the database never holds it in clear."""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings
from django.db import IntegrityError, transaction

from paddock.core.errors import DomainError, ErrorCode
from paddock.experiments.artifacts import run_folder_uri
from paddock.experiments.models import Checkpoint, Run
from paddock.experiments.spec_paths import run_read_roots, spec_datasets_resolve
from paddock.experiments.states import TERMINAL
from paddock.experiments.tokens import run_token_mint
from paddock.teams.team_secrets import secrets_for_run
from workers.job_replies import RunBootstrap

from .models import BootstrapUse

PREFIX = "pdb_"


def bootstrap_token_for(*, run_id: int, dispatch: int) -> str:
    mac = hmac.new(
        settings.SECRET_KEY.encode(), f"bootstrap:{run_id}:{dispatch}".encode(), hashlib.sha256
    )
    return PREFIX + mac.hexdigest()


def bootstrap_exchange(*, run_id: int, dispatch: int, raw: str) -> RunBootstrap:
    """Spend the bootstrap token of (run, dispatch): mint the run token and return it with
    what the job needs to start (effective spec, where to write, what to resume from)."""
    expected = bootstrap_token_for(run_id=run_id, dispatch=dispatch)
    if not hmac.compare_digest(expected, raw):
        raise DomainError(ErrorCode.TOKEN_INVALID, "unknown bootstrap token")
    run = Run.objects.select_related("config").filter(pk=run_id).first()
    if run is None or run.dispatch_count != dispatch:
        raise DomainError(ErrorCode.DISPATCH_SUPERSEDED, "this dispatch is no longer current")
    if run.state in TERMINAL:
        # a job placed only after its run ended (aborted or failed while it was pending, its
        # stop still queued in Ray): it must not start training for nobody
        raise DomainError(ErrorCode.RUN_FINISHED, f"run {run_id} has finished ({run.state})")
    spec = spec_datasets_resolve(team_id=run.team_id, spec=run.config.spec)  # dataset://<id>
    # the team secrets this run's spec names, and none other: a pool's job holds each
    # member's own (workers/grants.py)
    names = [name for _, name in run.config.run_spec.secret_names()]
    secrets = secrets_for_run(team_id=run.team_id, names=names)
    try:
        with transaction.atomic():
            BootstrapUse.objects.create(run_id=run_id, dispatch=dispatch)
            token = run_token_mint(run=run, dispatch=dispatch)
    except IntegrityError:
        raise DomainError(ErrorCode.TOKEN_SPENT, "this bootstrap token was already used") from None
    last = Checkpoint.objects.filter(run_id=run_id).order_by("-step").first()
    return RunBootstrap(
        token=token,
        spec=spec,
        artifacts_uri=run_folder_uri(run_id),
        read_roots=run_read_roots(run),
        resume_from=last.uri if last is not None and dispatch > 1 else None,
        secrets=secrets,
        purpose=run.purpose,
    )
