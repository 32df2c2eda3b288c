"""The run list at the quickstart's window size (1280×800): every column, the right-hand
ones (tags, creator, created) included, inside the table's visible width, with runs whose
cells are as wide as they get (a long experiment name, a running run's time left, tags)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from paddock.experiments.control import run_request_pause
from paddock.experiments.launch import experiment_launch
from paddock.experiments.models import Run
from paddock.experiments.states import run_transition
from paddock.teams.access import actor_for
from tests.e2e.conftest import log_in, orm

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _demo_like_runs(team, owner) -> None:
    actor = actor_for(user=owner)
    spec = {"train": {"steps": 2000}}
    experiment_launch(actor=actor, team=team, name="Demo: tiny arithmetic, async GRPO",
                      spec=spec, backends=["torch", "vllm"], tags=["demo", "arith"])  # fmt: skip
    experiment_launch(actor=actor, team=team, name="quickstart tour", spec=spec)
    first, *_, last = Run.objects.order_by("pk")
    for state in ("dispatching", "starting", "running"):
        run_transition(run=first, to_state=state)
    Run.objects.filter(pk=first.pk).update(step=49)  # its progress says the time left
    for state in ("dispatching", "running"):
        run_transition(run=last, to_state=state)
    run_request_pause(actor=actor, run=last)  # its badge names the desired state


def test_every_column_of_the_run_list_is_visible_at_1280_px(people, asgi_server, browser_page):
    team, owner = people
    orm(_demo_like_runs, team, owner)
    page, base = browser_page, asgi_server.url
    log_in(page, base)
    table = page.get_by_test_id("runs-table")
    expect(table.locator("tbody tr")).to_have_count(3)
    expect(table.locator(".tag", has_text="arith").first).to_be_visible()
    scroller = page.locator(".runs-main .table-scroll")
    box = scroller.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 1280
    # the table fits its box: nothing to scroll to, no column cut off at the edge
    widths = scroller.evaluate("e => [e.scrollWidth, e.clientWidth]")
    assert widths[0] <= widths[1], f"the run list overflows its box: {widths}"
    for name in ("Tags", "Creator", "Created"):
        cell = table.locator("thead th", has_text=name)
        cell_box = cell.bounding_box()
        assert cell_box is not None and cell_box["x"] + cell_box["width"] <= box["x"] + box["width"]
    for row in table.locator("tbody tr").all():
        last = row.locator("td").last.bounding_box()
        assert last is not None and last["x"] + last["width"] <= box["x"] + box["width"] + 0.5
