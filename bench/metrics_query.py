"""Latency of the downsampled metrics query over 1,000,000 stored points, on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/paddock .venv/bin/python bench/metrics_query.py

Works in a throwaway database (paddock_bench_<pid>, created, migrated and dropped here), so it never
touches real data. One run with one metric of N points (a sine with noise and a one-step
spike), bulk-loaded with COPY; then, measured in this one run:
  - the database path (min/max per bucket in SQL) for x = step and x = time,
  - the same through the HTTP endpoint (Django test client, auth and JSON included),
  - the Python path (every point fetched, bucketed in Python) once, for the ratio.
Each result is checked: at most max_points points, and the spike is among them."""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "platform"), str(REPO)]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddock.settings")


def _timed(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def _load(run_id: int, points: int, spike_step: int) -> float:
    from django.db import connection

    from paddock.experiments.models import MetricPoint

    rng = random.Random(0)
    start = time.perf_counter()
    with connection.cursor() as cur:
        copy_sql = f"COPY {MetricPoint._meta.db_table} (run_id, key, step, time, value) FROM STDIN"
        with cur.cursor.copy(copy_sql) as copy:
            for step in range(points):
                value = math.sin(step / 5000) + rng.gauss(0, 0.05)
                if step == spike_step:
                    value = 25.0
                copy.write_row((run_id, "reward/mean", step, 1.7e9 + step * 0.25, value))
    with connection.cursor() as cur:
        cur.execute(f"ANALYZE {MetricPoint._meta.db_table}")
    return time.perf_counter() - start


def _fixtures():
    from django.contrib.auth import get_user_model

    from paddock.experiments.configs import config_version_create
    from paddock.experiments.models import Experiment, Run
    from paddock.teams.models import Membership, Role, Team

    user = get_user_model().objects.create_user("bench", password="bench")
    team = Team.objects.create(name="Bench", slug="bench")
    Membership.objects.create(team=team, user=user, role=Role.VIEWER)
    config = config_version_create(team_id=team.pk, spec={}, parent=None, created_by=user)
    experiment = Experiment.objects.create(team=team, name="bench", config=config)
    run = Run.objects.create(experiment=experiment, team=team, config=config, backend="torch",
                             seed=0)  # fmt: skip
    return user, run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--max-points", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import django

    django.setup()
    from django.db import connection

    if connection.vendor != "postgresql":
        print("needs PostgreSQL: set DATABASE_URL=postgres://…", file=sys.stderr)
        return 2
    # a database of its own, so that the bench never meets a test session's test_<name>
    connection.settings_dict["TEST"]["NAME"] = f"paddock_bench_{os.getpid()}"
    test_db = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        from rest_framework.test import APIClient

        from paddock.experiments import metrics

        user, run = _fixtures()
        spike = args.points * 2 // 3 + 7
        load_s = _load(run.pk, args.points, spike)
        print(f"database        {test_db} (PostgreSQL {connection.pg_version // 10000})")
        print(f"loaded          {args.points:,} points with COPY in {load_s:.1f} s "
              f"({args.points / load_s:,.0f} points/s)")  # fmt: skip

        def check(series, what):
            assert series.count == args.points, (what, series.count)
            assert len(series.x) <= args.max_points, (what, len(series.x))
            assert 25.0 in series.y, f"{what}: the one-step spike was lost"

        rows = []
        for x in ("step", "time"):
            seconds, series = _timed(
                lambda x=x: metrics.metric_series(run_id=run.pk, key="reward/mean", x=x,
                                                  max_points=args.max_points),
                args.repeat,
            )  # fmt: skip
            check(series, f"x={x}")
            rows.append((f"SQL, x={x}", seconds, len(series.x)))

        client = APIClient(SERVER_NAME="127.0.0.1")
        client.force_authenticate(user)
        url = f"/api/v1/runs/{run.pk}/metrics?keys=reward/mean&max_points={args.max_points}"
        seconds, reply = _timed(lambda: client.get(url), args.repeat)
        body = reply.json()["series"][0]
        assert len(body["y"]) <= args.max_points and 25.0 in body["y"]
        rows.append(("HTTP endpoint, x=step", seconds, len(body["y"])))

        seconds, series = _timed(
            lambda: metrics._series_python(run_id=run.pk, key="reward/mean", x="step",
                                           max_points=args.max_points),
            1,
        )  # fmt: skip
        check(series, "python")
        rows.append(("Python path, x=step", seconds, len(series.x)))

        print(f"query           {args.points:,} points → at most {args.max_points} "
              f"(min/max per bucket), median of {args.repeat}")  # fmt: skip
        for name, seconds, kept in rows:
            print(f"  {name:<24} {seconds * 1000:8.1f} ms   {kept} points, spike kept")
        ratio = rows[-1][1] / rows[0][1]
        print(f"SQL path vs fetching every point: {ratio:.1f}x faster")
    finally:
        connection.creation.destroy_test_db(test_db, verbosity=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
