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

from django.db import connection
from django.db.models import Field, Model


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
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if row is None:
            return None
        values = list(row)
        for i, (col, convert) in enumerate(converters):
            for converter in convert:
                values[i] = converter(values[i], col, connection)
        return values
