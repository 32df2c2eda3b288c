"""A sweep's one step forward (`sweep_advance`): what its members' runs did since the last
step, in one transaction with the sweep's row locked (two advances of one sweep take turns).

In order: the GPU-hours its runs counted for; members whose run ended; the GPU-hour
budget; the early-stopping rule over the members' metric tables (stopping.py); members being
stopped moved on through the run control path (pause, which checkpoints, then abort once
paused, or without the checkpoint when the pause does not come within the abort grace);
pending members launched into free slots (as a launch is checked: backends,
placement, quota; a refusal leaves the member pending with the reason); the sweep finished
when no member runs or waits. Called after each state change of a member's run
(subscribers.py), every few seconds by Celery beat (tasks.py), and inline by a creation or
a stop."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from paddock.clusters.pools import gpus_now
from paddock.core.errors import DomainError
from paddock.experiments.configs import spec_gpus
from paddock.experiments.control import run_request_abort, run_request_pause
from paddock.experiments.launch import PlannedRun, run_create, runs_check
from paddock.experiments.models import MetricPoint
from paddock.experiments.models import RunState as S
from paddock.experiments.states import TERMINAL
from paddock.teams.services import audit_record

from .models import Sweep, SweepMember
from .stopping import StoppingRule, stop_decisions

log = logging.getLogger(__name__)
M = SweepMember.State
HOLDING_SLOT = (M.ACTIVE, M.STOPPING)  # members whose run counts against `parallel`
NOT_STARTED = (S.QUEUED, S.DISPATCHING, S.STARTING)  # nothing trained yet to checkpoint


def _audit(sweep: Sweep, action: str, **data) -> None:
    audit_record(actor=None, team_id=sweep.team_id, action=f"sweep.{action}",
                 target_type="sweep", target_id=sweep.pk, data=data)  # fmt: skip


def _save(member: SweepMember, *fields: str) -> None:
    member.save(update_fields=[*fields, "updated_at"])


def _account(sweep: Sweep, members: list[SweepMember], now) -> None:
    """Charge the GPUs held at the last advance for the time since; note what they hold now."""
    if sweep.accounted_at is not None:
        sweep.gpu_seconds += sweep.gpus_now * max(0.0, (now - sweep.accounted_at).total_seconds())
    held = [m.run_id for m in members if m.state in HOLDING_SLOT and m.run_id]
    sweep.gpus_now = sum(gpus_now(held).values()) if held else 0.0
    sweep.accounted_at = now


def _settle(sweep: Sweep, members: list[SweepMember]) -> None:
    """Members whose run ended leave their slot: stopped (aborted after the rule asked) or
    done (it ended on its own, or a user ended it)."""
    for m in members:
        if m.state not in HOLDING_SLOT:
            continue
        if m.run is None:
            m.state, m.reason = M.DONE, "its run was deleted"
        elif m.run.state not in TERMINAL:
            continue
        elif m.state == M.STOPPING and m.run.state == S.ABORTED:
            m.state = M.STOPPED
        else:
            if m.state == M.STOPPING:
                m.reason = f"its run {m.run.state} before the stop took effect"
            m.state = M.DONE
        _save(m, "state", "reason")


def _budget_spent(sweep: Sweep) -> str | None:
    budget = sweep.budget_gpu_hours
    if budget is None or sweep.gpu_seconds / 3600 < budget:
        return None
    return f"its budget of {budget:g} GPU-hours is spent ({sweep.gpu_seconds / 3600:.3g})"


def _rule(sweep: Sweep) -> StoppingRule | None:
    raw = sweep.stopping
    return None if not raw else StoppingRule(**raw)


def _apply_rule(sweep: Sweep, members: list[SweepMember]) -> None:
    """Ask the rule about each member training a step it has not judged yet."""
    rule = _rule(sweep)
    if rule is None:
        return
    candidates = [m for m in members if m.state == M.ACTIVE and m.run is not None
                  and m.run.state == S.RUNNING and m.run.step > m.evaluated_step]  # fmt: skip
    if not candidates:
        return
    by_run = {m.run_id: m for m in members if m.run_id}
    tables: dict[int, list[tuple[int, float]]] = {run_id: [] for run_id in by_run}
    points = MetricPoint.objects.filter(run_id__in=list(by_run), key=sweep.metric)
    for run_id, step, value in points.order_by("run_id", "step").values_list(
        "run_id", "step", "value"
    ):
        tables[run_id].append((step, value))
    decisions = stop_decisions(rule, mode=sweep.mode, tables=tables,  # type: ignore[arg-type]
                               candidates=[m.run_id for m in candidates])  # fmt: skip
    for m in candidates:
        m.evaluated_step = m.run.step
        _save(m, "evaluated_step")
        reason = decisions.get(m.run_id)
        if reason is not None:
            _stop(sweep, m, f"{sweep.metric}: {reason}")


def _stop(sweep: Sweep, m: SweepMember, reason: str) -> None:
    m.state, m.reason = M.STOPPING, reason[:300]
    m.stopped_step = m.run.step if m.run else None
    _save(m, "state", "reason", "stopped_step")
    _audit(sweep, "member_stop", member=m.index, run=m.run_id, reason=m.reason)


def _stop_all(sweep: Sweep, members: list[SweepMember]) -> None:
    for m in members:
        if m.state == M.PENDING:
            m.state, m.reason = M.SKIPPED, sweep.end_reason[:300]
            _save(m, "state", "reason")
        elif m.state == M.ACTIVE:
            _stop(sweep, m, sweep.end_reason)


def pause_grace_s() -> float:
    """How long a member's run may take to pause before the sweep aborts it without the
    checkpoint (read per call: tests shorten it): the abort grace reconcile gives a job."""
    return float(settings.PADDOCK_ABORT_GRACE_S)


def _move_stopping(members: list[SweepMember], now) -> None:
    """Members being stopped, one control step each: a run that has trained is paused
    first (the pause writes a checkpoint) and aborted once paused; one that has not
    trained yet is aborted at once; one whose pause has not come within the grace (a job
    that stopped answering) is aborted without it, so its slot is not held for ever
    (reconcile then ends a job that does not answer the abort either)."""
    for m in members:
        run = m.run
        if m.state != M.STOPPING or run is None or run.state in TERMINAL:
            continue
        if run.desired_state == "aborted":
            continue  # asked already
        waited = (now - run.state_since).total_seconds() if run.state_since else 0.0
        try:
            if run.state in NOT_STARTED or run.state == S.PAUSED:
                run_request_abort(actor=None, run=run, why=f"sweep: {m.reason}")
            elif run.state == S.RUNNING and run.desired_state != "paused":
                run_request_pause(actor=None, run=run, why=f"sweep: {m.reason}")
            elif run.state == S.PAUSING and waited > pause_grace_s():
                why = f"sweep: {m.reason}; the pause did not come within {pause_grace_s():g} s"
                run_request_abort(actor=None, run=run, why=why)
            # pausing (within the grace), resuming, aborting: the next advance goes on
        except DomainError as exc:  # it finished meanwhile: the next advance settles it
            log.info("sweep member %s of run %s: %s", m.index, run.pk, exc.message)


def _launch(sweep: Sweep, members: list[SweepMember]) -> None:
    """Pending members into free slots, in order, each checked as a launch is; the first
    refusal (the team's quota, a cluster gone) leaves it pending with the reason."""
    free = sweep.parallel - sum(m.state in HOLDING_SLOT for m in members)
    for m in members:
        if free <= 0:
            return
        if m.state != M.PENDING:
            continue
        spec = m.config.run_spec
        planned = PlannedRun(spec.rollout.backend, spec.seed, spec, spec_gpus(spec))
        try:
            runs_check(team=sweep.team, runs=[planned], cluster_id=sweep.cluster_id, starting=1,
                       user_id=sweep.created_by_id)  # fmt: skip
        except DomainError as exc:
            if m.reason != exc.message[:300]:
                m.reason = exc.message[:300]
                _save(m, "reason")
            return
        m.run = run_create(experiment=sweep.experiment, config=m.config, planned=planned,
                           cluster_id=sweep.cluster_id, created_by=sweep.created_by)  # fmt: skip
        m.state, m.reason = M.ACTIVE, ""
        _save(m, "run", "state", "reason")
        _audit(sweep, "member_launch", member=m.index, run=m.run.pk, settings=m.settings)
        free -= 1


def sweep_advance(*, sweep_id: int) -> Sweep | None:
    """One step of the sweep (the module's docstring); a finished or deleted sweep is left
    as it is. Returns the sweep as it stands after."""
    with transaction.atomic():
        sweep = (
            Sweep.objects.select_for_update(of=("self",))
            .select_related("team", "experiment", "created_by")
            .filter(pk=sweep_id)
            .first()
        )
        if sweep is None or sweep.state == Sweep.State.FINISHED:
            return sweep
        members = list(sweep.members.select_related("run", "config").order_by("index"))
        now = timezone.now()
        _account(sweep, members, now)
        _settle(sweep, members)
        spent = _budget_spent(sweep) if sweep.state == Sweep.State.RUNNING else None
        if spent is not None:
            sweep.state, sweep.end_reason = Sweep.State.STOPPING, spent
            _audit(sweep, "budget_spent", gpu_hours=round(sweep.gpu_seconds / 3600, 6))
        if sweep.state == Sweep.State.RUNNING:
            _apply_rule(sweep, members)
        if sweep.state == Sweep.State.STOPPING:
            _stop_all(sweep, members)
        _move_stopping(members, now)
        if sweep.state == Sweep.State.RUNNING:
            _launch(sweep, members)
        if not any(m.state in (M.PENDING, *HOLDING_SLOT) for m in members):
            sweep.state, sweep.finished_at = Sweep.State.FINISHED, now
            sweep.end_reason = sweep.end_reason or "every member ran"
            counts = {s: sum(m.state == s for m in members) for s in M.values}
            _audit(sweep, "finish", reason=sweep.end_reason,
                   members={k: v for k, v in counts.items() if v})  # fmt: skip
        sweep.save()
    return sweep
