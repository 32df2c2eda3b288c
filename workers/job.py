"""`python -m workers.job`: the entrypoint of a run's Ray job.

Started by the control plane's dispatch through the Ray Jobs API, or by hand with a spec:

    python -m workers.job --spec SPEC.json [--out DIR]

Under the platform the job knows only its run id, dispatch number, the platform's URL and a
one-time bootstrap token (PADDOCK_RUN_ID, PADDOCK_DISPATCH, PADDOCK_PUBLIC_URL,
PADDOCK_BOOTSTRAP_TOKEN): anyone who can read the job's environment through the Jobs API
sees only a token that has already been spent. The first contact exchanges it for the run
token, the effective spec and the checkpoint to resume from; from then on the Reporter
carries every event up and every desired state down.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import requests
from pydantic import BaseModel, ValidationError

from .egress import EgressPolicy
from .grants import Grants
from .job_replies import RunBootstrap
from .loop.control import StaticControl
from .path_guard import PathGuard
from .report import Reporter, ReporterConfig

log = logging.getLogger("workers.job")


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


def run_with_platform(url: str, run_id: int, dispatch: int, secret: str) -> int:
    from .train import train

    assignment = bootstrap(url, run_id, dispatch, secret)
    control = StaticControl("running")
    reporter = Reporter(
        ReporterConfig(
            url=url,
            run_id=run_id,
            token=assignment.token,
            dispatch=dispatch,
            spool_dir=assignment.out_dir / "spool",
        ),
        on_desired_state=lambda state: control.set(state),  # type: ignore[arg-type]
    )
    overrides = []
    if assignment.resume_from:
        overrides.append(f"checkpoint.resume_from={assignment.resume_from}")
        reporter.log(f"dispatch {dispatch}: resuming from {assignment.resume_from}")
    try:
        reporter.status("starting", detail=f"dispatch {dispatch} on {os.uname().nodename}")
        # a pause or abort asked for before the job started is honoured from the first step
        reporter.flush(timeout_s=10)
        if assignment.purpose == "preflight":
            return _preflight(assignment, reporter)
        outcome = train(
            assignment.spec,
            out_dir=assignment.out_dir / f"dispatch-{dispatch}",
            overrides=overrides,
            control=control,
            on_event=reporter.emit,
            progress=False,
            grants=assignment.grants,
        )
        # the driver's final status (succeeded | paused | aborted) was the run's last event:
        # the platform refuses anything after it
        log.info("job finished: %s at step %s", outcome.state, outcome.step)
        return 0
    except BaseException as exc:
        tail = "".join(traceback.format_exception(exc))[-4000:]
        reporter.status("failed", detail=f"{type(exc).__name__}: {exc}\n{tail}")
        raise
    finally:
        if not reporter.close(timeout_s=60):
            log.error("some events could not be delivered; they stay in the spool")


def _preflight(assignment: Assignment, reporter: Reporter) -> int:
    """A pre-flight run: the check of the spec on this cluster's engine, its verdict
    reported, then `succeeded` (the verdict, not the status, says whether it passed)."""
    from .preflight import preflight

    reporter.status("running", detail="pre-flight check")
    verdict = preflight(
        assignment.spec,
        assignment.out_dir / f"dispatch-{assignment.dispatch}",
        grants=assignment.grants,
        log=reporter.log,
    )
    reporter.emit(verdict)
    reporter.status("succeeded", detail="pre-flight " + ("passed" if verdict.passed else "failed"))
    return 0


def run_standalone(spec_path: str, out: str | None) -> int:
    from .train import train

    spec = json.loads(Path(spec_path).read_text()) if spec_path.endswith(".json") else spec_path
    outcome = train(spec, out_dir=out, progress=True)
    print(json.dumps({"state": outcome.state, "step": outcome.step}))
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    parser = argparse.ArgumentParser(prog="python -m workers.job", description=__doc__)
    parser.add_argument("--spec", help="a spec file; without it the job asks the platform")
    parser.add_argument("--out", help="output directory (with --spec)")
    args = parser.parse_args(argv)
    if args.spec:
        return run_standalone(args.spec, args.out)
    env = os.environ
    missing = [
        name
        for name in ("PADDOCK_PUBLIC_URL", "PADDOCK_RUN_ID", "PADDOCK_BOOTSTRAP_TOKEN")
        if not env.get(name)
    ]
    if missing:
        parser.error(f"give --spec, or set {', '.join(missing)} (the platform does)")
    return run_with_platform(
        env["PADDOCK_PUBLIC_URL"],
        int(env["PADDOCK_RUN_ID"]),
        int(env.get("PADDOCK_DISPATCH", "1")),
        env["PADDOCK_BOOTSTRAP_TOKEN"],
    )


if __name__ == "__main__":
    sys.exit(main())
