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

from django.db import connection

from paddock.experiments.models import MetricPoint

X_AXES = ("step", "time", "tokens")
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


def metric_points_store(*, run_id: int, points: Iterable[tuple[str, int, float, float]]) -> int:
    """Upsert `(key, step, time, value)` points of one run in bulk; a (key, step) already
    stored takes the new value (a step re-emitted after a resume). Returns rows written."""
    latest: dict[tuple[str, int], tuple[float, float]] = {}
    for key, step, time, value in points:  # the last value of a repeated (key, step) wins
        latest[(key, step)] = (time, value)
    if not latest:
        return 0
    if connection.vendor == "postgresql":
        _upsert_postgresql(run_id, latest)
    else:
        MetricPoint.objects.bulk_create(
            [MetricPoint(run_id=run_id, key=k, step=s, time=t, value=v)
             for (k, s), (t, v) in latest.items()],
            batch_size=5000, update_conflicts=True,
            unique_fields=["run", "key", "step"], update_fields=["time", "value"],
        )  # fmt: skip
    return len(latest)


def _upsert_postgresql(run_id: int, latest: dict[tuple[str, int], tuple[float, float]]) -> None:
    # One statement over four arrays: no model instance and no SQL text per row. This is the
    # ingest hot path (tens of thousands of points a second); bulk_create spends most of its
    # time building Python objects and SQL.
    table = MetricPoint._meta.db_table
    keys, steps = zip(*latest.keys(), strict=True)
    times, values = zip(*latest.values(), strict=True)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {table} (run_id, key, step, time, value)
                SELECT %s, u.k, u.s, u.t, u.v
                FROM unnest(%s::text[], %s::bigint[], %s::float8[], %s::float8[])
                     AS u(k, s, t, v)
                ON CONFLICT (run_id, key, step)
                DO UPDATE SET time = EXCLUDED.time, value = EXCLUDED.value""",
            [run_id, list(keys), list(steps), list(times), list(values)],
        )


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


def _series_postgresql(*, run_id: int, key: str, x: str, max_points: int) -> Series:
    x_col, join = _x_sql(x)
    table = MetricPoint._meta.db_table
    source = f"FROM {table} p {join} WHERE p.run_id = %(run)s AND p.key = %(key)s"
    params = {"run": run_id, "key": key, "tokens_key": TOKENS_KEY}
    series = Series(key=key)
    with connection.cursor() as cur:
        # the x range: from the (run, key, step) index for steps, a scan otherwise
        bounds = "p.step" if x == "step" else x_col
        cur.execute(f"SELECT min({bounds})::float8, max({bounds})::float8 {source}", params)
        lo, hi = cur.fetchone()
        if lo is None:
            return series
        # min and max per bucket, the same arithmetic as _bucket so both paths keep the
        # same points; the max negates x and step so that ties go to the first point
        cur.execute(
            f"""SELECT count(*), min(ARRAY[p.value, {x_col}, p.step]),
                       max(ARRAY[p.value, -{x_col}, -p.step])
                {source}
                GROUP BY LEAST(FLOOR(({x_col} - %(lo)s) / NULLIF(%(span)s, 0)
                                     * %(buckets)s), %(buckets)s - 1)""",
            {**params, "lo": lo, "span": hi - lo, "buckets": max_points // 2},
        )
        groups = cur.fetchall()
        series.count = sum(g[0] for g in groups)
        if series.count <= max_points:
            cur.execute(f"SELECT {x_col}, p.step, p.value {source} ORDER BY 1, 2", params)
            rows = cur.fetchall()
        else:
            kept = set()
            for _, low, high in groups:
                kept.add((low[1], low[2], low[0]))
                kept.add((-high[1], -high[2], high[0]))
            rows = sorted(kept, key=lambda r: (r[0], r[1]))
    for xv, step, value in rows:
        series.x.append(xv)
        series.step.append(int(step))
        series.y.append(_finite(value))
    return series


def _series_python(*, run_id: int, key: str, x: str, max_points: int) -> Series:
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
    points.sort(key=lambda p: (p[0], p[1]))
    keep = downsample_minmax([p[0] for p in points], [p[2] for p in points], max_points)
    series = Series(key=key, count=len(points))
    for i in keep:
        xv, step, value = points[i]
        series.x.append(xv)
        series.step.append(step)
        series.y.append(_finite(value))
    return series


def metric_series(*, run_id: int, key: str, x: str = "step", max_points: int = 1000) -> Series:
    """One metric of one run against `x` (step | time | tokens), at most `max_points`
    points, spikes kept. With x=tokens, steps without a `tokens/total` point are left out.
    The caller has checked that the actor may read the run."""
    if x not in X_AXES:
        raise ValueError(f"x must be one of {X_AXES}")
    max_points = max(2, min(max_points, MAX_POINTS_LIMIT))
    if connection.vendor == "postgresql":
        return _series_postgresql(run_id=run_id, key=key, x=x, max_points=max_points)
    return _series_python(run_id=run_id, key=key, x=x, max_points=max_points)


def metric_keys(*, run_id: int) -> list[str]:
    return list(
        MetricPoint.objects.filter(run_id=run_id)
        .order_by("key")
        .values_list("key", flat=True)
        .distinct()
    )
