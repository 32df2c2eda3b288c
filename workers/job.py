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
from pathlib import Path

from .bootstrap import Assignment, bootstrap
from .loop.control import StaticControl
from .preflight import preflight
from .report import Reporter, ReporterConfig
from .train import train

log = logging.getLogger("workers.job")


def run_with_platform(url: str, run_id: int, dispatch: int, secret: str) -> int:
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
