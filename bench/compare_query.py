"""Latency of the compare view's metrics query (`GET /api/v1/metrics`) over 10 runs × 100k
stored points each, on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/paddock .venv/bin/python bench/compare_query.py

Works in a throwaway database (paddock_bench_<pid>, created, migrated and dropped here). Each
run gets one metric of N points (a sine with noise and a one-step spike) and `tokens/total`,
bulk-loaded with COPY; then, measured in this one run (median of --repeat):
  - `metric_series_many` (one SQL statement for every run of a key) for x = step, time, tokens,
  - the same with a zoom window (x_min/x_max over a tenth of the steps),
  - the stride read of the compare view's first frame (`metric_series_stride`: every n-th
    step by index probes; it may step over the spike, so only the point count is checked),
  - the HTTP endpoint (Django test client: auth, JSON included), by run ids and by experiment,
  - one query per run (the former way), for the ratio.
Each result is checked: at most max_points points per run, and every run's spike kept."""

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
KEY = "reward/mean"
SPIKE = 25.0


def _timed(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def _load(run_ids: list[int], points: int) -> float:
    from django.db import connection

    from paddock.experiments.models import MetricPoint

    rng = random.Random(0)
    start = time.perf_counter()
    with connection.cursor() as cur:
        copy_sql = f"COPY {MetricPoint._meta.db_table} (run_id, key, step, time, value) FROM STDIN"
        with cur.cursor.copy(copy_sql) as copy:
            for i, run_id in enumerate(run_ids):
                spike = points * 2 // 3 + 7 * i
                for step in range(points):
                    value = math.sin(step / 5000 + i) + rng.gauss(0, 0.05)
                    if step == spike:
                        value = SPIKE
                    at = 1.7e9 + step * 0.25
                    copy.write_row((run_id, KEY, step, at, value))
                    copy.write_row((run_id, "tokens/total", step, at, float(step * 512)))
    with connection.cursor() as cur:
        cur.execute(f"VACUUM ANALYZE {MetricPoint._meta.db_table}")
    return time.perf_counter() - start


def _fixtures(runs: int):
    from django.contrib.auth import get_user_model

    from paddock.experiments.configs import config_version_create
    from paddock.experiments.models import Experiment, Run
    from paddock.teams.models import Membership, Role, Team

    user = get_user_model().objects.create_user("bench", password="bench")
    team = Team.objects.create(name="Bench", slug="bench")
    Membership.objects.create(team=team, user=user, role=Role.VIEWER)
    config = config_version_create(team_id=team.pk, spec={}, parent=None, created_by=user)
    experiment = Experiment.objects.create(team=team, name="bench", config=config)
    run_ids = [
        Run.objects.create(experiment=experiment, team=team, config=config, backend="torch",
                           seed=seed).pk
        for seed in range(runs)
    ]  # fmt: skip
    return user, experiment, run_ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--points", type=int, default=100_000, help="per run")
    parser.add_argument("--max-points", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import django

    django.setup()
    from django.db import connection

    if connection.vendor != "postgresql":
        print("needs PostgreSQL: set DATABASE_URL=postgres://…", file=sys.stderr)
        return 2
    connection.settings_dict["TEST"]["NAME"] = f"paddock_bench_{os.getpid()}"
    test_db = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        from rest_framework.test import APIClient

        from paddock.experiments import metrics

        user, experiment, run_ids = _fixtures(args.runs)
        load_s = _load(run_ids, args.points)
        total = args.runs * args.points
        print(f"database        {test_db} (PostgreSQL {connection.pg_version // 10000})")
        print(f"loaded          {args.runs} runs × {args.points:,} points of {KEY} "
              f"(+ tokens/total) with COPY in {load_s:.1f} s")  # fmt: skip

        def check(series_list, what, count=args.points, spike=True):
            assert len(series_list) == args.runs, what
            for series in series_list:
                assert series.count == count, (what, series.count)
                assert len(series.x) <= args.max_points, (what, len(series.x))
                assert not spike or SPIKE in series.y, f"{what}: a one-step spike was lost"

        rows = []
        for x in ("step", "time", "tokens"):
            seconds, result = _timed(
                lambda x=x: metrics.metric_series_many(run_ids=run_ids, key=KEY, x=x,
                                                       max_points=args.max_points),
                args.repeat,
            )  # fmt: skip
            check(result, f"x={x}")
            rows.append((f"one statement, x={x}", seconds))
            print(f"  {rows[-1][0]:<26} {seconds * 1000:8.1f} ms", flush=True)

        from paddock.experiments.metrics_stride import metric_series_stride

        for x in ("step", "time", "tokens"):  # the compare view's first frame
            seconds, result = _timed(
                lambda x=x: metric_series_stride(run_ids=run_ids, key=KEY, x=x,
                                                 max_points=args.max_points),
                args.repeat,
            )  # fmt: skip
            check(result, f"stride x={x}", count=-1, spike=False)
            assert all(s.step[-1] == args.points - 1 for s in result), "stride: the last step"
            rows.append((f"stride, x={x}", seconds))
            print(f"  {rows[-1][0]:<26} {seconds * 1000:8.1f} ms", flush=True)

        lo, hi = args.points * 6 // 10, args.points * 7 // 10  # holds every run's spike
        seconds, result = _timed(
            lambda: metrics.metric_series_many(
                run_ids=run_ids, key=KEY, x="step", max_points=args.max_points,
                window=metrics.Window(lo, hi),
            ),
            args.repeat,
        )  # fmt: skip
        check(result, "zoom", count=hi - lo + 1)
        rows.append(("zoom to 10% of steps", seconds))

        client = APIClient(SERVER_NAME="127.0.0.1")
        client.force_authenticate(user)
        ids = ",".join(map(str, run_ids))
        for what, url in (
            ("HTTP ?runs=…", f"/api/v1/metrics?runs={ids}&keys={KEY}&max_points={args.max_points}"),
            ("HTTP ?experiment=", f"/api/v1/metrics?experiment={experiment.pk}&keys={KEY}"
                                  f"&max_points={args.max_points}"),
            ("HTTP ?experiment=, stride", f"/api/v1/metrics?experiment={experiment.pk}"
                                          f"&keys={KEY}&max_points=500&sample=stride&x=time"),
        ):  # fmt: skip
            seconds, reply = _timed(lambda url=url: client.get(url), args.repeat)
            assert reply.status_code == 200, reply.content[:300]
            body = reply.json()["runs"]
            assert len(body) == args.runs
            assert "stride" in url or all(SPIKE in r["series"][0]["y"] for r in body)
            rows.append((what, seconds))

        seconds, result = _timed(
            lambda: [
                metrics.metric_series_many(run_ids=[r], key=KEY, max_points=args.max_points)[0]
                for r in run_ids
            ],
            args.repeat,
        )  # fmt: skip
        check(result, "per run")
        rows.append(("one statement per run", seconds))

        print(f"query           {total:,} points → at most {args.max_points} per run "
              f"(min/max per bucket), median of {args.repeat}")  # fmt: skip
        for name, seconds in rows:
            print(f"  {name:<26} {seconds * 1000:8.1f} ms")
    finally:
        connection.creation.destroy_test_db(test_db, verbosity=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
