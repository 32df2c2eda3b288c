"""A job's side of the bootstrap exchange: the one-time token spent for what the platform
hands a run's job (`bootstrap`: its run token, effective spec, output directory, checkpoint
to resume from, secrets and read roots) or a pool's (`post_bootstrap` with the pool's
answer: workers/pool/job.py). The answers are read with workers/job_replies.py's models.

Light (requests and pydantic): the run's job (workers/job.py) and the pool's import it, and
so do tests of the exchange, without the training stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import requests
from pydantic import BaseModel, ValidationError

from .egress import EgressPolicy
from .grants import Grants
from .job_replies import RunBootstrap
from .path_guard import PathGuard


@dataclass(frozen=True)
class Assignment:
    """What the platform hands a job at bootstrap."""

    run_id: int
    dispatch: int
    token: str
    spec: dict[str, Any]
    out_dir: Path
    resume_from: str | None
    grants: Grants  # the run's secrets from the bootstrap, the egress policy dispatch set
    purpose: str = "train"  # or "preflight": check the spec (workers/preflight.py)


Reply = TypeVar("Reply", bound=BaseModel)


def post_bootstrap(url: str, what: str, dispatch: int, secret: str, answer: type[Reply]) -> Reply:
    """`POST {url}/api/v1/{what}/bootstrap` (`what`: `runs/<id>`, `pools/<id>`) with the
    one-time token; its answer read with `answer` (workers/job_replies.py), or SystemExit
    naming the refusal, or the fields of an answer this job cannot read."""
    reply = requests.post(
        f"{url.rstrip('/')}/api/v1/{what}/bootstrap",
        json={"dispatch": dispatch},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )
    kind, ident = what.split("/")
    if reply.status_code != 200:
        raise SystemExit(
            f"workers.job: the platform at {url} refused the bootstrap of {kind[:-1]} {ident} "
            f"dispatch {dispatch}: HTTP {reply.status_code} {reply.text[:300]}"
        )
    try:
        return answer.model_validate_json(reply.content)
    except ValidationError as exc:  # a platform of another release: say which fields
        raise SystemExit(
            f"workers.job: the bootstrap answer of {kind[:-1]} {ident} dispatch {dispatch} "
            f"from {url} is not the {answer.__name__} this job reads: {exc}"
        ) from None


def bootstrap(url: str, run_id: int, dispatch: int, secret: str) -> Assignment:
    body = post_bootstrap(url, f"runs/{run_id}", dispatch, secret, RunBootstrap)
    return Assignment(
        run_id=run_id,
        dispatch=dispatch,
        token=body.token,
        spec=body.spec,
        out_dir=Path(_local_path(body.artifacts_uri)),
        resume_from=_local_path(body.resume_from) if body.resume_from else None,
        grants=Grants(
            secrets=body.secrets,
            egress=EgressPolicy.from_env(),
            paths=PathGuard(tuple(body.read_roots)) if body.read_roots is not None else None,
        ),
        purpose=body.purpose,
    )


def _local_path(uri: str) -> str:
    # The embedded artifact store is a directory (file://). An object store (s3://) needs a
    # sync step that is not written yet: say so rather than write to a wrong place.
    if uri.startswith("file://"):
        return uri[len("file://") :]
    if "://" in uri:
        raise SystemExit(f"workers.job: artifact store {uri!r} is not supported by this job yet")
    return uri
