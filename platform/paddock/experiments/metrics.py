"""Metric points: storing them (idempotent upsert) and reading them downsampled.

Downsampling is min/max per bucket: the x range is cut into max_points // 2 equal buckets
and each keeps its lowest and its highest point, so a one-step spike always survives (an
average would flatten it, a stride would skip it). On PostgreSQL the buckets are computed in
the database (one aggregate over the (run, key, step) index, nothing but the kept points
crosses the wire); elsewhere (SQLite, embedded) in Python, with the same arithmetic, so
both give the same points."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.db import IntegrityError, connection, transaction
from django.db.models import OuterRef, Subquery

from paddock.core.fixed_sql import postgresql, statement_cursor
from paddock.experiments.models import MetricPoint, Run

X_AXES = ("step", "time", "tokens")
# the last values a runs table shows: `latest` on every run the API returns
LATEST_KEYS = ("reward/mean", "accuracy", "eval/accuracy", "kl", "token_mult_prob_error",
               "throughput/tokens_per_s", "staleness/mean")  # fmt: skip
TOKENS_KEY = "tokens/total"  # cumulative generated tokens: the `tokens` x axis
MAX_POINTS_LIMIT = 10_000


@dataclass
class Series:
    key: str
    x: list[float] = field(default_factory=list)
    y: list[float | None] = field(default_factory=list)
    step: list[int] = field(default_factory=list)
    count: int = 0  # points stored, before downsampling

    @property
    def downsampled(self) -> bool:
        return len(self.x) < self.count


@dataclass(frozen=True)
class Window:
    """An x range to zoom into (both ends included; None: open). Points outside it are
    left out before downsampling, so a zoom gets finer buckets over just that range."""

    lo: float | None = None
    hi: float | None = None

    def holds(self, x: float) -> bool:
        return (self.lo is None or x >= self.lo) and (self.hi is None or x <= self.hi)


def metric_points_store(*, run_id: int, points: Iterable[tuple[str, int, float, float]]) -> int:
    """Upsert `(key, step, time, value)` points of one run in bulk; a (key, step) already
    stored takes the new value (a step re-emitted after a resume), and of a (key, step)
    repeated in `points` the last one wins. Returns rows written."""
    points = points if isinstance(points, list) else list(points)
    if not points:
        return 0
    if postgresql():
        try:
            # Most batches only add points: COPY is PostgreSQL's bulk path (rows are written
            # a page at a time), about a third cheaper for it than the upsert. A point that
            # is already stored, or repeated here, fails the COPY as a whole; the savepoint
            # then leaves the caller's transaction usable and the upsert writes them.
            with transaction.atomic(), connection.wrap_database_errors:
                _copy_postgresql(run_id, points)
            return len(points)
        except IntegrityError:
            pass
    latest: dict[tuple[str, int], tuple[float, float]] = {}
    for key, step, time, value in points:  # the last value of a repeated (key, step) wins
        latest[(key, step)] = (time, value)
    if postgresql():
        _upsert_postgresql(run_id, latest)
    else:
        MetricPoint.objects.bulk_create(
            [MetricPoint(run_id=run_id, key=k, step=s, time=t, value=v)
             for (k, s), (t, v) in latest.items()],
            batch_size=5000, update_conflicts=True,
            unique_fields=["run", "key", "step"], update_fields=["time", "value"],
        )  # fmt: skip
    return len(latest)


# COPY's text format: a backslash, tab, newline or carriage return in a key is escaped
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_postgresql(run_id: int, points: list[tuple[str, int, float, float]]) -> None:
    keys: dict[str, str] = {}  # key → its COPY form, escaped once per batch
    run = str(run_id)
    text = "".join(
        f"{run}\t{keys.get(key) or keys.setdefault(key, key.translate(_COPY_ESCAPES))}"
        f"\t{step}\t{time!r}\t{value!r}\n"
        for key, step, time, value in points
    )
    table = MetricPoint._meta.db_table
    with (
        connection.cursor() as cursor,
        cursor.copy(f"COPY {table} (run_id, key, step, time, value) FROM STDIN") as copy,
    ):
        copy.write(text)


def _upsert_postgresql(run_id: int, latest: dict[tuple[str, int], tuple[float, float]]) -> None:
    # One statement per batch, and its numbers sent as array literals built with str.join:
    # the ingest hot path (tens of thousands of points a second) spent more time in psycopg
    # quoting 4 arrays element by element (a regex per element) than PostgreSQL spent storing
    # them. A key is sent once (a batch repeats a few dozen keys over its steps) and each
    # point names it by position; psycopg quotes that short list of keys as usual.
    table = MetricPoint._meta.db_table
    names: dict[str, int] = {}
    index, steps, times, values = [], [], [], []
    for (key, step), (time, value) in latest.items():
        index.append(names.setdefault(key, len(names) + 1))  # PostgreSQL arrays start at 1
        steps.append(step)
        times.append(time)
        values.append(value)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {table} (run_id, key, step, time, value)
                SELECT %s, (%s::text[])[u.i], u.s, u.t, u.v
                FROM unnest(%s::int[], %s::bigint[], %s::float8[], %s::float8[])
                     AS u(i, s, t, v)
                ON CONFLICT (run_id, key, step)
                DO UPDATE SET time = EXCLUDED.time, value = EXCLUDED.value""",
            [run_id, list(names), _literal(index), _literal(steps), _literal(times),
             _literal(values)],
        )  # fmt: skip


def _literal(numbers: list[int] | list[float]) -> str:
    """A PostgreSQL array literal of ints or floats. repr() of a float is its shortest
    round-trip form, and PostgreSQL reads Python's 'nan', 'inf' and '-inf' as well."""
    return "{" + ",".join(map(repr, numbers)) + "}"


def _sort_value(v: float) -> float:
    return math.inf if math.isnan(v) else v  # PostgreSQL orders NaN above every number


def _bucket(x: float, lo: float, span: float, buckets: int) -> int:
    if span <= 0:
        return 0
    return min(math.floor((x - lo) / span * buckets), buckets - 1)


def downsample_minmax(xs: Sequence[float], ys: Sequence[float], max_points: int) -> list[int]:
    """Indices of the points to keep, ascending, at most `max_points` (≥ 2). `xs` must be
    ascending. Each of max_points // 2 equal-width x buckets keeps its minimum and its
    maximum (the first such point on ties); a bucket with one point keeps it once."""
    n = len(xs)
    if n <= max_points:
        return list(range(n))
    buckets = max_points // 2
    lo, span = xs[0], xs[-1] - xs[0]
    keep: list[int] = []
    current, i_min, i_max = None, 0, 0
    for i in range(n):
        b = _bucket(xs[i], lo, span, buckets)
        if b != current:
            if current is not None:
                keep.extend(sorted({i_min, i_max}))
            current, i_min, i_max = b, i, i
            continue
        v = _sort_value(ys[i])
        if v < _sort_value(ys[i_min]):
            i_min = i
        if v > _sort_value(ys[i_max]):
            i_max = i
    keep.extend(sorted({i_min, i_max}))
    return keep


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None  # JSON has no NaN or infinity


def _x_sql(x: str) -> tuple[str, str]:
    """SQL for the x column and the join it needs."""
    if x == "step":
        return "p.step::float8", ""
    if x == "time":
        return "p.time", ""
    return (
        "t.value",
        f"JOIN {MetricPoint._meta.db_table} t ON t.run_id = p.run_id "
        "AND t.key = %(tokens_key)s AND t.step = p.step",
    )


# Every run's series of one key in one statement. Each run's x range is found first (`b`),
# then its points are grouped by bucket with the same arithmetic as `_bucket` (so both paths
# keep the same points), each group giving its count, its lowest and its highest point (the
# max negates x and step so that ties go to the first point, as in `downsample_minmax`). A
# run known to have at most max_points points (`whole`) comes back whole.
#
# On steps the range comes from two probes of the (run, key, step) index per run, so the
# points are read once; `whole` is then "the step range is at most max_points wide", and a
# sparser run that still has at most max_points points (an eval every 50 steps) is read again
# whole by `_SPARSE`. On time and tokens the range and the count take a pass of their own:
# `b` is MATERIALIZED so that pass runs once. Inlined, a run whose rows the statistics do not
# know yet (a live run's new points, before ANALYZE) was planned as a nested loop that
# re-ran the aggregate for every point: 9 s for 6,000 points instead of 0.02 s.
#
# On steps, a run that comes back whole (its step range under max_points) needs no
# groups: each point is its own, so its arrays are its points in step order, read straight
# from the index (`whole`). Grouping them anyway (two arrays built and compared per point,
# then deduplicated) was most of PostgreSQL's CPU for a chart's 500-point series. The
# other runs go through `_POINTS` as before (the `{points}` of this statement).
_STEP_WHOLE = """
    WITH b AS MATERIALIZED ({b}),
    whole AS (
        SELECT b.r, true AS whole, count(*)::bigint AS n,
               array_agg(p.step::float8 ORDER BY p.step) AS xs,
               array_agg(p.step::bigint ORDER BY p.step) AS steps,
               array_agg(CASE WHEN p.value IN ('NaN', 'Infinity', '-Infinity') THEN NULL
                              ELSE p.value END ORDER BY p.step) AS ys
        FROM b JOIN {table} p ON p.run_id = b.r AND p.key = %(key)s {window}
        WHERE b.whole GROUP BY b.r
    )
    SELECT r, whole, n, xs, steps, ys FROM whole
    UNION ALL ({points})"""
_BY_STEP_B = """
        SELECT r, lo::float8 AS lo, (hi - lo)::float8 AS span, hi - lo < %(max_points)s AS whole
        FROM (SELECT r,
                     (SELECT min(p.step) FROM {table} p
                      WHERE p.run_id = r AND p.key = %(key)s {window}) AS lo,
                     (SELECT max(p.step) FROM {table} p
                      WHERE p.run_id = r AND p.key = %(key)s {window}) AS hi
              FROM unnest(%(runs)s::bigint[]) AS r) AS q
        WHERE lo IS NOT NULL"""
# the groups of the runs on steps that are not whole, over `_STEP_WHOLE`'s `b`
_BY_STEP_PARTS = """
    SELECT b.r, b.whole, count(*), min(ARRAY[p.value, p.step::float8, p.step]),
           max(ARRAY[p.value, -p.step::float8, -p.step])
    FROM b JOIN {table} p ON p.run_id = b.r AND p.key = %(key)s {window}
    WHERE NOT b.whole
    GROUP BY b.r, b.whole,
             LEAST(FLOOR((p.step::float8 - b.lo) / NULLIF(b.span, 0) * %(buckets)s),
                   %(buckets)s - 1)"""
_BY_X = """
    WITH pts AS NOT MATERIALIZED (
        SELECT p.run_id AS r, {x} AS x, p.step AS s, p.value AS v
        FROM {table} p {join} WHERE p.run_id = ANY(%(runs)s) AND p.key = %(key)s {window}
    ), b AS MATERIALIZED (
        SELECT r, min(x) AS lo, max(x) - min(x) AS span, count(*) <= %(max_points)s AS whole
        FROM pts GROUP BY r
    )
    SELECT pts.r, b.whole, count(*), min(ARRAY[pts.v, pts.x, pts.s]),
           max(ARRAY[pts.v, -pts.x, -pts.s])
    FROM pts JOIN b ON b.r = pts.r
    GROUP BY pts.r, b.whole,
             CASE WHEN b.whole THEN -1 - pts.s::float8
                  ELSE LEAST(FLOOR((pts.x - b.lo) / NULLIF(b.span, 0) * %(buckets)s),
                             %(buckets)s - 1) END"""
_SPARSE = """
    SELECT p.run_id, true, 1, ARRAY[p.value, p.step::float8, p.step],
           ARRAY[p.value, -p.step::float8, -p.step]
    FROM {table} p WHERE p.run_id = ANY(%(runs)s) AND p.key = %(key)s {window}"""


def _window_sql(x: str, window: Window) -> tuple[str, dict]:
    """The WHERE terms of a window, and their parameters."""
    x_col, _ = _x_sql(x)
    lo, hi = window.lo, window.hi
    if x == "step":
        # whole bounds on the integer column, so the (run, key, step) index takes them,
        # clamped to bigint: a far bound must not overflow the column's type
        x_col = "p.step"
        lo = max(math.ceil(lo), -(2**63)) if lo is not None else None
        hi = min(math.floor(hi), 2**63 - 1) if hi is not None else None
    sql = ""
    if lo is not None:
        sql += f" AND {x_col} >= %(x_min)s"
    if hi is not None:
        sql += f" AND {x_col} <= %(x_max)s"
    return sql, {"x_min": lo, "x_max": hi}


# Each run's kept points as three arrays, in x order, built from the groups of `_BY_STEP_PARTS`,
# `_BY_X` or `_SPARSE` (`{groups}`): a group's lowest and highest point are one point when
# the group holds one (DISTINCT ON its x and step), not finite values are null (JSON has
# no NaN). A Python loop over the groups' rows cost about 2 ms of a 500-point answer.
_POINTS = """
    WITH g (r, whole, n, low, high) AS ({groups}),
    runs AS (SELECT r, bool_or(whole) AS whole, sum(n)::bigint AS n FROM g GROUP BY r),
    pts AS (
        SELECT DISTINCT ON (r, x, s) r, x, s, v FROM (
            SELECT r, low[2] AS x, low[3] AS s, low[1] AS v FROM g
            UNION ALL SELECT r, -high[2], -high[3], high[1] FROM g) AS q
        ORDER BY r, x, s)
    SELECT runs.r, runs.whole, runs.n,
           array_agg(pts.x ORDER BY pts.x, pts.s),
           array_agg(pts.s::bigint ORDER BY pts.x, pts.s),
           array_agg(CASE WHEN pts.v IN ('NaN', 'Infinity', '-Infinity') THEN NULL
                          ELSE pts.v END ORDER BY pts.x, pts.s)
    FROM runs JOIN pts ON pts.r = runs.r GROUP BY runs.r, runs.whole, runs.n"""


def _series_postgresql(
    *, run_ids: list[int], key: str, x: str, max_points: int, window: Window
) -> dict[int, Series]:
    x_col, join = _x_sql(x)
    where, params = _window_sql(x, window)
    parts = {"table": MetricPoint._meta.db_table, "window": where, "x": x_col, "join": join}
    params |= {"runs": run_ids, "key": key, "tokens_key": TOKENS_KEY,
               "max_points": max_points, "buckets": max_points // 2}  # fmt: skip
    if x == "step":
        points = _POINTS.format(groups=_BY_STEP_PARTS.format(**parts))
        statement = _STEP_WHOLE.format(b=_BY_STEP_B.format(**parts), points=points, **parts)
    else:
        statement = _POINTS.format(groups=_BY_X.format(**parts))
    with statement_cursor() as cur:  # prepared: it runs on every chart request
        cur.execute(statement, params)
        rows = {r[0]: r for r in cur.fetchall()}
        # a run sparser than its step range that still has at most max_points points (an
        # eval every 50 steps) is read again whole; its count stays the first statement's
        sparse = [r for r, whole, n, *_ in rows.values() if not whole and n <= max_points]
        if sparse:
            cur.execute(
                _POINTS.format(groups=_SPARSE.format(**parts)), {**params, "runs": sorted(sparse)}
            )
            for r, _, _, xs, steps, ys in cur.fetchall():
                rows[r] = (r, True, rows[r][2], xs, steps, ys)
    out = {}
    for run_id in run_ids:
        row = rows.get(run_id)
        if row is None:
            out[run_id] = Series(key=key, count=0)
        else:
            _, _, count, xs, steps, ys = row
            out[run_id] = Series(key=key, x=xs, y=ys, step=steps, count=count)
    return out


def _series_python(
    *, run_id: int, key: str, x: str, max_points: int, window: Window | None = None
) -> Series:
    window = window or Window()
    rows = MetricPoint.objects.filter(run_id=run_id, key=key).values_list("step", "time", "value")
    if x == "tokens":
        tokens = dict(
            MetricPoint.objects.filter(run_id=run_id, key=TOKENS_KEY).values_list("step", "value")
        )
        points = [(tokens[s], s, v) for s, _, v in rows if s in tokens]
    elif x == "time":
        points = [(t, s, v) for s, t, v in rows]
    else:
        points = [(float(s), s, v) for s, _, v in rows]
    points = [p for p in points if window.holds(p[0])]
    points.sort(key=lambda p: (p[0], p[1]))
    keep = downsample_minmax([p[0] for p in points], [p[2] for p in points], max_points)
    series = Series(key=key, count=len(points))
    for i in keep:
        xv, step, value = points[i]
        series.x.append(xv)
        series.step.append(step)
        series.y.append(_finite(value))
    return series


def metric_series_many(
    *,
    run_ids: Sequence[int],
    key: str,
    x: str = "step",
    max_points: int = 1000,
    window: Window | None = None,
) -> list[Series]:
    """One metric of several runs against `x` (step | time | tokens), each at most
    `max_points` points with spikes kept, in the order of `run_ids`. On PostgreSQL one
    statement for all the runs. With x=tokens, steps without a `tokens/total` point are
    left out. The caller has checked that the actor may read the runs."""
    if x not in X_AXES:
        raise ValueError(f"x must be one of {X_AXES}")
    max_points = max(2, min(max_points, MAX_POINTS_LIMIT))
    window = window or Window()
    run_ids = list(dict.fromkeys(run_ids))
    if not run_ids:
        return []
    if postgresql():
        by_run = _series_postgresql(
            run_ids=run_ids, key=key, x=x, max_points=max_points, window=window
        )
        return [by_run[r] for r in run_ids]
    return [
        _series_python(run_id=r, key=key, x=x, max_points=max_points, window=window)
        for r in run_ids
    ]


def metric_series(
    *,
    run_id: int,
    key: str,
    x: str = "step",
    max_points: int = 1000,
    window: Window | None = None,
) -> Series:
    """One metric of one run: `metric_series_many` of that run alone."""
    return metric_series_many(run_ids=[run_id], key=key, x=x, max_points=max_points, window=window)[
        0
    ]


def metric_latest_annotations() -> dict[str, Subquery]:
    """Annotations for a queryset of runs: per key of LATEST_KEYS, the value stored at the
    run's highest step of that key (correlated subqueries, each a backward step of the
    (run, key, step) index); read back with `metric_latest_of`. `metric_latest_many` reads
    the same values for a page of runs without them."""
    return {
        f"latest_{i}": Subquery(
            MetricPoint.objects.filter(run_id=OuterRef("pk"), key=key)
            .order_by("-step")
            .values("value")[:1]
        )
        for i, key in enumerate(LATEST_KEYS)
    }


def metric_latest_of(run) -> dict[str, float]:
    """The last values of a run annotated with `metric_latest_annotations`; a key with no
    (finite) value is left out, as in the live snapshot's `latest`."""
    values = {key: getattr(run, f"latest_{i}", None) for i, key in enumerate(LATEST_KEYS)}
    return {k: v for k, v in values.items() if v is not None and math.isfinite(v)}


# Each (run, key) of LATEST_KEYS: the value at its highest step, by a backward step of the
# (run, key, step) index. A statement of constant text: compiling the same seven correlated
# subqueries as ORM annotations cost more CPU than the rest of a 50-run page together.
_LATEST_MANY = f"""
    SELECT r.id, k.i, (SELECT p.value FROM {MetricPoint._meta.db_table} p
                       WHERE p.run_id = r.id AND p.key = k.key ORDER BY p.step DESC LIMIT 1)
    FROM unnest(%s::bigint[]) AS r(id), unnest(%s::text[]) WITH ORDINALITY AS k(key, i)"""


def metric_latest_many(run_ids: Sequence[int]) -> dict[int, dict[str, float]]:
    """`metric_latest_of` for each of `run_ids`, in one statement: run id → {key: value} in
    the order of LATEST_KEYS, a key with no (finite) value left out."""
    run_ids = list(dict.fromkeys(run_ids))
    if not run_ids:
        return {}
    found: dict[int, list] = {r: [None] * len(LATEST_KEYS) for r in run_ids}
    if postgresql():
        with statement_cursor() as cursor:  # prepared: every run list and run detail
            cursor.execute(_LATEST_MANY, [run_ids, list(LATEST_KEYS)])
            for run_id, i, value in cursor.fetchall():
                found[run_id][i - 1] = value
    else:  # SQLite (`paddock up` alone): the annotations
        names = [f"latest_{i}" for i in range(len(LATEST_KEYS))]
        rows = Run.objects.filter(pk__in=run_ids).annotate(**metric_latest_annotations())
        for run_id, *values in rows.values_list("pk", *names):
            found[run_id] = values
    return {
        run_id: {k: v for k, v in zip(LATEST_KEYS, values, strict=True)
                 if v is not None and math.isfinite(v)}
        for run_id, values in found.items()
    }  # fmt: skip


# A run's distinct keys by a walk of the (run, key, step) index, one probe per key: DISTINCT
# read every point of the run (hundreds of thousands for a long one) to find a few dozen.
# The live snapshot reads each key's newest points from the same walk (live/snapshots.py).
RUN_KEYS_WALK = f"""
    WITH RECURSIVE keys(key) AS (
        (SELECT key FROM {MetricPoint._meta.db_table} WHERE run_id = %(run)s
         ORDER BY key LIMIT 1)
        UNION ALL
        SELECT (SELECT p.key FROM {MetricPoint._meta.db_table} p
                WHERE p.run_id = %(run)s AND p.key > keys.key ORDER BY p.key LIMIT 1)
        FROM keys WHERE keys.key IS NOT NULL
    )
"""
_KEYS = f"{RUN_KEYS_WALK}SELECT key FROM keys WHERE key IS NOT NULL"


def metric_keys(*, run_id: int) -> list[str]:
    """The run's metric keys, sorted."""
    if postgresql():
        with statement_cursor() as cursor:
            cursor.execute(_KEYS, {"run": run_id})
            return [key for (key,) in cursor.fetchall()]
    return list(
        MetricPoint.objects.filter(run_id=run_id)
        .order_by("key")
        .values_list("key", flat=True)
        .distinct()
    )
