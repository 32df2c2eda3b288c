"""Benchmark: the compare view over 10 runs × 100,000 points, to its first drawn frame in
headless Chromium. Prints the times; asserts nothing about them (a benchmark, not a timed
test). Not collected by default (the file name does not start with test_); run it with

    .venv/bin/python -m pytest tests/e2e/bench_compare_view.py -s -p no:cacheprovider

Ten runs of one experiment (torch and vllm, five seeds each), each with 100,000 steps of
`reward/mean` bulk-loaded with COPY (PostgreSQL) or bulk_create (SQLite). Timed from the
navigation to the compare page until (1) the first frame: the reward panel drawn from the
websocket snapshots (the last 500 steps of every run), and (2) the full history: the
server downsamples every run (min/max per bucket) and the browser aligns, smooths and
draws it. The API calls' durations are printed too."""

from __future__ import annotations

import math
import time

import pytest
from django.db import connection
from playwright.sync_api import expect

from paddock.experiments.models import ConfigVersion, Experiment, MetricPoint, Run
from tests.e2e.conftest import log_in, orm

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RUNS, POINTS = 10, 100_000


def _load(team, user) -> int:
    config = ConfigVersion.objects.create(team=team, spec={"seed": 0}, hash="0" * 64)
    experiment = Experiment.objects.create(team=team, name="bench", config=config, created_by=user)
    runs = [
        Run.objects.create(
            experiment=experiment,
            team=team,
            config=config,
            backend=backend,
            seed=seed,
            state="succeeded",
            step=POINTS,
            total_steps=POINTS,
            created_by=user,
        )  # fmt: skip
        for backend in ("torch", "vllm")
        for seed in range(RUNS // 2)
    ]

    def rows(run):
        drift = 0.002 if run.backend == "vllm" else 0.0
        for step in range(POINTS):
            value = 0.8 * (1 - math.exp(-step / 20_000)) - drift + 0.02 * math.sin(step + run.seed)
            yield (run.pk, "reward/mean", step, 1.7e9 + step * 0.5, value)

    start = time.perf_counter()
    if connection.vendor == "postgresql":
        table = MetricPoint._meta.db_table
        with connection.cursor() as cur:
            with cur.cursor.copy(f"COPY {table} (run_id, key, step, time, value) FROM STDIN") as cp:
                for run in runs:
                    for row in rows(run):
                        cp.write_row(row)
            cur.execute(f"ANALYZE {table}")
    else:
        for run in runs:
            MetricPoint.objects.bulk_create(
                (MetricPoint(run_id=r, key=k, step=s, time=t, value=v)
                 for r, k, s, t, v in rows(run)),
                batch_size=10_000,
            )  # fmt: skip
    print(f"\nloaded {RUNS} runs × {POINTS:,} points in {time.perf_counter() - start:.1f} s")
    return experiment.pk


def test_compare_view_first_frame(people, asgi_server, browser_page):
    team, user = people
    experiment_id = orm(_load, team, user)
    page, base = browser_page, asgi_server.url
    log_in(page, base)

    reward = page.get_by_test_id("chart-Reward")
    for attempt in ("cold", "warm"):
        page.goto("about:blank")
        start = time.perf_counter()
        page.goto(f"{base}/experiments/{experiment_id}/compare")
        expect(reward.locator("canvas")).to_be_visible(timeout=30_000)
        # first frame: the stream's snapshots (the last 500 steps of every run) are drawn
        first = time.perf_counter() - start
        # full frame: the whole downsampled history is drawn
        page.wait_for_function(
            "() => Number(document.querySelector('[data-testid=\"chart-Reward\"]')"
            ".dataset.points) > 500",
            timeout=30_000,
        )
        # the frame after the data landed (uPlot draws in the next animation frame)
        frame_at = page.evaluate(
            "() => new Promise((r) => requestAnimationFrame(() => r(performance.now())))"
        )
        elapsed = time.perf_counter() - start
        metrics_end = page.evaluate(
            "() => Math.max(...performance.getEntriesByType('resource')"
            ".filter((e) => e.name.includes('/api/v1/metrics')).map((e) => e.responseEnd))"
        )
        print(f"    browser: metrics answered at {metrics_end:.0f} ms, frame at {frame_at:.0f} ms")
        drawn = int(reward.get_attribute("data-points") or 0)
        print(f"compare view, {attempt}: first frame (live snapshots) in {first:.3f} s")
        print(f"compare view, {attempt}: full history, {drawn:,} x-values, in {elapsed:.3f} s")
        for name, ms in page.evaluate(
            "() => performance.getEntriesByType('resource').filter((e) => e.name.includes('/api/'))"
            ".map((e) => [e.name.split('/api/v1/')[1].slice(0, 60), Math.round(e.duration)])"
        ):
            print(f"    {ms:5d} ms  {name}")
