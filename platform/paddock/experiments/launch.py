"""Launch and clone: one experiment, its launched config version, and for each rollout
backend × seed one queued run whose effective spec is its own child config version."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from paddock.core.errors import DomainError, ErrorCode
from paddock.experiments import hooks
from paddock.experiments.configs import (
    config_version_create,
    rollout_backends,
    spec_apply_edits,
    spec_for_run,
    spec_gpus,
    spec_parse,
)
from paddock.experiments.models import (
    ConfigVersion,
    Experiment,
    ExperimentTag,
    PreflightState,
    Purpose,
    Run,
)
from paddock.experiments.preflight import MODES as PREFLIGHT_MODES
from paddock.experiments.preflight import preflight_spec
from paddock.experiments.selectors import team_usage, user_usage
from paddock.experiments.spec_paths import spec_paths_check
from paddock.experiments.spec_urls import spec_urls_check
from paddock.teams.access import Actor
from paddock.teams.models import Role, Team, TeamQuota
from paddock.teams.services import audit_record, user_quota_lock
from paddock.teams.team_secrets import secrets_missing
from workers.spec import RunSpec

MAX_SEEDS = 16
QUEUED_REASON = "waiting for a cluster"


@dataclass
class PlannedRun:
    backend: str
    seed: int
    spec: RunSpec  # its effective spec, stored as spec.to_dict()
    gpus: float  # what its spec asks for
    least_gpus: float = 0.0  # the least it can count for in the team's GPUs (the launch check's)


@dataclass
class LaunchPlan:
    spec: dict
    runs: list[PlannedRun]
    cluster_id: int | None  # None: dispatch picks


@dataclass
class LaunchResult:
    plan: LaunchPlan | None = None
    experiment: Experiment | None = None
    runs: list[Run] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors


def _check_backends_known(backends: list[str]) -> None:
    known = rollout_backends()
    for backend in backends:
        if backend not in known:
            raise DomainError(
                ErrorCode.INVALID,
                f"unknown rollout backend '{backend}'; one of {known}",
                field="backends",
            )


def _check_quota(*, team: Team, runs: list[PlannedRun], starting: int | None = None) -> None:
    """Refuse what could never start or would overfill the queue; within those bounds,
    runs over the concurrency limits wait in `queued` (dispatch enforces those). `starting`:
    how many of `runs` become runs now (default all; a sweep plans every member and starts
    a few at a time)."""
    quota, _ = TeamQuota.objects.select_for_update().get_or_create(team=team)
    biggest = max(runs, key=lambda r: r.least_gpus, default=None)
    if biggest is not None and biggest.least_gpus > quota.max_gpus + 1e-9:
        counts = (
            f"a pooled run counts for at least {biggest.least_gpus:g} GPUs (its least share "
            f"of its pool's)"
            if biggest.spec.resources.pool
            else f"a run asks for {biggest.least_gpus:g} GPUs"
        )
        raise DomainError(ErrorCode.QUOTA_EXCEEDED,
            f"{counts}; the team may use {quota.max_gpus:g}", field="spec.resources",
        )  # fmt: skip
    if quota.max_concurrent_runs == 0:
        raise DomainError(ErrorCode.QUOTA_EXCEEDED, "the team may not run anything")
    active = team_usage(team_id=team.pk)["active_runs"]
    limit = quota.max_concurrent_runs + quota.max_queued_runs
    count = len(runs) if starting is None else starting
    if active + count > limit:
        raise DomainError(
            ErrorCode.QUOTA_EXCEEDED,
            f"the team has {active} active runs; {count} more would pass its limit of "
            f"{limit} ({quota.max_concurrent_runs} running + {quota.max_queued_runs} queued)",
        )


def _check_user_quota(*, user_id: int, runs: list[PlannedRun], starting: int | None) -> None:
    """The same bounds over all of the user's teams (teams/models.py UserQuota): a user who
    creates teams gets a quota per team, not more of their own."""
    quota = user_quota_lock(user_id=user_id)  # after the team's row: one order, no deadlock
    biggest = max((r.least_gpus for r in runs), default=0.0)
    if biggest > quota.max_gpus + 1e-9:
        raise DomainError(ErrorCode.QUOTA_EXCEEDED,
            f"a run asks for {biggest:g} GPUs; you may use {quota.max_gpus:g} over all your "
            "teams", field="spec.resources",
        )  # fmt: skip
    active = user_usage(user_id=user_id)["active_runs"]
    limit = quota.max_concurrent_runs + quota.max_queued_runs
    count = len(runs) if starting is None else starting
    if active + count > limit:
        raise DomainError(
            ErrorCode.QUOTA_EXCEEDED,
            f"you have {active} active runs over all your teams; {count} more would pass your "
            f"limit of {limit} ({quota.max_concurrent_runs} running + {quota.max_queued_runs} "
            "queued)",
        )


def spec_admit(*, team: Team, spec: RunSpec) -> dict:
    """What a validated spec must pass beyond its schema before a run of it is created (a
    launch's spec, each member of a sweep): its paths inside the allowed roots, its URLs
    inside the egress policy, the secrets it names among its team's. DomainError otherwise;
    returns the spec, normalized."""
    normalized = spec.to_dict()
    spec_paths_check(team_id=team.pk, spec=normalized)
    spec_urls_check(spec=spec)
    missing = secrets_missing(
        team_id=team.pk, names=[(f"spec.{f}", name) for f, name in spec.secret_names()]
    )
    if missing:
        raise DomainError.of_errors(ErrorCode.SECRET_MISSING, missing)
    return normalized


def _plan(
    *, team: Team, spec: Any, backends: list[str] | None, seeds: int, cluster_id: int | None,
    user_id: int | None = None,
) -> LaunchPlan:  # fmt: skip
    parsed = spec_parse(spec=spec)
    normalized = spec_admit(team=team, spec=parsed)
    backends = list(dict.fromkeys(backends or [parsed.rollout.backend]))
    if not 1 <= seeds <= MAX_SEEDS:
        raise DomainError(ErrorCode.INVALID, f"must be between 1 and {MAX_SEEDS}", field="seeds")
    _check_backends_known(backends)
    runs = []
    for backend in backends:
        for i in range(seeds):
            seed = normalized["seed"] + i
            run_spec = spec_for_run(spec=normalized, backend=backend, seed=seed)
            runs.append(PlannedRun(backend, seed, run_spec, spec_gpus(run_spec)))
    runs_check(team=team, runs=runs, cluster_id=cluster_id, user_id=user_id)
    return LaunchPlan(spec=normalized, runs=runs, cluster_id=cluster_id)


def runs_check(
    *, team: Team, runs: list[PlannedRun], cluster_id: int | None, starting: int | None = None,
    user_id: int | None = None,
) -> None:  # fmt: skip
    """What every planned run must pass before it is created: its backend and resources
    against the clusters the team may use (the one named by `cluster_id`, if any), the
    team's quota and the launching user's (`starting`: how many of them start now, default
    all). Sets each run's `least_gpus`. Raises DomainError."""
    # the clusters app (above this one) checks the backends and resources against the
    # clusters the team may use, and the target cluster if one was named
    least = hooks.launch_check(
        team_id=team.pk, cluster_id=cluster_id, runs=[(r.backend, r.spec) for r in runs]
    )
    for run, gpus in zip(runs, least, strict=True):
        run.least_gpus = gpus
    _check_quota(team=team, runs=runs, starting=starting)
    if user_id is not None:
        _check_user_quota(user_id=user_id, runs=runs, starting=starting)


def experiment_create(
    *, team: Team, name: str, description: str, tags, spec: dict,
    parent: ConfigVersion | None, cloned_from: Experiment | None, created_by,
) -> Experiment:  # fmt: skip
    """An experiment with its launched config version (`spec`, normalized) and tags; its
    runs come after (`run_create`)."""
    launched = config_version_create(
        team_id=team.pk, spec=spec, parent=parent, created_by=created_by
    )
    experiment = Experiment.objects.create(
        team=team, name=name, description=description, config=launched,
        cloned_from=cloned_from, created_by=created_by,
    )  # fmt: skip
    ExperimentTag.objects.bulk_create(
        ExperimentTag(experiment=experiment, name=t) for t in dict.fromkeys(tags)
    )
    return experiment


def run_create(
    *, experiment: Experiment, config: ConfigVersion, planned: PlannedRun,
    cluster_id: int | None, created_by, purpose: str = Purpose.TRAIN,
) -> Run:  # fmt: skip
    """A queued run of `experiment` with `config` (its effective spec, `planned.spec`
    stored); after commit `hooks.run_enqueued` dispatches it. A pre-flight run
    (experiments/preflight.py) counts no steps: its job checks the spec."""
    run = Run.objects.create(
        purpose=purpose,
        experiment=experiment,
        team_id=experiment.team_id,
        config=config,
        backend=planned.backend,
        seed=planned.seed,
        gpus=planned.gpus,
        created_by=created_by,
        cluster_id=cluster_id,
        max_attempts=1 if purpose == Purpose.PREFLIGHT else planned.spec.resources.max_attempts,
        total_steps=0 if purpose == Purpose.PREFLIGHT else planned.spec.train.steps,
        queued_reason=QUEUED_REASON,
    )
    transaction.on_commit(lambda run_id=run.pk: hooks.run_enqueued(run_id))
    return run


def experiment_launch(
    *,
    actor: Actor,
    team: Team,
    name: str,
    spec: Any,
    backends: list[str] | None = None,
    seeds: int = 1,
    cluster_id: int | None = None,
    description: str = "",
    tags: list[str] | tuple[str, ...] = (),
    validate_only: bool = False,
    parent: ConfigVersion | None = None,
    cloned_from: Experiment | None = None,
    preflight: str = "off",
) -> LaunchResult:
    """Check everything a launch needs (spec, backends and resources against the clusters,
    quota); with `validate_only`, return the errors and create nothing. Otherwise create the
    experiment, its config versions and queued runs, audit it, and after commit call
    `hooks.run_enqueued` per run. Raises DomainError when invalid (not validate_only).
    `preflight`: `first` adds a pre-flight run per backend, which the runs wait for
    (experiments/preflight.py); `only` launches the pre-flight runs alone."""
    if preflight not in PREFLIGHT_MODES:
        raise DomainError(ErrorCode.INVALID, f"must be one of {', '.join(PREFLIGHT_MODES)}",
                          field="preflight")  # fmt: skip
    actor.require(team.pk, Role.MEMBER, what="team")
    with transaction.atomic():
        try:
            plan = _plan(
                team=team, spec=spec, backends=backends, seeds=seeds, cluster_id=cluster_id,
                user_id=actor.user.pk,
            )  # fmt: skip
        except DomainError as exc:
            if not validate_only:
                raise
            errors = exc.errors or [{"field": exc.field or "", "message": exc.message}]
            return LaunchResult(errors=[{**e, "code": exc.code} for e in errors])
        if validate_only:
            return LaunchResult(plan=plan)

        user = actor.user
        experiment = experiment_create(
            team=team, name=name, description=description, tags=tags, spec=plan.spec,
            parent=parent, cloned_from=cloned_from, created_by=user,
        )  # fmt: skip
        runs = []
        if preflight != "off":
            experiment.preflight = PreflightState.PENDING
            experiment.save(update_fields=["preflight"])
            runs += _preflight_runs(experiment, plan, user)
        for planned in plan.runs if preflight != "only" else []:
            config = config_version_create(
                team_id=team.pk, spec=planned.spec.to_dict(), parent=experiment.config,
                created_by=user,
            )  # fmt: skip
            runs.append(
                run_create(
                    experiment=experiment,
                    config=config,
                    planned=planned,
                    cluster_id=plan.cluster_id,
                    created_by=user,
                )
            )
        launched = experiment.config
        audit_record(
            actor=actor, team_id=team.pk,
            action="experiment.clone" if cloned_from else "experiment.launch",
            target_type="experiment", target_id=experiment.pk,
            data={
                "name": name, "config": launched.pk, "config_hash": launched.hash,
                "runs": [r.pk for r in runs], "cloned_from": cloned_from and cloned_from.pk,
                **({"preflight": preflight} if preflight != "off" else {}),
            },
        )  # fmt: skip
    return LaunchResult(plan=plan, experiment=experiment, runs=runs)


def _preflight_runs(experiment: Experiment, plan: LaunchPlan, user) -> list[Run]:
    """One pre-flight run per backend: the first seed's effective spec, out of any pool."""
    firsts: dict[str, PlannedRun] = {}
    for planned in plan.runs:
        firsts.setdefault(planned.backend, planned)
    runs = []
    for planned in firsts.values():
        config = config_version_create(
            team_id=experiment.team_id, spec=preflight_spec(planned.spec.to_dict()),
            parent=experiment.config, created_by=user,
        )  # fmt: skip
        runs.append(run_create(experiment=experiment, config=config, planned=planned,
                               cluster_id=plan.cluster_id, created_by=user,
                               purpose=Purpose.PREFLIGHT))  # fmt: skip
    return runs


def experiment_clone(
    *,
    actor: Actor,
    experiment: Experiment,
    edits: dict[str, Any] | None = None,
    config: ConfigVersion | None = None,
    name: str = "",
    description: str | None = None,
    tags: list[str] | None = None,
    backends: list[str] | None = None,
    seeds: int | None = None,
    cluster_id: int | None = None,
    validate_only: bool = False,
    preflight: str = "off",
) -> LaunchResult:
    """Launch a new experiment from `config` (default: the experiment's launched config)
    with `edits` ({"algorithm.kl_coef": 0.05}) applied. Backends and the number of seeds
    default to those of the source's runs. The new launched version's parent is `config`."""
    base = config or experiment.config
    if base.team_id != experiment.team_id:
        raise DomainError(ErrorCode.INVALID, "the config belongs to another team", field="config")
    source_runs = list(
        experiment.runs.filter(purpose=Purpose.TRAIN).order_by("id").values_list("backend", "seed")
    )
    if backends is None and source_runs:
        backends = list(dict.fromkeys(b for b, _ in source_runs))
    if seeds is None:
        seeds = max(1, len({s for _, s in source_runs}))
    spec = spec_apply_edits(spec=base.spec, edits=edits or {})
    return experiment_launch(
        actor=actor, team=experiment.team, name=name or f"{experiment.name} (clone)", spec=spec,
        backends=backends, seeds=seeds, cluster_id=cluster_id,
        description=experiment.description if description is None else description,
        tags=[t.name for t in experiment.tags.all()] if tags is None else tags,
        validate_only=validate_only, parent=base, cloned_from=experiment, preflight=preflight,
    )  # fmt: skip


@transaction.atomic
def experiment_update(
    *,
    actor: Actor,
    experiment: Experiment,
    name: str | None = None,
    description: str | None = None,
    tags: list[str] | None = None,
) -> Experiment:
    """Rename, describe or retag; the config and the runs never change."""
    actor.require(experiment.team_id, Role.MEMBER, what="experiment")
    changes: dict[str, Any] = {}
    if name is not None and name != experiment.name:
        changes["name"] = [experiment.name, name]
        experiment.name = name
    if description is not None and description != experiment.description:
        changes["description"] = True
        experiment.description = description
    experiment.save(update_fields=["name", "description"])
    if tags is not None:
        old = sorted(t.name for t in experiment.tags.all())
        new = sorted(dict.fromkeys(tags))
        if old != new:
            changes["tags"] = [old, new]
            experiment.tags.all().delete()
            ExperimentTag.objects.bulk_create(
                ExperimentTag(experiment=experiment, name=t) for t in new
            )
    audit_record(
        actor=actor, team_id=experiment.team_id, action="experiment.update",
        target_type="experiment", target_id=experiment.pk, data=changes,
    )  # fmt: skip
    return experiment
