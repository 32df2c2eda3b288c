"""Sweeps as a team's members see them: every query scoped to the caller's teams (another
team's sweep is not found, exactly like one that does not exist)."""

from __future__ import annotations

from django.db.models import Count, Max, Min, OuterRef, Q, QuerySet, Subquery

from paddock.core.errors import not_found
from paddock.experiments.metrics import metric_latest_many
from paddock.experiments.models import MetricPoint
from paddock.teams.access import Actor

from .models import Sweep, SweepMember
from .stopping import best_member

M = SweepMember.State


def _counted(sweeps: QuerySet[Sweep]) -> QuerySet[Sweep]:
    return sweeps.select_related("experiment", "created_by").annotate(
        **{f"n_{state}": Count("members", filter=Q(members__state=state)) for state in M.values}
    )


def sweep_list(*, actor: Actor, team_id: int | None = None) -> QuerySet[Sweep]:
    sweeps = Sweep.objects.filter(team_id__in=actor.team_ids)
    if team_id is not None:
        sweeps = sweeps.filter(team_id=team_id)
    return _counted(sweeps).order_by("-id")


def sweep_get(*, actor: Actor, sweep_id: int) -> Sweep:
    sweep = _counted(Sweep.objects.filter(pk=sweep_id, team_id__in=actor.team_ids)).first()
    if sweep is None:
        raise not_found("sweep")
    return sweep


def sweep_of_run(run_id: int) -> int | None:
    """The id of the unfinished sweep whose member the run is, if any."""
    return (
        SweepMember.objects.filter(run_id=run_id)
        .exclude(sweep__state=Sweep.State.FINISHED)
        .values_list("sweep_id", flat=True)
        .first()
    )


def sweeps_unfinished() -> list[int]:
    return list(Sweep.objects.exclude(state=Sweep.State.FINISHED).values_list("pk", flat=True))


def sweep_members(sweep: Sweep) -> list[dict]:
    """Each member with its run's row (state, step, latest values) and its objective's
    best and last values; `best` marks the member with the best value so far. Three
    queries whatever the count."""
    best = Max("value") if sweep.mode == "max" else Min("value")
    last = MetricPoint.objects.filter(run_id=OuterRef("run_id"), key=sweep.metric).order_by("-step")
    rows = list(
        sweep.members.select_related("run")
        .annotate(last=Subquery(last.values("value")[:1]))
        .order_by("index")
    )
    run_ids = [m.run_id for m in rows if m.run_id]
    bests = dict(
        MetricPoint.objects.filter(run_id__in=run_ids, key=sweep.metric)
        .values("run_id")
        .annotate(best=best)
        .values_list("run_id", "best")
    )
    latest = metric_latest_many(run_ids)
    top = best_member({m.index: bests.get(m.run_id) for m in rows}, sweep.mode)
    return [
        {
            "index": m.index, "settings": m.settings, "state": m.state, "reason": m.reason,
            "stopped_step": m.stopped_step, "config": m.config_id,
            "run": None if m.run is None else {
                "id": m.run.pk, "state": m.run.state, "desired_state": m.run.desired_state,
                "step": m.run.step, "total_steps": m.run.total_steps,
                "queued_reason": m.run.queued_reason, "latest": latest.get(m.run_id, {}),
            },
            "best": bests.get(m.run_id), "last": m.last, "is_best": m.index == top,
        }
        for m in rows
    ]  # fmt: skip
