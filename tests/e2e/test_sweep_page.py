"""A sweep launched from the launcher's sweep section, and its page, in Chromium against the
real server: the members' table and the parallel-coordinates plot, live as two members'
"jobs" (the real Reporter posting to the real ingest) report (nothing dispatches here)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from paddock.sweeps.models import SweepMember
from tests.e2e.conftest import log_in, orm
from tests.e2e.test_golden_path import Job

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_sweep_from_the_launcher_and_its_live_table_and_plot(
    people, asgi_server, browser_page, tmp_path
):
    page, base = browser_page, asgi_server.url
    log_in(page, base)
    page.goto(f"{base}/launch")
    page.get_by_label("Experiment name").fill("rank x lr")
    page.get_by_test_id("sweep-toggle").check()
    # the section starts with lora.r × train.lr, two values each: four members, two at once
    page.get_by_label("Members at once").fill("2")
    expect(page.get_by_test_id("validation")).to_have_text("✓ valid", timeout=15_000)
    expect(page.get_by_test_id("sweep-plan")).to_contain_text("a sweep of 4 members, 2 at once")
    # a value the spec refuses is named on its key, by the server
    page.get_by_label("Sweep values 1").fill("8, 0")
    expect(page.get_by_test_id("sweep-section")).to_contain_text(
        "member 2 (lora.r=0", timeout=15_000
    )
    expect(page.get_by_test_id("launch")).to_be_disabled()
    page.get_by_label("Sweep values 1").fill("8, 16")
    expect(page.get_by_test_id("validation")).to_have_text("✓ valid", timeout=15_000)
    page.get_by_test_id("launch").click()
    expect(page).to_have_url(re.compile(r"/sweeps/\d+$"))

    table = page.get_by_test_id("sweep-members")
    rows = table.locator("tbody tr")
    expect(rows).to_have_count(4)
    states = page.get_by_test_id("member-state")
    expect(states).to_have_text(["active", "active", "pending", "pending"])
    expect(rows.nth(2)).to_contain_text("16")  # lora.r of the third member
    plot = page.get_by_test_id("parallel-coordinates")
    expect(plot.get_by_test_id("pc-axis")).to_have_count(3)
    keys = [plot.get_by_test_id("pc-axis").nth(i).get_attribute("data-key") for i in range(3)]
    assert keys == ["lora.r", "train.lr", "reward/mean (best)"]
    expect(plot.get_by_test_id("pc-line")).to_have_count(4)

    # the two launched members' jobs report: the page hears it over the experiment's stream
    members = orm(lambda: list(SweepMember.objects.filter(run__isnull=False)
                               .order_by("index").values_list("index", "run_id")))  # fmt: skip
    assert [i for i, _ in members] == [0, 1]
    jobs = [Job(run_id, base, tmp_path / f"spool-{i}") for i, run_id in members]
    try:
        jobs[0].steps(1, 5, offset=0.0)
        jobs[1].steps(1, 5, offset=0.2)  # the better member
        expect(rows.nth(1).get_by_test_id("member-best")).to_contain_text("★", timeout=15_000)
        expect(rows.nth(0).get_by_test_id("member-best")).not_to_contain_text("★")
        expect(rows.nth(0)).to_contain_text("5/50")
        expect(rows.nth(1).get_by_test_id("state-badge")).to_have_text("running")
        best_line = plot.locator('[data-testid="pc-line"][data-best="true"]')
        expect(best_line).to_have_attribute("data-member", "1")
        # the metric axis follows the choice
        page.get_by_label("Plot metric").select_option(label="accuracy")
        expect(plot.get_by_test_id("pc-axis").nth(2)).to_have_attribute("data-key", "accuracy")
    finally:
        for job in jobs:
            job.close()
