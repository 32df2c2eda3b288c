"""Readers of the experiments app, each scoped to the actor's teams (another team's object
is not found), each shaped for its list so that a page costs a fixed number of queries."""

from __future__ import annotations

from django.db import connection
from django.db.models import Count, Max, Prefetch, Q, QuerySet, Sum

from paddock.core.errors import not_found
from paddock.core.fixed_sql import FixedStatement
from paddock.experiments import hooks
from paddock.experiments.models import (
    Checkpoint,
    ConfigVersion,
    Dataset,
    Experiment,
    ExperimentTag,
    Run,
    RunEvent,
    SampleSet,
)
from paddock.experiments.states import ACTIVE, HOLDING
from paddock.teams.access import Actor
from paddock.teams.models import Role
from workers import names

_TAGS = Prefetch("tags", queryset=ExperimentTag.objects.order_by("name"))


def experiment_list(
    *,
    actor: Actor,
    team_id: int | None = None,
    tag: str = "",
    creator: str = "",
    search: str = "",
) -> QuerySet[Experiment]:
    experiments = (
        Experiment.objects.filter(team_id__in=actor.team_ids)
        .select_related("created_by", "team")
        .prefetch_related(_TAGS)
        .annotate(
            run_count=Count("runs", distinct=True),
            active_run_count=Count(
                "runs",
                filter=~Q(runs__state__in=names.TERMINAL_RUN_STATES),
                distinct=True,
            ),
        )
    )
    if team_id is not None:
        experiments = experiments.filter(team_id=team_id)
    if tag:
        experiments = experiments.filter(
            pk__in=ExperimentTag.objects.filter(name=tag).values("experiment")
        )
    if creator:
        experiments = experiments.filter(created_by__username=creator)
    if search:
        experiments = experiments.filter(name__icontains=search)
    return experiments


def experiment_tag_names(experiment_ids: list[int]) -> dict[int, list[str]]:
    """Each experiment's tag names, by name (as experiment_list's prefetch has them)."""
    names: dict[int, list[str]] = {}
    rows = ExperimentTag.objects.filter(experiment_id__in=experiment_ids).order_by("name")
    for experiment_id, name in rows.values_list("experiment_id", "name"):
        names.setdefault(experiment_id, []).append(name)
    return names


def experiment_get(*, actor: Actor, experiment_id: int) -> Experiment:
    experiment = experiment_list(actor=actor).filter(pk=experiment_id).first()
    if experiment is None:
        raise not_found("experiment")
    return experiment


def run_list(
    *,
    actor: Actor,
    team_id: int | None = None,
    experiment_id: int | None = None,
    states: list[str] | None = None,
    backend: str = "",
    tag: str = "",
    creator: str = "",
) -> QuerySet[Run]:
    """Runs of the actor's teams (their last metric values: metrics.metric_latest_many)."""
    runs = Run.objects.filter(team_id__in=actor.team_ids).select_related(
        "experiment", "created_by", "cluster"
    )
    if team_id is not None:
        runs = runs.filter(team_id=team_id)
    if experiment_id is not None:
        runs = runs.filter(experiment_id=experiment_id)
    if states:
        runs = runs.filter(state__in=states)
    if backend:
        runs = runs.filter(backend=backend)
    if tag:
        runs = runs.filter(
            experiment_id__in=ExperimentTag.objects.filter(name=tag).values("experiment")
        )
    if creator:
        runs = runs.filter(created_by__username=creator)
    return runs


def _run_row_statement(columns: tuple[str, ...]) -> FixedStatement:
    """`run_list(actor).filter(pk=…).values(*columns).first()` as a statement of constant
    text (core/fixed_sql.py), its shape the number of the actor's teams: a run detail reads
    it on every request. A column is a field of the run or `relation__field` (the relation
    joined as the ORM joins it for values(): LEFT OUTER when it may be null)."""
    quote = connection.ops.quote_name
    fields, selects, joins = [], [], {}
    for name in columns:
        first, _, rest = name.partition("__")
        field = Run._meta.get_field(first)
        if not rest:
            fields.append(field)
            selects.append(f"r.{quote(field.column)}")
            continue
        related = field.related_model._meta
        alias = f"j_{first}"
        kind = "LEFT OUTER JOIN" if field.null else "INNER JOIN"
        joins[alias] = (
            f" {kind} {quote(related.db_table)} {alias}"
            f" ON {alias}.{quote(related.pk.column)} = r.{quote(field.column)}"
        )
        fields.append(related.get_field(rest))
        selects.append(f"{alias}.{quote(related.get_field(rest).column)}")

    def build(teams: int) -> str:
        return (
            f"SELECT {', '.join(selects)} FROM {quote(Run._meta.db_table)} r"
            f"{''.join(joins.values())}"
            f" WHERE r.{quote('team_id')} IN ({', '.join(['%s'] * teams)})"
            f" AND r.{quote('id')} = %s LIMIT 1"
        )

    return FixedStatement(build, lambda: fields)


_RUN_ROWS: dict[tuple[str, ...], FixedStatement] = {}


def run_row(*, actor: Actor, run_id: int, columns: tuple[str, ...]) -> dict | None:
    """The run's `columns` as `run_list(...).values(*columns)` gives them, if the actor may
    read it (the same team scope), else None."""
    team_ids = list(actor.team_ids)
    if not team_ids:
        return None
    statement = _RUN_ROWS.get(columns) or _RUN_ROWS.setdefault(columns, _run_row_statement(columns))
    values = statement.fetch_one([*team_ids, run_id], shape=len(team_ids))
    return None if values is None else dict(zip(columns, values, strict=True))


def run_get(*, actor: Actor, run_id: int) -> Run:
    run = run_list(actor=actor).filter(pk=run_id).first()
    if run is None:
        raise not_found("run")
    return run


def run_id_visible(*, actor: Actor, run_id: int) -> int:
    """`run_id` when the actor may read that run, else not found: run_get's check without
    reading the run (the metrics endpoint needs only its id)."""
    if not Run.objects.filter(pk=run_id, team_id__in=actor.team_ids).exists():
        raise not_found("run")
    return run_id


def experiment_run_ids(*, actor: Actor, experiment_id: int) -> list[int]:
    """The ids of an experiment's runs, oldest first (not found: another team's or none)."""
    if not Experiment.objects.filter(pk=experiment_id, team_id__in=actor.team_ids).exists():
        raise not_found("experiment")
    return list(
        Run.objects.filter(experiment_id=experiment_id).order_by("id").values_list("id", flat=True)
    )


def config_get(*, actor: Actor, config_id: int) -> ConfigVersion:
    config = ConfigVersion.objects.filter(pk=config_id, team_id__in=actor.team_ids).first()
    if config is None:
        raise not_found("config version")
    return config


def checkpoint_list(*, actor: Actor, run: Run) -> QuerySet[Checkpoint]:
    actor.require(run.team_id, Role.VIEWER, what="run")
    return run.checkpoints.order_by("step")


def checkpoint_get(*, actor: Actor, run_id: int, checkpoint_id: int) -> Checkpoint:
    checkpoint = (
        Checkpoint.objects.filter(pk=checkpoint_id, run_id=run_id, run__team_id__in=actor.team_ids)
        .select_related("run")
        .first()
    )
    if checkpoint is None:
        raise not_found("checkpoint")
    return checkpoint


def run_event_list(
    *,
    actor: Actor,
    run: Run,
    after_id: int = 0,
    before_id: int | None = None,
    kind: str = "",
    limit: int = 200,
) -> list[RunEvent]:
    """Events of a run after event `after_id`, oldest first: `runs logs --follow` polls
    with the id of the last one it printed. With `before_id`, the events before it (and
    still after `after_id`), newest first: a log tail scrolling back."""
    actor.require(run.team_id, Role.VIEWER, what="run")
    events = run.events.filter(id__gt=after_id)
    if kind:
        events = events.filter(kind=kind)
    if before_id is not None:
        return list(events.filter(id__lt=before_id).order_by("-id")[:limit])
    return list(events.order_by("id")[:limit])


def sample_set_list(
    *,
    actor: Actor,
    run: Run,
    step: int | None = None,
    before_step: int | None = None,
    limit: int = 20,
) -> list[SampleSet]:
    """A run's sample sets, newest step first, one per step: a step reported again (by a
    later dispatch, after a resume) shows its latest set, as its metric points do."""
    actor.require(run.team_id, Role.VIEWER, what="run")
    return sample_sets_newest(run_id=run.pk, step=step, before_step=before_step, limit=limit)


def sample_sets_newest(
    *, run_id: int, step: int | None = None, before_step: int | None = None, limit: int = 20
) -> list[SampleSet]:
    """`sample_set_list` without the access check, for the live snapshot."""
    sets = SampleSet.objects.filter(run_id=run_id)
    if step is not None:
        sets = sets.filter(step=step)
    if before_step is not None:
        sets = sets.filter(step__lt=before_step)
    newest = sets.values("step").annotate(newest=Max("id")).values("newest")
    return list(SampleSet.objects.filter(id__in=newest).order_by("-step")[:limit])


def team_usage(*, team_id: int) -> dict:
    """What the team holds now: active runs (any non-terminal state), runs holding or
    about to hold a job, and the GPUs those count for: what a run of its own asks for, and
    for a pooled run its share of its pool's GPUs (docs/pools.md, "Quotas"; the clusters
    app provides the correction through hooks.py)."""
    row = Run.objects.filter(team_id=team_id, state__in=ACTIVE).aggregate(
        active=Count("id"),
        holding=Count("id", filter=Q(state__in=HOLDING)),
        gpus=Sum("gpus", filter=Q(state__in=HOLDING)),
    )
    gpus = (row["gpus"] or 0.0) + hooks.pooled_gpus_correction(team_id=team_id)
    return {
        "active_runs": row["active"],
        "running_runs": row["holding"],
        "gpus_in_use": max(0.0, round(gpus, 9)),  # the sum less the asks: no -1e-17
    }


def dataset_list(*, actor: Actor, team_id: int | None = None) -> QuerySet[Dataset]:
    datasets = Dataset.objects.filter(team_id__in=actor.team_ids).select_related("created_by")
    if team_id is not None:
        datasets = datasets.filter(team_id=team_id)
    return datasets.order_by("-id")
