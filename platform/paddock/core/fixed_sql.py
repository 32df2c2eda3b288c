"""Hot reads as statements of constant text, written once from the models.

The ORM compiles a query anew on every call: about 1 ms of CPU for a join of two or three
tables, more than PostgreSQL spends answering it (bench/load/server_cost.py). A read on
every request builds its statement with these once per database vendor (and shape, such as
the number of teams in an IN list) and reads its row back as the ORM would: through the
database's converters (SQLite gives datetimes naive and booleans as 0/1, a JSONField
arrives as text), into model instances of every concrete field (a field added to a model is
read too) or a dict of named columns."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from functools import cache

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Field, Model

# True: every read and write takes its portable path, as on SQLite. The suite sets it (the
# `portable` fixture of tests/platform/conftest.py) to run those paths on PostgreSQL too.
PORTABLE = False


def postgresql() -> bool:
    """Whether the connection takes PostgreSQL's own statements (COPY, arrays, recursive
    index walks, prepared statements, an isolation level); else the portable ORM path,
    which SQLite (`paddock up` alone) runs. The one place a read asks the vendor: each
    function that differs holds both paths, and answers alike on both
    (tests/platform/experiments/test_sql_paths.py)."""
    return connection.vendor == "postgresql" and not PORTABLE


@cache
def _prepared_cursor_class():
    from django.db.backends.postgresql.base import ServerBindingCursor

    class PreparedCursor(ServerBindingCursor):
        """Server-side binding, each statement prepared on its connection."""

        def execute(self, query, params=None, *, prepare=True, binary=None):
            return super().execute(query, params, prepare=prepare, binary=binary)

    return PreparedCursor


def statement_cursor():
    """A cursor for a statement run on every request, used as `connection.cursor()` is.

    On PostgreSQL its statements are prepared on the connection (server-side binding,
    psycopg's `prepare=True`): PostgreSQL parses and plans each once per pooled connection
    instead of on every run. Django's own cursor binds parameters in the client, so each
    run is a new text to plan: PostgreSQL's CPU for a /me request (the token's join and the
    teams) was 0.9 ms that way and 0.15 ms prepared, for a run list page 2.0 and 0.75 ms
    (docs/reliability.md "Load"). The platform's other statements keep Django's cursor:
    Django does not support server-side binding for every query it builds, and these are
    the few that run on every request."""
    wrapper = connections[DEFAULT_DB_ALIAS]  # this thread's (the proxy looks it up each time)
    if not postgresql() or not getattr(settings, "PADDOCK_PREPARED_STATEMENTS", True):
        return wrapper.cursor()
    from django.db.backends.postgresql.psycopg_any import register_tzloader
    from psycopg.pq import Format

    wrapper.close_if_health_check_failed()
    wrapper.ensure_connection()
    with wrapper.wrap_database_errors:
        if wrapper.connection.prepare_threshold is None:
            # Django turns psycopg's preparing off (None) for every statement; these ask for
            # it by name (prepare=True), and Django's client-side cursors never prepare, so
            # no other statement is prepared for this
            wrapper.connection.prepare_threshold = _ONLY_WHEN_ASKED
        raw = _prepared_cursor_class()(wrapper.connection)
        # as Django's create_cursor does: the connection's time zone for timestamptz
        loader = raw.adapters.get_loader(_TIMESTAMPTZ_OID, Format.TEXT)
        if wrapper.timezone != loader.timezone:
            register_tzloader(wrapper.timezone, raw)
        return wrapper._prepare_cursor(raw)  # Django's wrapper: logged, counted


_TIMESTAMPTZ_OID = 1184
_ONLY_WHEN_ASKED = 2**31 - 1  # psycopg prepares a statement after this many runs of it


def concrete_fields(*models: type[Model]) -> list[Field]:
    return [f for model in models for f in model._meta.concrete_fields]


def select_columns(model: type[Model], alias: str) -> list[str]:
    """`alias.column` for each concrete field of `model`, quoted, in field order."""
    quote = connection.ops.quote_name
    return [f"{alias}.{quote(f.column)}" for f in model._meta.concrete_fields]


def instances(values: Sequence, *models: type[Model]) -> list[Model]:
    """`values` (every concrete field of each of `models`, in order) as loaded instances."""
    out, start = [], 0
    for model in models:
        fields = model._meta.concrete_fields
        end = start + len(fields)
        out.append(model.from_db(connection.alias, [f.attname for f in fields], values[start:end]))
        start = end
    return out


class FixedStatement:
    """A statement built once per vendor and shape by `build(shape)`, whose row starts with
    a column for each of `fields` (converted as the ORM converts that field's column) and
    may go on with columns left as they come."""

    def __init__(self, build: Callable[[Hashable], str], fields: Callable[[], list[Field]]):
        self.build, self.fields = build, fields
        self._sql: dict[tuple, str] = {}
        self._converters: dict[str, list[tuple]] = {}

    def _converters_now(self) -> list[tuple]:
        vendor = connection.vendor
        if vendor not in self._converters:
            out = []
            for f in self.fields():
                col = f.get_col(f.model._meta.db_table)
                out.append(
                    (col, connection.ops.get_db_converters(col) + f.get_db_converters(connection))
                )
            self._converters[vendor] = out
        return self._converters[vendor]

    def fetch_one(self, params: list, shape: Hashable = None) -> list | None:
        """The first row, its fields' columns converted; None when there is no row."""
        key = (connection.vendor, shape)
        sql = self._sql.get(key) or self._sql.setdefault(key, self.build(shape))
        converters = self._converters_now()
        with statement_cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if row is None:
            return None
        values = list(row)
        for i, (col, convert) in enumerate(converters):
            for converter in convert:
                values[i] = converter(values[i], col, connection)
        return values


_STANDIN = -(2**52)  # below any id, step or count the platform stores


def standins(n: int) -> list[int]:
    """Values a queryset is compiled with in place of the caller's: ints no query of the
    platform holds, so each is found again among the compiled statement's parameters."""
    return [_STANDIN - i for i in range(n)]


class QueryTemplate:
    """A queryset's own statement, compiled once per vendor and shape and run again with
    other values: the ORM's SQL text, column names and converters, without its compiler on
    every call (for a run list page, about 2 ms of CPU a request against the 0.3 ms its
    rows take to fetch and convert).

    `build(shape, values)` returns the `.values()` queryset of one shape for `values`, a
    list of ints; it is called once per shape with `standins`, which must reach the
    statement's parameters unchanged (equality and IN lookups on integer columns; a
    value the ORM rewrites, such as an `icontains` pattern, is refused when compiled)."""

    def __init__(self, build: Callable[[Hashable, list], object]):
        self.build = build
        self._compiled: dict[tuple, tuple] = {}

    def _compile(self, shape: Hashable, count: int) -> tuple:
        marks = standins(count)
        queryset = self.build(shape, marks)
        query = queryset.query
        compiler = query.get_compiler(connection=connection)
        sql, params = compiler.as_sql()
        where = {mark: i for i, mark in enumerate(marks)}
        slots = []  # for each parameter: the index of its value, or the constant itself
        for param in params:
            if type(param) is int and param in where:
                slots.append(where[param])
            elif isinstance(param, int) and param <= _STANDIN:
                raise ValueError(f"a stand-in was rewritten in {sql!r}")
            else:
                slots.append(("constant", param))
        if sorted(i for i in slots if isinstance(i, int)) != list(range(count)):
            raise ValueError(f"each value must be one parameter of {sql!r}: {params!r}")
        if query.selected:
            names = list(query.selected)
        else:
            names = [*query.extra_select, *query.values_select, *query.annotation_select]
        fields = [s[0] for s in compiler.select[: compiler.col_count]]
        converters = sorted(compiler.get_converters(fields).items())
        return sql, slots, names, converters

    def rows(self, values: Sequence[int], shape: Hashable = None) -> list[dict]:
        """The rows the shape's queryset gives for `values`, as `.values()` gives them."""
        key = (connection.vendor, shape, len(values))
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled.setdefault(key, self._compile(shape, len(values)))
        sql, slots, names, converters = compiled
        params = [slot[1] if isinstance(slot, tuple) else values[slot] for slot in slots]
        with statement_cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        out = []
        for row in rows:
            if converters:
                row = list(row)
                for i, (convert, expression) in converters:
                    value = row[i]
                    for converter in convert:
                        value = converter(value, expression, connection)
                    row[i] = value
            out.append(dict(zip(names, row, strict=False)))
        return out


class TemplatePage:
    """A QueryTemplate's rows as a queryset that DRF's CursorPagination pages: `order_by`
    with the ordering, `filter` with `<field>__lt` or `__gt` the cursor's position, then a
    slice, which runs the template with the page's shape (`shape`, then the ordering, the
    lookup and the slice) and `values` (then the position), so the paginator, its cursors
    and its links are DRF's own."""

    def __init__(self, template: QueryTemplate, shape: tuple, values: list[int]):
        self.template, self.shape, self.values = template, shape, values
        self.ordering: tuple[str, ...] = ()
        self.position: tuple[str, int] | None = None

    def _copy(self, **changed) -> TemplatePage:
        page = TemplatePage(self.template, self.shape, self.values)
        page.ordering, page.position = self.ordering, self.position
        page.__dict__.update(changed)
        return page

    def order_by(self, *fields: str) -> TemplatePage:
        return self._copy(ordering=fields)

    def filter(self, **lookup: int) -> TemplatePage:
        [(name, value)] = lookup.items()
        return self._copy(position=(name, int(value)))

    def __getitem__(self, window: slice) -> list[dict]:
        lookup = self.position[0] if self.position else None
        values = [*self.values, self.position[1]] if self.position else self.values
        shape = (self.shape, self.ordering, lookup, window.start, window.stop)
        return self.template.rows(values, shape=shape)
