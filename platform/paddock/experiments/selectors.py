"""Readers of the experiments app, each scoped to the actor's teams (another team's object
is not found), each shaped for its list so that a page costs a fixed number of queries.

The reads every request makes are compiled statements of these selectors' own querysets
(core/fixed_sql.py's QueryTemplate: compiled once per shape, such as the number of the
caller's teams, then run with the caller's values): `run_list_rows`, `run_row`,
`run_id_visible`, `experiment_list_rows`, `experiment_tag_names`. The ORM built the same
SQL anew on every call, about 2 ms of CPU a run list page (bench/load/server_cost.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import Count, Max, Prefetch, Q, QuerySet, Sum

from paddock.core.errors import not_found
from paddock.core.fixed_sql import QueryTemplate, TemplatePage
from paddock.experiments import hooks
from paddock.experiments.configs import spec_diff, spec_parse
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


_TAG_NAMES = QueryTemplate(
    lambda _shape, ids: (
        ExperimentTag.objects.filter(experiment_id__in=ids)
        .order_by("name")
        .values("experiment_id", "name")
    )
)


def experiment_tag_names(experiment_ids: list[int]) -> dict[int, list[str]]:
    """Each experiment's tag names, by name (as experiment_list's prefetch has them)."""
    ids = list(dict.fromkeys(experiment_ids))
    names: dict[int, list[str]] = {}
    for row in _TAG_NAMES.rows(ids) if ids else ():
        names.setdefault(row["experiment_id"], []).append(row["name"])
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


# the filters a compiled page takes: each an id, compared for equality
ID_FILTERS = ("team_id", "experiment_id")
Select = Callable[[Actor, dict], QuerySet]


def _pages(select: Select) -> QueryTemplate:
    """`select(actor, filters).values(*columns)` a page at a time, as TemplatePage asks for
    one: its shape names the number of teams, the filters and the columns, then the page's
    ordering, cursor lookup and slice; its values are the teams, the filters' values and
    the cursor's position."""

    def build(shape: tuple, values: list[int]) -> QuerySet:
        (teams, names, columns), ordering, lookup, start, stop = shape
        filters = dict(zip(names, values[teams : teams + len(names)], strict=True))
        rows = select(Actor.of_teams(values[:teams]), filters).values(*columns).order_by(*ordering)
        if lookup is not None:
            rows = rows.filter(**{lookup: values[-1]})
        return rows[start:stop]

    return QueryTemplate(build)


def _list_rows(
    pages: QueryTemplate, select: Select, actor: Actor, columns: tuple, filters: dict
) -> TemplatePage | QuerySet:
    if not actor.team_ids or not set(filters) <= set(ID_FILTERS):
        return select(actor, filters).values(*columns)  # no teams, or filters not on ids
    names = tuple(sorted(filters))
    values = [*actor.team_ids, *(filters[name] for name in names)]
    return TemplatePage(pages, (len(actor.team_ids), names, columns), values)


def _runs(actor: Actor, filters: dict) -> QuerySet:
    return run_list(actor=actor, **filters)


def _experiments(actor: Actor, filters: dict) -> QuerySet:
    return experiment_list(actor=actor, **filters).prefetch_related(None)


_RUN_PAGES, _EXPERIMENT_PAGES = _pages(_runs), _pages(_experiments)


def run_list_rows(*, actor: Actor, columns: tuple, **filters) -> TemplatePage | QuerySet:
    """`run_list(actor, **filters).values(*columns)` for DRF's cursor paginator."""
    return _list_rows(_RUN_PAGES, _runs, actor, columns, filters)


def experiment_list_rows(*, actor: Actor, columns: tuple, **filters) -> TemplatePage | QuerySet:
    """`experiment_list(actor, **filters).values(*columns)` for DRF's cursor paginator."""
    return _list_rows(_EXPERIMENT_PAGES, _experiments, actor, columns, filters)


# `run_list(actor).filter(pk=…)`: its values are the run's id, then the actor's teams
_RUN_ROW = QueryTemplate(
    lambda columns, values: (
        run_list(actor=Actor.of_teams(values[1:])).filter(pk=values[0]).values(*columns)[:1]
    )
)


def run_row(*, actor: Actor, run_id: int, columns: tuple[str, ...]) -> dict | None:
    """The run's `columns` as `run_list(...).values(*columns)` gives them, if the actor may
    read it (the same team scope), else None: a run detail reads it on every request."""
    team_ids = actor.team_ids
    rows = _RUN_ROW.rows([run_id, *team_ids], shape=columns) if team_ids else []
    return rows[0] if rows else None


def run_visible(*, actor: Actor, run_id: int) -> bool:
    """Whether the actor may read the run (a metrics request's and a websocket's check)."""
    return run_row(actor=actor, run_id=run_id, columns=("id",)) is not None


def run_get(*, actor: Actor, run_id: int) -> Run:
    run = run_list(actor=actor).filter(pk=run_id).first()
    if run is None:
        raise not_found("run")
    return run


def run_id_visible(*, actor: Actor, run_id: int) -> int:
    """`run_id` when the actor may read that run, else not found: run_get's check without
    reading the run (the metrics endpoint needs only its id)."""
    if not run_visible(actor=actor, run_id=run_id):
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


def config_diff(
    *, actor: Actor, a: int | None = None, b: int | None = None, a_spec: Any = None,
    b_spec: Any = None,
) -> dict[str, Any]:  # fmt: skip
    """The diff (spec_diff) of two sides, each a config version of the actor's teams (`a`,
    `b`: its id) or a spec not stored (`a_spec`, `b_spec`: validated as a launch's, then
    normalized as it would be stored); `{"a", "b", "changes"}`, a spec's side's id None.
    The specs are parsed first: an invalid one is refused (naming `b_spec.<path>`) before
    any read."""
    given = {"a": a_spec, "b": b_spec}
    specs = {
        side: spec_parse(spec=spec, field=f"{side}_spec").to_dict()
        for side, spec in given.items()
        if spec is not None
    }
    ids: dict[str, int | None] = {"a": a, "b": b}
    for side in ("a", "b"):
        if side in specs:
            ids[side] = None
        else:
            specs[side] = config_get(actor=actor, config_id=ids[side]).spec
    return {**ids, "changes": spec_diff(a=specs["a"], b=specs["b"])}


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


def user_usage(*, user_id: int) -> dict:
    """What the runs a user launched hold now, over all of their teams (a pooled run counted
    for what it asks: no less than its share)."""
    row = Run.objects.filter(created_by_id=user_id, state__in=ACTIVE).aggregate(
        active=Count("id"),
        holding=Count("id", filter=Q(state__in=HOLDING)),
        gpus=Sum("gpus", filter=Q(state__in=HOLDING)),
    )
    return {
        "active_runs": row["active"],
        "running_runs": row["holding"],
        "gpus_in_use": round(row["gpus"] or 0.0, 9),
    }


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
