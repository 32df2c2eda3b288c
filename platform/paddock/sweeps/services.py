"""Creating and stopping a sweep (the writers; `controller.sweep_advance` moves it on)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from paddock.core.errors import DomainError, ErrorCode
from paddock.experiments.configs import config_version_create
from paddock.experiments.launch import experiment_create
from paddock.teams.access import Actor
from paddock.teams.models import Role, Team
from paddock.teams.services import audit_record

from .controller import sweep_advance
from .models import Sweep, SweepMember
from .plan import SweepPlan, own_pool_name, sweep_plan


@dataclass
class SweepResult:
    plan: SweepPlan | None = None
    sweep: Sweep | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors


def sweep_create(
    *,
    actor: Actor,
    team: Team,
    name: str,
    spec: Any,
    method: str,
    params: Any,
    description: str = "",
    tags: list[str] | tuple[str, ...] = (),
    budget_members: int | None = None,
    budget_gpu_hours: float | None = None,
    parallel: int | None = None,
    metric: str = "reward/mean",
    mode: str = "max",
    early_stopping: Any = None,
    seed: int | None = None,
    cluster_id: int | None = None,
    validate_only: bool = False,
) -> SweepResult:
    """Check the sweep and every member (sweep_plan); with `validate_only` return what was
    found and create nothing. Otherwise create its experiment (the base spec as launched
    config), the sweep, every member with its effective spec as a config version, audit it,
    and launch the first `parallel` members. Raises DomainError when invalid."""
    actor.require(team.pk, Role.MEMBER, what="team")
    with transaction.atomic():
        try:
            plan = sweep_plan(
                team=team, spec=spec, method=method, params=params,
                budget_members=budget_members, budget_gpu_hours=budget_gpu_hours,
                parallel=parallel, metric=metric, mode=mode, early_stopping=early_stopping,
                seed=seed, cluster_id=cluster_id, user_id=actor.user.pk,
            )  # fmt: skip
        except DomainError as exc:
            if not validate_only:
                raise
            errors = exc.errors or [{"field": exc.field or "", "message": exc.message}]
            # a member's problem keeps its own code (spec_invalid, path_not_allowed, …)
            return SweepResult(errors=[{"code": str(exc.code), **e} for e in errors])
        if validate_only:
            return SweepResult(plan=plan)
        user = actor.user
        experiment = experiment_create(
            team=team, name=name, description=description, tags=tags, spec=plan.spec,
            parent=None, cloned_from=None, created_by=user,
        )  # fmt: skip
        sweep = Sweep.objects.create(
            team=team, experiment=experiment, method=plan.method,
            params={p.key: p.describe() for p in plan.params}, seed=plan.seed,
            metric=plan.metric, mode=plan.mode,
            stopping=plan.stopping.describe() if plan.stopping else None,
            budget_members=plan.budget_members, budget_gpu_hours=plan.budget_gpu_hours,
            parallel=plan.parallel, cluster_id=plan.cluster_id, created_by=user,
        )  # fmt: skip
        pool = own_pool_name(sweep.pk) if plan.own_pool else None
        for member in plan.members:
            stored = member.run.spec.to_dict()
            if pool is not None:
                stored["resources"]["pool"] = pool
            config = config_version_create(
                team_id=team.pk, spec=stored, parent=experiment.config, created_by=user
            )
            SweepMember.objects.create(
                sweep=sweep, index=member.index, settings=member.settings, config=config
            )
        audit_record(
            actor=actor, team_id=team.pk, action="sweep.create", target_type="sweep",
            target_id=sweep.pk,
            data={"name": name, "experiment": experiment.pk, "method": plan.method,
                  "members": plan.budget_members, "parallel": plan.parallel,
                  "pool": pool or plan.spec["resources"]["pool"]},
        )  # fmt: skip
        sweep = sweep_advance(sweep_id=sweep.pk)
    return SweepResult(plan=plan, sweep=sweep)


def sweep_stop(*, actor: Actor, sweep: Sweep) -> Sweep:
    """Stop a sweep: no member starts any more, and each member's run is stopped as the
    rule stops one (paused, so it checkpoints, then aborted). Asked twice: nothing new."""
    actor.require(sweep.team_id, Role.MEMBER, what="sweep")
    with transaction.atomic():
        current = Sweep.objects.select_for_update().get(pk=sweep.pk)
        if current.state == Sweep.State.FINISHED:
            raise DomainError(ErrorCode.SWEEP_FINISHED, f"sweep {sweep.pk} has finished")
        if current.state == Sweep.State.RUNNING:
            who = getattr(actor.user, "username", "") or "a member"
            current.state, current.end_reason = Sweep.State.STOPPING, f"stopped by {who}"
            current.save(update_fields=["state", "end_reason"])
            audit_record(actor=actor, team_id=sweep.team_id, action="sweep.stop",
                         target_type="sweep", target_id=sweep.pk)  # fmt: skip
        return sweep_advance(sweep_id=sweep.pk)
