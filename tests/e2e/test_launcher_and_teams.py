"""The launcher's server-side checks inline, a clone with its diff, and the team switcher,
in Chromium against the real server (runs stay queued: nothing dispatches here)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from paddock.experiments.models import Experiment, Run
from tests.e2e.conftest import log_in, orm
from tests.platform.factories import MembershipFactory, TeamFactory

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
DIFF = "/api/v1/configs/diff"


def test_launch_clone_with_diff_and_switch_teams(people, asgi_server, browser_page):
    team, owner = people
    orm(lambda: MembershipFactory(team=TeamFactory(name="Vision", slug="vision"), user=owner,
                                  role="viewer"))  # fmt: skip
    page, base = browser_page, asgi_server.url
    log_in(page, base)

    # the server's validate_only finds what the schema cannot (a model path that does not
    # exist) and the form shows it on the field
    page.goto(f"{base}/launch")
    page.get_by_label("Experiment name").fill("first")
    page.get_by_label("Steps", exact=True).fill("40")
    path = page.locator('[data-field="model.path"]')
    path.locator("input").fill("/nonexistent/model")
    expect(path.locator(".field-error")).to_be_visible(timeout=15_000)
    expect(page.get_by_test_id("validation")).to_contain_text("problem")
    expect(page.get_by_test_id("launch")).to_be_disabled()
    path.locator("input").fill("")
    expect(page.get_by_test_id("validation")).to_have_text("✓ valid", timeout=15_000)
    page.get_by_test_id("launch").click()
    # one run: the app goes to its page
    expect(page.locator(".run-head h1")).to_have_text(re.compile(r"Run #\d+"))
    source = orm(lambda: Run.objects.get().pk)
    expect(page).to_have_url(re.compile(rf"/runs/{source}$"))

    # clone it with an edit: the diff against the source is shown before launch, the
    # server's (POST /configs/diff of the unsaved spec against the source's version)
    diffs = []  # (status, body) of each
    page.on("response", lambda r: diffs.append((r.status, r.request.post_data_json))
            if r.request.method == "POST" and r.url.endswith(DIFF)
            else None)  # fmt: skip
    page.goto(f"{base}/launch?clone={source}")
    page.get_by_label("Experiment name").fill("first, longer")
    # a spec the diff refuses has no edits to check: its refusal is shown on the field
    with page.expect_response(lambda r: r.url.endswith(DIFF) and r.status == 400) as answer:
        page.get_by_label("Steps", exact=True).fill("0")
    assert answer.value.json()["field"] == "b_spec.train.steps"
    steps = page.locator('[data-field="train.steps"]')
    expect(steps.locator(".field-error")).to_be_visible(timeout=15_000)
    expect(page.get_by_test_id("validation")).to_contain_text("problem")
    expect(page.get_by_test_id("launch")).to_be_disabled()
    page.get_by_label("Steps", exact=True).fill("60")
    diff = page.get_by_test_id("clone-diff")
    expect(diff).to_contain_text("train.steps")
    expect(diff.locator("tr", has_text="train.steps")).to_contain_text("60")
    source_config = orm(lambda: Run.objects.get(pk=source).experiment.config_id)
    status, body = diffs[-1]
    assert (status, body["a"], body["b_spec"]["train"]["steps"]) == (200, source_config, 60)
    expect(page.get_by_test_id("validation")).to_have_text("✓ valid", timeout=15_000)
    page.get_by_test_id("launch").click()
    expect(page.locator(".run-head h1")).not_to_have_text(f"Run #{source}")
    spec = orm(lambda: Experiment.objects.get(name="first, longer").config.spec)
    assert spec["train"]["steps"] == 60
    page.get_by_role("link", name="Runs", exact=True).click()
    table = page.get_by_test_id("runs-table")
    expect(table.locator("tbody tr")).to_have_count(2)

    # the team switcher: the other team has no runs; back again, both are there
    page.get_by_label("Team").select_option(label="Vision · viewer")
    expect(page.get_by_text("No runs yet")).to_be_visible()
    expect(page.get_by_role("link", name="Launch", exact=True)).to_have_count(0)  # a viewer
    page.get_by_label("Team").select_option(label="RL lab · owner")
    expect(table.locator("tbody tr")).to_have_count(2)
