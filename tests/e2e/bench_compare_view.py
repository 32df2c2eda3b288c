"""Benchmark: the compare view over 10 runs × 100,000 points, to its first drawn frame in
headless Chromium. Prints the times; asserts nothing about them (a benchmark, not a timed
test). Not collected by default (the file name does not start with test_); run it with

    .venv/bin/python bench/compare_view.py

Ten runs of one experiment (torch and vllm, five seeds each), each with 100,000 steps of
`reward/mean` bulk-loaded with COPY (PostgreSQL) or bulk_create (SQLite). Timed by the page's
clock from the start of the navigation to the compare page (a logged-in session; "cold" is
the first visit, before the compare page's chunks and the fixture's rows were read) until
(1) the first interactive frame: the reward panel drawn over every run's whole history, read
by stride (500 evenly spaced steps a run, by index probes), and (2) the full frame: the
min/max read (spikes kept) has replaced it. The API calls' start and duration are printed
too, and with PADDOCK_BENCH_PROFILE=1 the page's busiest functions up to the first frame.
bench/compare_view.py runs this file."""

from __future__ import annotations

import math
import os
import time

import pytest
from django.db import connection

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


def _print_profile(profile: dict, top: int = 15) -> None:
    """The functions that took the most samples up to the first frame (self time)."""
    span_ms = (profile["endTime"] - profile["startTime"]) / 1000
    interval_ms = span_ms / max(1, len(profile["samples"]))
    by_name: dict[str, int] = {}
    for node in profile["nodes"]:
        frame = node["callFrame"]
        name = f"{frame['functionName'] or '(anonymous)'} {frame['url'].rsplit('/', 1)[-1]}"
        by_name[name] = by_name.get(name, 0) + node.get("hitCount", 0)
    for name, hits in sorted(by_name.items(), key=lambda kv: -kv[1])[:top]:
        print(f"    {hits * interval_ms:7.1f} ms  {name}")


# In the page: wait (checked every animation frame) until the compare view shows `stages`
# and the reward panel is drawn from the history (the live streams open only after that
# frame), then report the time of the next frame (uPlot has drawn; the page takes input).
FRAME_AT = """([stages]) => new Promise((resolve) => {
  const ready = () => {
    const page = document.querySelector('.compare-page');
    const reward = document.querySelector('[data-testid="chart-Reward"]');
    return page && stages.includes(page.dataset.stage) && reward
      && reward.querySelector('canvas') && Number(reward.dataset.points) >= 400;
  };
  const check = () => ready()
    ? requestAnimationFrame(() => resolve(performance.now())) : requestAnimationFrame(check);
  check();
})"""


def test_compare_view_first_frame(people, asgi_server, browser_page):
    team, user = people
    experiment_id = orm(_load, team, user)
    page, base = browser_page, asgi_server.url
    log_in(page, base)

    reward = page.get_by_test_id("chart-Reward")
    profile = os.environ.get("PADDOCK_BENCH_PROFILE") == "1"
    cdp = page.context.new_cdp_session(page) if profile else None
    for attempt in ("cold", "warm"):
        page.goto("about:blank")
        if cdp:
            cdp.send("Profiler.enable")
            cdp.send("Profiler.setSamplingInterval", {"interval": 200})
            cdp.send("Profiler.start")
        page.goto(f"{base}/experiments/{experiment_id}/compare", wait_until="commit")
        # times are the page's own clock: milliseconds since the navigation started
        first = page.evaluate(FRAME_AT, [["overview", "full"]])
        if cdp:
            _print_profile(cdp.send("Profiler.stop")["profile"])
        drawn_first = int(reward.get_attribute("data-points") or 0)
        full = page.evaluate(FRAME_AT, [["full"]])
        drawn = int(reward.get_attribute("data-points") or 0)
        print(f"compare view, {attempt}: first interactive frame (every run's whole history, "
              f"by stride, {drawn_first:,} x-values) at {first / 1000:.3f} s")  # fmt: skip
        print(f"compare view, {attempt}: full frame (min/max per bucket, spikes kept, "
              f"{drawn:,} x-values) at {full / 1000:.3f} s")  # fmt: skip
        for name, begin, ms in page.evaluate(
            "() => performance.getEntriesByType('resource')"
            ".map((e) => [e.name.replace(/^.*?\\/\\/[^/]+\\//, '').slice(0, 70),"
            " Math.round(e.startTime), Math.round(e.duration)])"
        ):
            print(f"    at {begin:5d} ms, {ms:5d} ms  {name}")
        for name, at in page.evaluate(
            "() => performance.getEntriesByType('mark')"
            ".map((e) => [e.name, Math.round(e.startTime)])"
        ):
            print(f"    at {at:5d} ms  {name}")
        # interactive: hovering the reward panel reads values into its legend
        canvas = reward.locator(".u-over")
        box = canvas.bounding_box()
        page.mouse.move(box["x"] + box["width"] * 0.7, box["y"] + box["height"] / 2)
        legend = reward.locator(".u-legend .u-series").nth(0)
        assert any(ch.isdigit() for ch in legend.inner_text()), legend.inner_text()
