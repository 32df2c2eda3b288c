"""The hot list reads as compiled statements (core/fixed_sql.py's QueryTemplate): the run
list, the experiment list, a caller's teams and the experiments' tags. Each is the
selector's own queryset, compiled once per shape (the number of the caller's teams, the
page's ordering, cursor and size) and run again with the caller's values, so a request
pays for fetching its rows, not for the ORM building the same SQL again (about 2 ms of CPU
a run list page: bench/load/server_cost.py).

A page is what DRF's CursorPagination asks of a queryset (`order_by`, a filter on the
position, a slice): `TemplatePage` answers it, so the paginator, its cursors and its links
are DRF's own. Filters whose values are not ids (a state, a tag, a search) keep the ORM's
queryset."""

from __future__ import annotations

from django.db.models import QuerySet

from paddock.api import serializers as s
from paddock.core.errors import not_found
from paddock.core.fixed_sql import QueryTemplate
from paddock.experiments import selectors as experiment_selectors
from paddock.experiments.models import ExperimentTag
from paddock.teams import selectors as team_selectors
from paddock.teams.access import Actor
from paddock.teams.models import Role

# the filters a compiled page takes: each an id, compared for equality
ID_FILTERS = ("team_id", "experiment_id")


def _actor_of(team_ids: list[int]) -> Actor:
    """An actor whose teams are `team_ids` (stand-ins, when a template is compiled)."""
    return Actor(user=None, roles=dict.fromkeys(team_ids, Role.VIEWER))


class TemplatePage:
    """A queryset of `template`'s rows as CursorPagination uses one: `order_by` with the
    ordering, `filter` with `<field>__lt` or `__gt` the cursor's position, then a slice."""

    def __init__(self, template: QueryTemplate, shape: tuple, values: list[int]):
        self.template, self.shape, self.values = template, shape, values
        self.ordering: tuple[str, ...] = ()
        self.position: tuple[str, int] | None = None

    def _copy(self) -> TemplatePage:
        page = TemplatePage(self.template, self.shape, self.values)
        page.ordering, page.position = self.ordering, self.position
        return page

    def order_by(self, *fields: str) -> TemplatePage:
        page = self._copy()
        page.ordering = fields
        return page

    def filter(self, **lookup: int) -> TemplatePage:
        [(name, value)] = lookup.items()
        page = self._copy()
        page.position = (name, int(value))
        return page

    def __getitem__(self, window: slice) -> list[dict]:
        lookup = self.position[0] if self.position else None
        values = [*self.values, self.position[1]] if self.position else self.values
        shape = (self.shape, self.ordering, lookup, window.start, window.stop)
        return self.template.rows(values, shape=shape)


def _paged(queryset: QuerySet, shape: tuple, values: list[int]) -> QuerySet:
    """`queryset` as TemplatePage's shape orders, filters and slices it (`values` ends with
    the position when there is one)."""
    _, ordering, lookup, start, stop = shape
    queryset = queryset.order_by(*ordering)
    if lookup is not None:
        queryset = queryset.filter(**{lookup: values[-1]})
    return queryset[start:stop]


def _split(shape: tuple, values: list[int]) -> tuple[list[int], dict[str, int]]:
    """The team ids and the id filters of a list's `values` (its shape names them)."""
    (teams, filters), *_ = shape
    return values[:teams], dict(zip(filters, values[teams : teams + len(filters)], strict=True))


def _run_page(shape: tuple, values: list[int]) -> QuerySet:
    team_ids, filters = _split(shape, values)
    runs = experiment_selectors.run_list(actor=_actor_of(team_ids), **filters)
    return _paged(runs.values(*s.RUN_COLUMNS), shape, values)


def _experiment_page(shape: tuple, values: list[int]) -> QuerySet:
    team_ids, filters = _split(shape, values)
    experiments = experiment_selectors.experiment_list(actor=_actor_of(team_ids), **filters)
    rows = experiments.prefetch_related(None).values(*s.EXPERIMENT_COLUMNS)
    return _paged(rows, shape, values)


_RUN_PAGES = QueryTemplate(_run_page)
_EXPERIMENT_PAGES = QueryTemplate(_experiment_page)


def _source(template, actor: Actor, filters: dict, fallback) -> TemplatePage | QuerySet:
    if not actor.team_ids or not set(filters) <= set(ID_FILTERS):
        return fallback()  # no teams: the ORM answers without a statement
    names = tuple(sorted(filters))
    values = [*actor.team_ids, *(filters[name] for name in names)]
    return TemplatePage(template, (len(actor.team_ids), names), values)


def run_rows_source(*, actor: Actor, filters: dict) -> TemplatePage | QuerySet:
    """The run list of `actor` with `filters` (run_list's keywords) as `.values(
    *RUN_COLUMNS)` rows, for the paginator."""
    return _source(
        _RUN_PAGES, actor, filters,
        lambda: experiment_selectors.run_list(actor=actor, **filters).values(*s.RUN_COLUMNS),
    )  # fmt: skip


def experiment_rows_source(*, actor: Actor, filters: dict) -> TemplatePage | QuerySet:
    """The experiment list of `actor` with `filters` as `.values(*EXPERIMENT_COLUMNS)`."""

    def fallback():
        experiments = experiment_selectors.experiment_list(actor=actor, **filters)
        return experiments.prefetch_related(None).values(*s.EXPERIMENT_COLUMNS)

    return _source(_EXPERIMENT_PAGES, actor, filters, fallback)


_TAGS = QueryTemplate(
    lambda _shape, ids: (
        ExperimentTag.objects.filter(experiment_id__in=ids)
        .order_by("name")
        .values("experiment_id", "name")
    )
)


def experiment_tags(experiment_ids: list[int]) -> dict[int, list[str]]:
    """Each experiment's tag names, by name (selectors.experiment_tag_names, compiled)."""
    ids = list(dict.fromkeys(experiment_ids))
    names: dict[int, list[str]] = {}
    if not ids:
        return names
    for row in _TAGS.rows(ids):
        names.setdefault(row["experiment_id"], []).append(row["name"])
    return names


_TEAMS = QueryTemplate(
    lambda _shape, ids: team_selectors.team_list(actor=_actor_of(ids)).values(*s.TEAM_COLUMNS)
)


def team_rows(*, actor: Actor) -> list[dict]:
    """`team_list(actor).values(*TEAM_COLUMNS)`, compiled."""
    team_ids = actor.team_ids
    return _TEAMS.rows(team_ids) if team_ids else []


_VISIBLE = QueryTemplate(
    lambda _shape, values: (
        experiment_selectors.run_list(actor=_actor_of(values[1:]))
        .filter(pk=values[0])
        .values("id")[:1]
    )
)


def run_visible(*, actor: Actor, run_id: int) -> bool:
    """Whether `run_id` is in the actor's run list (compiled: a connect and a metrics
    request ask it every time)."""
    team_ids = actor.team_ids
    return bool(team_ids) and bool(_VISIBLE.rows([run_id, *team_ids]))


def run_id_visible(*, actor: Actor, run_id: int) -> int:
    """selectors.run_id_visible, compiled: `run_id` when the actor may read that run, else
    not found."""
    if not run_visible(actor=actor, run_id=run_id):
        raise not_found("run")
    return run_id
