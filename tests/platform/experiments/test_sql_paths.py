"""Every read and write of metric points that PostgreSQL answers with its own statements
(COPY, arrays, recursive index walks) has a portable path, which SQLite (`paddock up`
alone) runs: each function holds both, `core.fixed_sql.postgresql()` picks one, and here
both answer alike on the same rows. The portable path runs on PostgreSQL under
`fixed_sql.PORTABLE` (the `portable` fixture), so this suite runs it without SQLite."""

from __future__ import annotations

import math

import pytest

from paddock.core import fixed_sql
from paddock.experiments.metrics import (
    Window,
    metric_keys,
    metric_latest_many,
    metric_points_store,
    metric_series_many,
)
from paddock.experiments.metrics_stride import metric_series_stride
from paddock.experiments.models import MetricPoint, Run
from paddock.live.snapshots import recent_points, run_snapshot_text

pytestmark = pytest.mark.django_db


def _both(read):
    """`read()` on PostgreSQL's path, then on the portable one."""
    assert fixed_sql.postgresql(), "these tests compare the paths on PostgreSQL"
    native = read()
    fixed_sql.PORTABLE = True
    try:
        return native, read()
    finally:
        fixed_sql.PORTABLE = False


def _batch(n: int) -> list[tuple[str, int, float, float]]:
    keys = ("reward/mean", "kl", 'ünï "key"')
    points = [(key, s, 1000.0 + s * 0.5, math.sin(s / 7) * (k + 1))
              for k, key in enumerate(keys) for s in range(n)]  # fmt: skip
    points[17] = ("reward/mean", 17, 1008.5, math.nan)
    points[18] = ("reward/mean", 18, 1009.0, -math.inf)
    points += [("tokens/total", s, 1000.0 + s * 0.5, float(s * 100)) for s in range(0, n, 3)]
    points += [("eval/accuracy", s, 1000.0 + s, 0.5) for s in range(0, n, 50)]
    return points


@pytest.fixture
def runs(launched) -> list[int]:
    ids = sorted(Run.objects.filter(team__slug="team-a").values_list("pk", flat=True))
    for i, run_id in enumerate(ids):
        metric_points_store(run_id=run_id, points=_batch(300 + 100 * i))
    return ids


def test_storing_takes_the_same_rows_on_both_paths(runs):
    """New points (COPY), a step stored again and one repeated within a batch (upsert)."""
    again = [("kl", 5, 1.0, 9.0), ("kl", 5, 2.0, 10.0), ("new", 1, 3.0, 4.0)]

    def store_and_read():
        MetricPoint.objects.filter(run_id=runs[0]).delete()
        written = [metric_points_store(run_id=runs[0], points=_batch(120)),
                   metric_points_store(run_id=runs[0], points=again)]  # fmt: skip
        rows = MetricPoint.objects.filter(run_id=runs[0]).order_by("key", "step")
        return written, list(rows.values_list("key", "step", "time", "value"))

    native, portable = _both(store_and_read)
    assert str(native) == str(portable)  # str: NaN equals itself there


@pytest.mark.parametrize("read", [metric_series_many, metric_series_stride])
@pytest.mark.parametrize("x", ["step", "time", "tokens"])
@pytest.mark.parametrize("window", [None, (40.5, 250)])
@pytest.mark.parametrize("key", ["reward/mean", "eval/accuracy"])
def test_series_read_alike_on_both_paths(runs, read, x, window, key):
    """(The stride reads a window on steps whatever `x`: docs of metrics_stride.py.)"""
    window = Window(*window) if window else None
    for max_points in (10, 1000):  # bucketed, and whole
        native, portable = _both(lambda max_points=max_points: [
            vars(s) for s in read(run_ids=runs, key=key, x=x, max_points=max_points,
                                  window=window)])  # fmt: skip
        assert str(native) == str(portable), max_points


def test_the_last_values_keys_and_snapshot_alike_on_both_paths(runs):
    native, portable = _both(lambda: (
        metric_latest_many(runs), [metric_keys(run_id=r) for r in runs],
        recent_points(runs[0], 50), run_snapshot_text(runs[0], 50),
    ))  # fmt: skip
    assert str(native) == str(portable)
    assert native[0][runs[0]]  # they did read something
