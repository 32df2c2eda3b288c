"""Multi-turn environments in the browser (docs/environments.md), in Chromium against the
real server: the launcher lists the environments the chosen cluster offers and sets one's
typed keys; the run's "job" (the real Reporter posting to the real ingest, nothing
dispatches here) reports episode metrics and a step of samples, one of them an episode;
the run page draws the episode/* panels and the inspector shows the episode turn by turn,
the environment's tokens marked as not trained on, each model turn's adapter version."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from paddock.clusters.models import RayCluster
from paddock.experiments.models import Experiment, Run
from tests.e2e.conftest import log_in, orm
from tests.e2e.test_golden_path import Job
from tests.platform.factories import ClusterFactory
from workers.names import EPISODE_METRICS

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# what workers/envs/metrics.py `episode_turns` sends for a calculator episode: two calls,
# their answer (two tool messages, its tokens counted on the first), then the boxed total
# from a turn during which the adapter went from version 3 to 4
EPISODE = {
    "prompt": "Add 48+39+12.", "completion": "\\boxed{99}", "answer": "99",
    "reward": 1.0, "advantage": 0.7, "adapter_version": 3,
    "turns": [
        {"role": "model", "text": '<tool_call>{"name": "add", "arguments": {"a": 48, "b": 39}}'
         "</tool_call>", "tokens": 30, "masked": False, "adapter_version": 3,
         "adapter_versions": [3]},
        {"role": "tool", "name": "add", "text": "87", "tokens": 18, "masked": True},
        {"role": "tool", "name": "add", "text": "99", "tokens": 0, "masked": True},
        {"role": "model", "text": "\\boxed{99}", "tokens": 9, "masked": False,
         "adapter_version": 3, "adapter_versions": [3, 4]},
    ],
}  # fmt: skip
ONE_TURN = {"prompt": "7+8=", "completion": "16", "reward": 0.0, "advantage": -0.7,
            "adapter_version": 3}  # fmt: skip


def test_environments_in_the_launcher_and_an_episode_in_the_inspector(
    people, asgi_server, browser_page, tmp_path
):
    orm(lambda: ClusterFactory(name="games", backends=["torch"], environments=["wordle"]))
    page, base = browser_page, asgi_server.url
    log_in(page, base)

    # the launcher: any cluster of the team offers the built-ins and the games' wordle
    page.goto(f"{base}/launch")
    page.get_by_label("Experiment name").fill("calculator episodes")
    picker = page.get_by_label("Environment", exact=True)
    options = picker.locator("option")
    expect(options).to_have_text(["none: one turn a sample", "calculator", "http", "wordle"])
    expect(page.get_by_test_id("environments")).to_contain_text("calculator, http, wordle")
    expect(page.locator('[data-field="env.max_turns"]')).to_have_count(0)  # no env: one turn
    page.get_by_label("Cluster", exact=True).select_option(label="local (torch, vllm)")
    expect(options).to_have_text(["none: one turn a sample", "calculator", "http"])
    expect(page.get_by_test_id("environments")).to_contain_text("offered by cluster local")

    # picking one shows its typed keys, checked by the server as any field
    picker.select_option("calculator")
    turns = page.locator('[data-field="env.max_turns"] input')
    expect(turns).to_have_value("8")  # its default
    expect(page.locator('[data-field="env.tool_format"] select option')).to_have_text(
        ["auto", "hermes", "llama3"]
    )
    expect(page.locator('[data-field="env.server"]')).to_have_count(0)  # http's alone
    turns.fill("0")
    expect(page.locator('[data-field="env.max_turns"] .field-error')).to_be_visible()
    turns.fill("4")
    # http: its server's keys, the URL the server requires
    picker.select_option("http")
    url = page.locator('[data-field="env.server.url"]')
    expect(url.locator(".field-error")).to_be_visible(timeout=15_000)
    expect(turns).to_have_value("4")  # the keys typed stay
    picker.select_option("calculator")
    expect(url).to_have_count(0)
    expect(page.get_by_test_id("validation")).to_have_text("✓ valid", timeout=15_000)
    page.get_by_test_id("launch").click()
    expect(page.locator(".run-head h1")).to_have_text(re.compile(r"Run #\d+"))
    spec = orm(lambda: Experiment.objects.get(name="calculator episodes").config.spec)
    assert (spec["env"]["name"], spec["env"]["max_turns"]) == ("calculator", 4)
    run_id = orm(lambda: Run.objects.get().pk)

    # the job reports three steps of episodes, and a step of samples
    job = Job(run_id, base, tmp_path / "spool")
    try:
        for step in (1, 2, 3):
            job.reporter.metric(step, {
                "reward/mean": 0.2 * step, "episode/turns_mean": 1.5 + 0.1 * step,
                "episode/tool_calls": 10.0 + step, "episode/tool_errors": 1.0,
                "episode/env_s": 0.4, "episode/env_share": 0.12,
                "episode/truncated_frac": 0.05, "episode/failed": 0.0,
            })  # fmt: skip
        job.reporter.samples(3, [EPISODE, ONE_TURN])
        assert job.reporter.flush(timeout_s=10)

        # episode/* in their own group of titled panels, like any family of metrics
        group = page.get_by_test_id("chart-group-episode")
        for title in ("Turns per episode", "Tool calls", "Environment time (s)", "Failed episodes"):
            expect(group.get_by_test_id(f"chart-{title}")).to_have_attribute(
                "data-points", "3", timeout=10_000
            )
        drawn = group.locator("figure.chart-panel")
        expect(drawn).to_have_count(6)  # seven names, the tool calls and errors in one panel
        assert len(EPISODE_METRICS) == 7

        # the inspector: the episode turn by turn, the one-turn sample as before
        page.get_by_role("tab", name="samples").click()
        rows = page.locator(".samples-table tbody tr")
        expect(rows).to_have_count(2)
        expect(page.locator(".samples-table thead")).to_contain_text("Episode")
        episode = page.get_by_test_id("episode")
        expect(episode).to_have_count(1)
        expect(episode.locator(".episode-summary")).to_have_text(
            "2 model turns · 39 tokens trained on · 18 masked"
        )
        turns = episode.locator("li.turn")
        expect(turns).to_have_count(3)
        assert [turns.nth(i).get_attribute("data-role") for i in range(3)] == [
            "model", "tool", "model"
        ]  # fmt: skip
        # masked: the tool's answer alone, marked as not trained on, with both its messages
        expect(episode.locator("li.turn.masked")).to_have_count(1)
        expect(turns.nth(1).locator(".masked-mark")).to_have_text("masked · not trained on")
        expect(turns.nth(1).locator("pre")).to_have_text(["87", "99"])
        expect(episode.locator(".masked-mark")).to_have_count(1)
        expect(turns.nth(0).locator(".turn-version")).to_have_text("adapter v3")
        expect(turns.nth(2).locator(".turn-version")).to_have_text("adapter v3→v4")
        expect(rows.nth(1).locator("td").nth(1)).to_have_text("16")  # one turn: its text
        # the search reads the turns: the tool's output finds the episode
        page.get_by_label("Find in samples").fill("87")
        expect(rows).to_have_count(1)
        expect(rows.first.get_by_test_id("episode")).to_be_visible()
    finally:
        job.close()

    # without a healthy cluster nothing is offered, and the launcher says so
    orm(lambda: RayCluster.objects.update(healthy=False))
    page.goto(f"{base}/launch")
    expect(page.get_by_test_id("environments")).to_have_text(
        re.compile(r"^No cluster of the team offers an environment: runs are one turn a sample")
    )
    expect(page.get_by_label("Environment", exact=True).locator("option")).to_have_text(
        ["none: one turn a sample"]
    )
