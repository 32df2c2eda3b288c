"""A fast, coarse read of long series: every n-th step, found by index probes.

The min/max downsampling of `metrics.py` keeps every spike but has to read every stored
point: a million of them (10 runs × 100k steps) take about a second on a quiet 2-core
machine and several under load. A chart's first frame does not need that: `max_points`
target steps spread evenly over each run's step range, each answered by one probe of the
`(run, key, step)` index ("the first point at or after this step"), cost the same whether a
run has 2,000 or 2,000,000 points. The UI draws this first and replaces it with the min/max
read when that arrives (a stride can step over a one-step spike; min/max cannot).

A run with at most `max_points` steps in its range comes back whole (every step is a
target). The x column is the step, the wall time or the run's `tokens/total` at that step,
as in `metrics.py`; only a window on steps is supported here (x_min/x_max on time or tokens
would need a scan to map them to steps, which is what this path avoids)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from django.db import connection

from paddock.core.fixed_sql import postgresql
from paddock.experiments.metrics import MAX_POINTS_LIMIT, TOKENS_KEY, X_AXES, Series, Window
from paddock.experiments.models import MetricPoint

# Per run: its lowest and highest step of the key (two index probes), then for each of n
# targets the first point at or after it (one probe each). DISTINCT: targets closer than
# the steps are apart find the same point.
_STRIDE = """
    WITH b AS MATERIALIZED (
        SELECT r, lo, hi FROM (
            SELECT r,
                   (SELECT min(p.step) FROM {table} p
                    WHERE p.run_id = r AND p.key = %(key)s {window}) AS lo,
                   (SELECT max(p.step) FROM {table} p
                    WHERE p.run_id = r AND p.key = %(key)s {window}) AS hi
            FROM unnest(%(runs)s::bigint[]) AS r) AS q
        WHERE lo IS NOT NULL
    )
    SELECT DISTINCT b.r, p.step, p.time, p.value, {tokens}
    FROM b CROSS JOIN LATERAL generate_series(0, LEAST(%(n)s, b.hi - b.lo + 1) - 1) AS g
    CROSS JOIN LATERAL (
        SELECT p.step, p.time, p.value FROM {table} p
        WHERE p.run_id = b.r AND p.key = %(key)s
          AND p.step >= b.lo + (b.hi - b.lo) * g / GREATEST(LEAST(%(n)s, b.hi - b.lo + 1) - 1, 1)
        ORDER BY p.step LIMIT 1
    ) AS p
    ORDER BY b.r, p.step"""
_TOKENS = """(SELECT t.value FROM {table} t
              WHERE t.run_id = b.r AND t.key = %(tokens_key)s AND t.step = p.step)"""


def _targets(lo: int, hi: int, n: int) -> list[int]:
    """The target steps, the same integer arithmetic as the SQL."""
    count = min(n, hi - lo + 1)
    last = max(count - 1, 1)
    return [lo + (hi - lo) * g // last for g in range(count)]


def _step_window(window: Window) -> tuple[str, dict]:
    # whole bounds on the integer column (the index takes them), clamped to bigint
    sql, params = "", {}
    if window.lo is not None:
        sql += " AND p.step >= %(x_min)s"
        params["x_min"] = max(-(2**63), math.ceil(window.lo))
    if window.hi is not None:
        sql += " AND p.step <= %(x_max)s"
        params["x_max"] = min(2**63 - 1, math.floor(window.hi))
    return sql, params


def _rows_postgresql(run_ids: list[int], key: str, x: str, n: int, window: Window) -> list:
    table = MetricPoint._meta.db_table
    where, params = _step_window(window)
    tokens = _TOKENS.format(table=table) if x == "tokens" else "NULL::float8"
    sql = _STRIDE.format(table=table, window=where, tokens=tokens)
    with connection.cursor() as cur:
        cur.execute(sql, params | {"runs": run_ids, "key": key, "n": n, "tokens_key": TOKENS_KEY})
        return cur.fetchall()


def _rows_python(run_ids: list[int], key: str, x: str, n: int, window: Window) -> list:
    rows = []
    for run_id in run_ids:
        points = sorted(
            (s, t, v)
            for s, t, v in MetricPoint.objects.filter(run_id=run_id, key=key).values_list(
                "step", "time", "value"
            )
            if window.holds(s)
        )
        if not points:
            continue
        tokens = {}
        if x == "tokens":
            tokens = dict(
                MetricPoint.objects.filter(run_id=run_id, key=TOKENS_KEY).values_list(
                    "step", "value"
                )
            )
        steps = [p[0] for p in points]
        picked = sorted({bisect.bisect_left(steps, t) for t in _targets(steps[0], steps[-1], n)})
        rows += [(run_id, *points[i], tokens.get(points[i][0])) for i in picked]
    return rows


def metric_series_stride(
    *,
    run_ids: Sequence[int],
    key: str,
    x: str = "step",
    max_points: int = 1000,
    window: Window | None = None,
) -> list[Series]:
    """One metric of several runs, at most `max_points` points each picked at evenly spaced
    steps, in the order of `run_ids`. `count` is left at -1: counting the points would
    read them all. With x=tokens, points without a `tokens/total` at their step are left
    out. The caller has checked that the actor may read the runs."""
    if x not in X_AXES:
        raise ValueError(f"x must be one of {X_AXES}")
    n = max(2, min(max_points, MAX_POINTS_LIMIT))
    window = window or Window()
    run_ids = list(dict.fromkeys(run_ids))
    read = _rows_postgresql if postgresql() else _rows_python
    out = {r: Series(key=key, count=-1) for r in run_ids}
    for run_id, step, time, value, tokens in read(run_ids, key, x, n, window):
        xv = float(step) if x == "step" else time if x == "time" else tokens
        if xv is None:
            continue
        series = out[run_id]
        series.x.append(xv)
        series.step.append(step)
        series.y.append(value if math.isfinite(value) else None)  # JSON has no NaN
    return [out[r] for r in run_ids]
