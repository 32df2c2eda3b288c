"""Downsampling keeps spikes, returns at most max_points, and the database path (on
PostgreSQL) keeps exactly the points of the Python path."""

import math

import pytest
from django.db import connection
from hypothesis import given, settings
from hypothesis import strategies as st

from paddock.experiments import metrics
from paddock.experiments.metrics import (
    downsample_minmax,
    metric_points_store,
    metric_series,
)
from paddock.experiments.models import MetricPoint, Run
from paddock.teams.models import Role


def test_a_one_step_spike_survives():
    xs = list(range(10_000))
    ys = [0.0] * 10_000
    ys[4321] = 100.0
    ys[7777] = -50.0
    keep = downsample_minmax(xs, ys, 100)
    assert len(keep) <= 100
    assert 4321 in keep and 7777 in keep


@settings(max_examples=200, deadline=None)
@given(
    ys=st.lists(
        st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=1, max_size=400
    ),  # fmt: skip
    max_points=st.integers(2, 64),
)
def test_bounds_and_extremes_hold_for_any_series(ys, max_points):
    xs = list(range(len(ys)))
    keep = downsample_minmax(xs, ys, max_points)
    assert len(keep) <= max_points
    assert keep == sorted(set(keep))
    kept = [ys[i] for i in keep]
    assert min(kept) == min(ys) and max(kept) == max(ys)


@pytest.fixture
def run(launched) -> Run:
    return Run.objects.get(pk=launched[0]["runs"][0]["id"])


def test_storing_a_step_again_replaces_its_value(run):
    metric_points_store(run_id=run.pk, points=[("kl", 1, 10.0, 0.5), ("kl", 2, 11.0, 0.6)])
    metric_points_store(run_id=run.pk, points=[("kl", 2, 20.0, 0.9), ("kl", 2, 21.0, 1.0)])
    assert list(MetricPoint.objects.filter(run=run).order_by("step").values_list(
        "step", "time", "value")) == [(1, 10.0, 0.5), (2, 21.0, 1.0)]  # fmt: skip


def test_new_points_and_re_emitted_ones_are_stored_exactly(run):
    """New points take PostgreSQL's COPY path; a batch that touches a stored step (or
    repeats one) falls back to the upsert in a savepoint and loses nothing of the batch."""
    odd = ["tab\tkey", "back\\slash", "new\nline", "quote'\"key", "ünï/cødé", "\\N"]
    first = [(k, s, 1.0 + s, s / 3) for k in odd for s in range(3)]
    assert metric_points_store(run_id=run.pk, points=first) == len(first)
    again = [("tab\tkey", 2, 9.0, -1.0), ("tab\tkey", 3, 9.0, math.inf)]
    assert metric_points_store(run_id=run.pk, points=again) == 2
    stored = {(k, s): (t, v) for k, s, t, v in MetricPoint.objects.filter(run=run).values_list(
        "key", "step", "time", "value")}  # fmt: skip
    expected = {(k, s): (t, v) for k, s, t, v in first} | {
        (k, s): (t, v) for k, s, t, v in again}  # fmt: skip
    assert stored == expected


def _noisy(run, n=5000):
    points = [("reward/mean", s, 1000.0 + s * 0.5, math.sin(s / 50)) for s in range(n)]
    points[1234] = ("reward/mean", 1234, 1000.0 + 617.0, 42.0)
    points += [("tokens/total", s, 1000.0 + s * 0.5, float(s * 100)) for s in range(0, n, 2)]
    metric_points_store(run_id=run.pk, points=points)


WINDOWS = {"step": (100.5, 3000), "time": (1100.0, 2000.25), "tokens": (0, 250_000)}


@pytest.mark.parametrize("zoom", [False, True])
@pytest.mark.parametrize("x", ["step", "time", "tokens"])
def test_the_database_path_keeps_what_the_python_path_keeps(run, x, zoom):
    _noisy(run)
    window = metrics.Window(*WINDOWS[x]) if zoom else None
    fast = metric_series(run_id=run.pk, key="reward/mean", x=x, max_points=200, window=window)
    slow = metrics._series_python(run_id=run.pk, key="reward/mean", x=x, max_points=200,
                                  window=window)  # fmt: skip
    if zoom:
        assert fast.x[0] >= WINDOWS[x][0] and fast.x[-1] <= WINDOWS[x][1]
    assert (fast.x, fast.y, fast.step, fast.count) == (slow.x, slow.y, slow.step, slow.count)
    assert len(fast.x) <= 200 and fast.downsampled
    if x != "tokens":
        assert 42.0 in fast.y  # the spike (step 1234 has no tokens/total point: odd)
    assert connection.vendor in ("postgresql", "sqlite")


def test_the_endpoint_serves_downsampled_series_and_the_multi_run_form(world, client_as,
                                                                       launched, run):  # fmt: skip
    _noisy(run)
    client = client_as(world.users_a[Role.VIEWER])
    body = client.get(f"/api/v1/runs/{run.pk}/metrics",
                      {"keys": "reward/mean", "max_points": 100}).json()  # fmt: skip
    series = body["series"][0]
    assert series["count"] == 5000 and series["downsampled"] is True
    assert len(series["x"]) <= 100 and 42.0 in series["y"]
    every_key = client.get(f"/api/v1/runs/{run.pk}/metrics").json()
    assert [s["key"] for s in every_key["series"]] == ["reward/mean", "tokens/total"]
    other = launched[0]["runs"][1]["id"]
    multi = client.get("/api/v1/metrics", {"runs": f"{run.pk},{other}", "keys": "reward/mean",
                                           "max_points": 50, "x": "time"}).json()  # fmt: skip
    assert [r["run"] for r in multi["runs"]] == [run.pk, other]
    assert multi["runs"][1]["series"][0]["count"] == 0
    alone = client.get(f"/api/v1/runs/{run.pk}/metrics",
                       {"keys": "reward/mean", "max_points": 50, "x": "time"}).json()  # fmt: skip
    assert multi["runs"][0] == alone  # one statement for several runs keeps the same points
    bad = client.get(f"/api/v1/runs/{run.pk}/metrics", {"x": "wall"})
    assert (bad.status_code, bad.json()["field"]) == (400, "x")


def test_non_finite_values_come_back_as_null(run, world, client_as):
    metric_points_store(run_id=run.pk, points=[("kl", 0, 0.0, float("nan")),
                                               ("kl", 1, 0.0, float("inf"))])  # fmt: skip
    body = client_as(world.users_a[Role.VIEWER]).get(f"/api/v1/runs/{run.pk}/metrics").json()
    assert body["series"][0]["y"] == [None, None]


@pytest.mark.parametrize("max_points", [100, 1000])
def test_a_sparse_series_is_whole_when_it_fits_and_bucketed_when_not(run, max_points):
    # an eval every 50 steps: 401 points over 20,001 steps, with a spike
    points = [("eval/accuracy", s, float(s), (s % 7) / 7) for s in range(0, 20_001, 50)]
    points[123] = ("eval/accuracy", 123 * 50, 123 * 50.0, 9.0)
    metric_points_store(run_id=run.pk, points=points)
    fast = metric_series(run_id=run.pk, key="eval/accuracy", max_points=max_points)
    slow = metrics._series_python(run_id=run.pk, key="eval/accuracy", x="step",
                                  max_points=max_points)  # fmt: skip
    assert (fast.x, fast.y, fast.step, fast.count) == (slow.x, slow.y, slow.step, slow.count)
    assert fast.count == 401 and 9.0 in fast.y
    assert len(fast.x) == (401 if max_points == 1000 else len(fast.x)) <= max_points
