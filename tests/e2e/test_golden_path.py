"""The golden path through the browser app, in Debian's Chromium against a real server.

uvicorn serves the built SPA and the API on the test database; the "job" is the real
Reporter of `workers` posting to the real ingest endpoint (nothing dispatches to Ray here:
the test plays the job's part, acknowledging each control like a driver would). Every page
visited is saved under docs/screenshots/ (or $PADDOCK_SCREENSHOTS)."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest
from django.conf import settings
from playwright.sync_api import Page, expect

from paddock.experiments.models import Run
from paddock.experiments.states import run_transition
from paddock.experiments.tokens import run_token_mint
from tests.e2e.conftest import PASSWORD, REPO, orm
from workers.report import Reporter, ReporterConfig

SHOTS = Path(os.environ.get("PADDOCK_SCREENSHOTS", REPO / "docs" / "screenshots"))

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def dispatched(run_id: int) -> tuple[Run, str]:
    """What the dispatcher does before a job starts: dispatch 1, and its ingest token."""
    Run.objects.filter(pk=run_id).update(dispatch_count=1)
    run = Run.objects.get(pk=run_id)
    run_transition(run=run, to_state="dispatching")
    return run, run_token_mint(run=run, dispatch=1)


class Job:
    """The job side of one run: a Reporter on the run's token, which acknowledges every
    desired state the ingest replies carry (as the GRPO driver does after checkpointing)."""

    def __init__(self, run_id: int, url: str, spool: Path):
        self.run_id, self.step = run_id, 0
        _, token = orm(dispatched, run_id)
        config = ReporterConfig(
            url=url, run_id=run_id, token=token, dispatch=1, spool_dir=spool, interval_s=0.2
        )
        self.reporter = Reporter(config, on_desired_state=self._follow)
        self.state = "running"
        self.reporter.status("running", detail="started")

    def _follow(self, desired: str) -> None:
        if desired != self.state:
            self.state = desired
            if desired == "paused":
                self._checkpoint()
            self.reporter.status(desired, detail=f"job acknowledges {desired}")

    def _checkpoint(self) -> None:
        """What a pause writes first: a checkpoint directory in the artifact store."""
        uri = f"{settings.PADDOCK_ARTIFACTS_URI}/runs/{self.run_id}/step-{self.step}"
        directory = Path(uri.removeprefix("file://"))
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "adapter_model.safetensors").write_bytes(b"\0" * 4096)
        self.reporter.checkpoint(self.step, uri, adapter_version=self.step, size=4096)

    def steps(self, first: int, last: int, offset: float = 0.0) -> None:
        self.step = last
        for step in range(first, last + 1):
            reward = 0.2 + 0.6 * (1 - math.exp(-step / 15)) + offset + 0.03 * math.sin(step)
            self.reporter.metric(step, {
                "reward/mean": reward, "accuracy": reward * 0.9, "loss/policy": 0.5 / (step + 1),
                "kl": 0.001 * step, "token_mult_prob_error": 1.0 + 0.002 * abs(math.sin(step)),
                "staleness/mean": 0.5, "staleness/max": 1, "throughput/tokens_per_s": 900 + step,
                "tokens/total": 512 * step, "time/step_s": 0.4 + 0.01 * (step % 3),
            })  # fmt: skip
        self.reporter.log(f"step {last}: reward {reward:.3f}")
        self.reporter.samples(last, [
            {"prompt": "12+30=", "completion": "42", "reward": 1.0, "advantage": 0.8,
             "adapter_version": last - 1},
            {"prompt": "7+8=", "completion": "16", "reward": 0.0, "advantage": -0.8,
             "adapter_version": last - 1},
        ])  # fmt: skip
        assert self.reporter.flush(timeout_s=10)

    def close(self) -> None:
        self.reporter.close(timeout_s=5)


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")  # else the sticky top bar lands mid-page
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_golden_path(people, asgi_server, browser_page, tmp_path):
    page, base = browser_page, asgi_server.url

    # log in
    page.goto(f"{base}/")
    expect(page).to_have_url(re.compile(r"/login$"))
    shot(page, "login")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_text("No runs yet")).to_be_visible()

    # launch a tiny experiment on torch and vLLM from the form
    page.get_by_role("link", name="Launch", exact=True).click()
    page.get_by_label("Experiment name").fill("arith torch vs vllm")
    page.get_by_label("Steps", exact=True).fill("40")
    page.get_by_test_id("backend-vllm").check()
    expect(page.get_by_test_id("validation")).to_have_text("✓ valid", timeout=15_000)
    shot(page, "launcher")
    page.get_by_test_id("launch").click()

    # the runs table shows both runs, queued
    table = page.get_by_test_id("runs-table")
    expect(table.locator("tbody tr")).to_have_count(2)
    expect(table.get_by_test_id("state-badge").first).to_have_text("queued")
    runs = dict(orm(lambda: list(Run.objects.values_list("backend", "pk"))))
    assert set(runs) == {"torch", "vllm"}

    # the jobs start and report; the table follows over the experiment's stream
    jobs = [Job(runs["torch"], base, tmp_path / "t"), Job(runs["vllm"], base, tmp_path / "v")]
    try:
        jobs[0].steps(1, 20)
        jobs[1].steps(1, 20, offset=-0.01)
        for pk in runs.values():
            row = table.locator(f'tr[data-run-id="{pk}"]')
            expect(row.get_by_test_id("state-badge")).to_have_text("running", timeout=10_000)
            expect(row.get_by_test_id("last-reward")).not_to_have_text("—", timeout=10_000)
        shot(page, "runs")

        # tick both runs and compare them from the table
        for pk in runs.values():
            page.get_by_label(f"select run {pk}").check()
        page.get_by_role("button", name="Compare 2 runs").click()
        expect(page.get_by_test_id("verdict")).to_contain_text("torch and vllm")
        page.go_back()

        # the run page: charts fill from history, then move with live points
        page.get_by_role("link", name=f"#{runs['torch']}").click()
        reward = page.get_by_test_id("chart-Reward")
        expect(reward.locator("canvas")).to_be_visible(timeout=10_000)
        expect(reward).to_have_attribute("data-points", "20")
        jobs[0].steps(21, 30)
        expect(reward).to_have_attribute("data-points", "30", timeout=10_000)
        expect(page.get_by_test_id("latest-reward/mean")).not_to_have_text("—")
        page.get_by_role("tab", name="samples").click()
        expect(page.get_by_text("12+30=")).to_be_visible()
        page.get_by_role("tab", name="logs").click()
        expect(page.get_by_test_id("log-tail")).to_contain_text("step 30")
        shot(page, "run")

        # pause: the job acknowledges, the badge changes live; then resume
        badge = page.locator(".run-head [data-testid='state-badge']")
        expect(badge).to_have_attribute("data-state", "running")
        page.get_by_test_id("run-pause").click()
        expect(badge).to_have_attribute("data-state", "paused", timeout=10_000)
        expect(page.get_by_test_id("run-pause")).to_be_disabled()
        # the pause wrote a checkpoint: listed at once, downloadable
        page.get_by_role("tab", name="checkpoints").click()
        with page.expect_download() as download:
            page.get_by_role("link", name="Download").click()
        assert download.value.suggested_filename == f"run{runs['torch']}-step30.tar"
        shot(page, "run-paused")
        page.get_by_test_id("run-resume").click()
        expect(badge).to_have_attribute("data-state", "running", timeout=10_000)

        # compare: both backends overlaid, the verdict, the config diff
        page.get_by_role("link", name="compare backends").click()
        expect(page.get_by_test_id("verdict")).to_contain_text("torch and vllm")
        expect(page.get_by_test_id("config-diff")).to_contain_text("rollout.backend")
        expect(page.get_by_test_id("chart-Reward").locator("canvas")).to_be_visible()
        # read in stages (reward by stride, the other keys, then min/max): all of them in
        expect(page.locator(".compare-page")).to_have_attribute("data-stage", "full")
        expect(page.get_by_test_id("chart-KL").locator("canvas")).to_be_visible()
        # the divergence row: the reward difference beside token_mult_prob_error per backend
        divergence = page.get_by_test_id("divergence")
        expect(divergence.get_by_test_id("chart-Reward difference torch − vllm")).to_be_visible()
        tmpe = divergence.get_by_test_id("chart-token_mult_prob_error")
        expect(tmpe.locator(".u-legend")).to_contain_text("vllm")
        shot(page, "compare")
    finally:
        for job in jobs:
            job.close()

    # team admin: a token is shown once, then revoked
    page.get_by_role("link", name="Team", exact=True).click()
    page.get_by_label("Token name").fill("laptop")
    page.get_by_role("button", name="Create token").click()
    secret = page.get_by_test_id("token-secret").locator("code").inner_text()
    prefix = page.get_by_test_id("tokens-table").locator("code").first.inner_text().rstrip("…")
    assert prefix in secret and len(secret) > len(prefix) + 16
    shot(page, "team")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Revoke").click()
    expect(page.get_by_test_id("tokens-table").get_by_text("revoked")).to_be_visible()

    # narrow window: still usable
    page.set_viewport_size({"width": 420, "height": 800})
    page.goto(f"{base}/runs/{runs['torch']}")
    expect(page.get_by_test_id("chart-Reward").locator("canvas")).to_be_visible()
    shot(page, "run-narrow")

    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/login$"))
