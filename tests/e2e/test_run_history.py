"""The run page reads what its stream's snapshot no longer holds from the REST API: log
lines older than the snapshot's last 100 (events?before=), sample sets older than its last
5 (/samples), and a zoomed window of a chart at full resolution (metrics x_min/x_max), as
the compare view does for every run of its experiment."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect

from paddock.experiments.metrics import metric_points_store
from paddock.experiments.models import ConfigVersion, Experiment, Run, RunEvent, SampleSet
from tests.e2e.conftest import log_in, orm

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

LINES, SETS, STEPS = 250, 8, 6000


def _run_with_history(team, user) -> int:
    config = ConfigVersion.objects.create(team=team, spec={"seed": 0}, hash="1" * 64)
    experiment = Experiment.objects.create(team=team, name="long", config=config, created_by=user)
    run = Run.objects.create(experiment=experiment, team=team, config=config, backend="torch",
                             seed=0, state="succeeded", step=STEPS, total_steps=STEPS,
                             created_by=user)  # fmt: skip
    t0 = datetime(2026, 11, 30, 12, tzinfo=UTC)
    RunEvent.objects.bulk_create(
        RunEvent(run=run, dispatch=1, kind="log", message=f"line {i:03d}",
                 time=t0 + timedelta(seconds=i))
        for i in range(LINES)
    )  # fmt: skip
    for step in range(1, SETS + 1):
        SampleSet.objects.create(run=run, step=step * 10, dispatch=1, items=[
            {"prompt": f"prompt of step {step * 10}", "completion": "c", "reward": 1.0,
             "advantage": 0.5, "adapter_version": step}])  # fmt: skip
    # a sawtooth: each window of 10 steps climbs 0…0.9, so every step is a distinct point
    metric_points_store(run_id=run.pk, points=[
        ("reward/mean", s, 1.7e9 + s, (s % 10) / 10) for s in range(STEPS)])  # fmt: skip
    return run.pk


def _drag(page, over, start: float, end: float) -> None:
    """A drag across a chart from `start` to `end` (fractions of its width): uPlot zooms."""
    over.scroll_into_view_if_needed()
    box = over.bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * start, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * end, y, steps=5)
    page.mouse.up()


def test_the_run_page_reads_older_logs_samples_and_zoomed_windows(
    people, asgi_server, browser_page
):
    team, user = people
    run_id = orm(_run_with_history, team, user)
    page, base = browser_page, asgi_server.url
    log_in(page, base)
    page.goto(f"{base}/runs/{run_id}")

    # logs: the snapshot's last 100 lines, then the older ones on demand
    tail = page.get_by_test_id("log-tail")
    expect(tail).to_contain_text(f"line {LINES - 1:03d}")
    expect(tail.locator(".log-line")).to_have_count(100)
    tail.get_by_role("button", name="load older lines").click()
    expect(tail.locator(".log-line")).to_have_count(LINES)
    expect(tail.locator(".log-line").first).to_contain_text("line 000")
    expect(tail.get_by_role("button", name="load older lines")).to_have_count(0)  # no more

    # samples: the snapshot holds 5 steps, the REST history the 3 before them
    page.get_by_role("tab", name="samples").click()
    steps = page.locator(".samples-head select").first.locator("option")
    expect(steps).to_have_count(SETS)
    page.locator(".samples-head select").first.select_option("10")
    expect(page.get_by_text("prompt of step 10", exact=True)).to_be_visible()

    # zoom: dragging across the reward chart re-reads that window at full resolution
    reward = page.get_by_test_id("chart-Reward")
    expect(reward.locator("canvas")).to_be_visible()
    # the downsampled history (at most 2000 points) under the snapshot's last 500 steps
    page.wait_for_function(
        "() => Number(document.querySelector('[data-testid=\"chart-Reward\"]')"
        ".dataset.points) > 1000"
    )
    before = int(reward.get_attribute("data-points") or 0)
    assert before <= 2500
    with page.expect_response(lambda r: "x_min=" in r.url and "/metrics" in r.url) as zoomed:
        _drag(page, reward.locator(".u-over"), 0.50, 0.55)
    assert zoomed.value.ok
    window = zoomed.value.json()["series"][0]
    assert window["count"] == len(window["step"]) > 100  # every step of the window came back
    expect(reward).not_to_have_attribute("data-points", str(before))
    assert int(reward.get_attribute("data-points") or 0) > before

    # the compare view zooms the same way, for every run of the experiment at once
    page.get_by_role("link", name="compare backends").click()
    expect(page.locator(".compare-page")).to_have_attribute("data-stage", "full")
    reward = page.get_by_test_id("chart-Reward")
    before = int(reward.get_attribute("data-points") or 0)
    with page.expect_response(
        lambda r: "/metrics?experiment=" in r.url and "x_min=" in r.url and "x=step" in r.url
    ) as zoomed:
        _drag(page, reward.locator(".u-over"), 0.50, 0.55)
    window = zoomed.value.json()["runs"][0]["series"][0]
    assert window["count"] == len(window["step"]) > 100
    expect(reward).not_to_have_attribute("data-points", str(before))

    # opened at its URL, the compare view's first reads go out at boot (beside the session
    # check) into the keys its hooks read: each is asked for once
    experiment = orm(lambda: Run.objects.get(pk=run_id).experiment_id)
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/api/v1/" in r.url else None)
    page.goto(f"{base}/experiments/{experiment}/compare")
    expect(page.locator(".compare-page")).to_have_attribute("data-stage", "full")
    first = "keys=reward%2Fmean&max_points=500&x=time&sample=stride"
    assert sum("/metrics?" in u and first in u for u in asked) == 1, asked
    assert sum(u.endswith(f"/experiments/{experiment}") for u in asked) == 1, asked
    assert sum(f"runs?experiment={experiment}&" in u for u in asked) == 1, asked
