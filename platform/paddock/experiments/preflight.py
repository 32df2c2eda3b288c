"""The pre-flight check of an experiment (docs/preflight.md): before its runs train, a short
check of its spec on each of its engines, on the cluster its runs go to.

A launch that asks for one (`preflight: first`, or `only` for the check alone) creates, beside
the experiment's queued runs, one pre-flight run per backend (`Run.purpose = preflight`): a
run like the others for dispatch, bootstrap and ingest, whose job runs `workers.preflight`
instead of training and reports its verdict (a `preflight` ingest event, stored on the run).
Until every pre-flight run has a verdict the experiment is `pending` and dispatch holds its
runs; then it is `passed` (its runs are released) or `failed` (they stay held, the failing
checks in their queue reason, until a member overrides: `preflight_override`). A pre-flight
run that ends without a verdict (its job failed) fails the check."""

from __future__ import annotations

from django.db import transaction

from paddock.core.errors import DomainError, ErrorCode
from paddock.experiments import hooks
from paddock.experiments.models import Experiment, PreflightState, Purpose, Run
from paddock.experiments.models import RunState as S
from paddock.teams.access import Actor
from paddock.teams.models import Role
from paddock.teams.services import audit_record
from workers.events import PreflightEvent

P = PreflightState
MODES = ("off", "first", "only")  # a launch's `preflight`
HELD = {
    P.PENDING: "waiting for the pre-flight check",
    P.FAILED: "held: the pre-flight check failed ({checks}); a member may override it",
}
TERMINAL = (S.SUCCEEDED, S.ABORTED, S.FAILED)


def preflight_spec(spec: dict) -> dict:
    """A pre-flight run's spec: the run's own, out of any pool (its job runs the check alone,
    on the run's cluster and engine)."""
    return {**spec, "resources": {**spec["resources"], "pool": None}}


def preflight_hold(run: Run) -> str | None:
    """Why dispatch must hold this run for its experiment's pre-flight check, or None."""
    if run.purpose != Purpose.TRAIN:
        return None
    state = Experiment.objects.filter(pk=run.experiment_id).values_list("preflight", flat=True)
    state = state.first()
    if state not in HELD:
        return None
    return HELD[state].format(checks=", ".join(_failed_checks(run.experiment_id)) or "no verdict")


def _failed_checks(experiment_id: int) -> list[str]:
    failed: list[str] = []
    for verdict in Run.objects.filter(
        experiment_id=experiment_id, purpose=Purpose.PREFLIGHT
    ).values_list("verdict", flat=True):
        for check in (verdict or {}).get("checks", []):
            if check["status"] == "fail" and check["name"] not in failed:
                failed.append(check["name"])
    return failed


def run_verdict_store(*, run_id: int, verdict: PreflightEvent) -> None:
    """A pre-flight run's job reported its verdict (live/ingest.py, in the batch's
    transaction); the experiment is settled after commit."""
    Run.objects.filter(pk=run_id, purpose=Purpose.PREFLIGHT).update(
        verdict=verdict.model_dump(mode="json")
    )
    transaction.on_commit(lambda: experiment_preflight_settle(run_id=run_id))


def experiment_preflight_settle(*, run_id: int) -> str | None:
    """After a pre-flight run reported or ended: the experiment's state, once every one of its
    pre-flight runs has a verdict or has ended; its runs released when it passed."""
    run = Run.objects.filter(pk=run_id, purpose=Purpose.PREFLIGHT).first()
    if run is None:
        return None
    with transaction.atomic():
        experiment = Experiment.objects.select_for_update().get(pk=run.experiment_id)
        if experiment.preflight != P.PENDING:
            return experiment.preflight
        checks = list(
            Run.objects.filter(experiment=experiment, purpose=Purpose.PREFLIGHT).values_list(
                "verdict", "state"
            )
        )
        if any(v is None and s not in TERMINAL for v, s in checks):
            return experiment.preflight  # one still running
        passed = all(
            v is not None and all(c["status"] != "fail" for c in v["checks"]) for v, _ in checks
        )
        experiment.preflight = P.PASSED if passed else P.FAILED
        experiment.save(update_fields=["preflight"])
        if passed:
            _release(experiment)
        else:
            reason = HELD[P.FAILED].format(checks=", ".join(_failed_checks(experiment.pk)) or
                                           "a pre-flight run ended without a verdict")  # fmt: skip
            held = list(_held(experiment).values_list("id", flat=True))
            Run.objects.filter(pk__in=held).update(queued_reason=reason)
            for run_id in held:  # their viewers see why they wait
                transaction.on_commit(lambda run_id=run_id: hooks.run_reason_changed(run_id))
    return experiment.preflight


def _held(experiment: Experiment):
    return Run.objects.filter(experiment=experiment, purpose=Purpose.TRAIN, state=S.QUEUED)


def _release(experiment: Experiment) -> None:
    for run_id in _held(experiment).values_list("id", flat=True):
        transaction.on_commit(lambda run_id=run_id: hooks.run_enqueued(run_id))


def experiment_preflight_override(*, actor: Actor, experiment: Experiment) -> Experiment:
    """Launch the experiment's runs although its pre-flight check failed (or before it
    finished): audited with the checks that failed."""
    actor.require(experiment.team_id, Role.MEMBER, what="experiment")
    with transaction.atomic():
        experiment = Experiment.objects.select_for_update().get(pk=experiment.pk)
        if experiment.preflight not in (P.PENDING, P.FAILED):
            raise DomainError(
                ErrorCode.INVALID,
                f"the experiment's pre-flight check is {experiment.preflight or 'not asked for'}: "
                "nothing holds its runs",
                field="experiment",
            )
        before = experiment.preflight
        experiment.preflight = P.OVERRIDDEN
        experiment.save(update_fields=["preflight"])
        _release(experiment)
        audit_record(
            actor=actor, team_id=experiment.team_id, action="experiment.preflight_override",
            target_type="experiment", target_id=experiment.pk,
            data={"was": before, "failed": _failed_checks(experiment.pk)},
        )  # fmt: skip
    return experiment


def preflight_refusal(run: Run) -> DomainError | None:
    """What a user's request to start a held run is refused with."""
    reason = preflight_hold(run)
    if reason is None:
        return None
    if Experiment.objects.filter(pk=run.experiment_id, preflight=P.PENDING).exists():
        return DomainError(
            ErrorCode.PREFLIGHT_PENDING, f"run {run.pk}: {reason}", field="experiment"
        )
    return DomainError(ErrorCode.PREFLIGHT_FAILED, f"run {run.pk}: {reason}", field="experiment")


def run_state_changed(run_id: int, state: str) -> None:
    """A pre-flight run that ended without a verdict settles its experiment (failed)."""
    if state in TERMINAL:
        experiment_preflight_settle(run_id=run_id)
