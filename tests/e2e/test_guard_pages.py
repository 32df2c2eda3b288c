"""What guards a run, in Chromium against the real server: a NeMo-RL recipe pasted into the
launcher's Import tab fills the form (its base's values too) and lists what it left out; a
launch with the pre-flight box holds the runs, the verdict shows on the run page and a
member launches them anyway; an alarm fires on the run page, live, and is armed; the compare
page judges each engine. Nothing dispatches here: verdicts and metrics are stored as a job's
ingest and the beat would store them."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from paddock.experiments.alarms import run_alarms_judge
from paddock.experiments.metrics import metric_points_store
from paddock.experiments.models import Experiment, Run
from paddock.experiments.preflight import run_verdict_store
from paddock.experiments.states import run_transition
from tests.e2e.conftest import log_in, orm
from workers.events import PreflightCheck, PreflightEvent
from workers.names import PREFLIGHT_CHECKS

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
RECIPE = (Path(__file__).resolve().parents[1] / "platform" / "client" / "fixtures" / "peers"
          / "nemo-rl" / "grpo-qwen3-8B-base-1n8g-fsdp2-lora.yaml")  # fmt: skip


def _verdict(failing: str) -> PreflightEvent:
    checks = [
        PreflightCheck(
            name=n,
            status="fail" if n == failing else "pass",
            figure=f"{n} figure",
            message="the engine does not serve it" if n == failing else "",
        )  # fmt: skip
        for n in PREFLIGHT_CHECKS
    ]
    return PreflightEvent(time=time.time(), backend="torch", steps=3, checks=checks)


def test_import_preflight_alarms_and_the_engine_verdict(people, asgi_server, browser_page):
    page, base = browser_page, asgi_server.url
    log_in(page, base)

    # a NeMo-RL recipe with `defaults:` pasted whole: the base's lr and group size arrive
    page.goto(f"{base}/launch")
    page.get_by_role("tab", name="Import verl / NeMo-RL").click()
    page.get_by_label("Config to import").fill(RECIPE.read_text())
    page.get_by_test_id("import").click()
    report = page.get_by_test_id("import-report")
    expect(report).to_contain_text("Imported from NeMo-RL")
    expect(report).to_contain_text("nemo-rl: examples/configs/grpo_math_1B.yaml")
    expect(report).to_contain_text("logger.log_dir")
    expect(page.locator('[data-field="train.lr"] input')).to_have_value("0.000005")
    expect(page.locator('[data-field="algorithm.num_generations"] input')).to_have_value("16")

    # a plain spec with the pre-flight box: the run waits for the check
    page.goto(f"{base}/launch")
    page.get_by_label("Experiment name").fill("checked")
    page.get_by_label("Steps", exact=True).fill("40")
    page.get_by_test_id("preflight").check()
    expect(page.get_by_test_id("validation")).to_have_text("✓ valid", timeout=15_000)
    page.get_by_test_id("launch").click()
    # two runs, the check and the run: the app shows the experiment's runs
    expect(page).to_have_url(re.compile(r"\?experiment=\d+$"))
    experiment = orm(lambda: Experiment.objects.get(name="checked"))
    expect(page.get_by_test_id("runs-table")).to_contain_text("pre-flight")
    check = orm(lambda: Run.objects.get(experiment=experiment, purpose="preflight"))
    run = orm(lambda: Run.objects.get(experiment=experiment, purpose="train"))
    page.goto(f"{base}/runs/{run.pk}")
    panel = page.get_by_test_id("preflight-verdict")
    expect(panel).to_have_attribute("data-state", "pending")

    # its job's verdict: one check failed; the page says which and why, live
    def report_verdict():
        run_verdict_store(run_id=check.pk, verdict=_verdict("adapter_reaches_engine"))
        for state in ("dispatching", "starting", "running", "succeeded"):
            run_transition(run=Run.objects.get(pk=check.pk), to_state=state)

    orm(report_verdict)
    expect(panel).to_have_attribute("data-state", "failed", timeout=15_000)
    failed = panel.locator('[data-testid="preflight-check"][data-status="fail"]')
    expect(failed).to_have_count(1)
    expect(failed).to_contain_text("the engine does not serve it")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("preflight-override").click()
    expect(panel).to_have_attribute("data-state", "overridden")
    assert orm(lambda: Experiment.objects.get(pk=experiment.pk).preflight) == "overridden"

    # an alarm begins firing while the page is open; arming it pauses the run
    def collapse():
        r = Run.objects.get(pk=run.pk)
        for state in ("dispatching", "starting", "running"):
            run_transition(run=r, to_state=state)
        metric_points_store(run_id=r.pk, points=[
            ("entropy", s, float(s), 1.5 * math.exp(-max(0, s - 40) / 4)) for s in range(1, 81)
        ] + [("token_mult_prob_error", s, float(s), 1.0 + (0.2 if s > 60 else 0.0))
             for s in range(1, 81)])  # fmt: skip
        Run.objects.filter(pk=r.pk).update(step=80)
        run_alarms_judge(run_id=r.pk)

    orm(collapse)
    alarms = page.get_by_test_id("alarms")
    entropy = alarms.locator('[data-alarm="entropy_collapse"]')
    expect(entropy).to_have_attribute("data-firing", "true", timeout=15_000)
    expect(entropy.get_by_test_id("alarm-message")).to_contain_text("entropy fell to")
    page.get_by_test_id("arm-entropy_collapse").click()  # checked once the server armed it
    expect(page.get_by_test_id("arm-entropy_collapse")).to_be_checked()
    expect(page.locator(".run-head")).to_contain_text("pausing", timeout=15_000)  # the usual pause

    # the compare page: the engine drifts from its trainer, and the run's alarms show
    page.goto(f"{base}/experiments/{experiment.pk}/compare")
    verdict = page.get_by_test_id("engine-verdict")
    torch = verdict.locator('[data-backend="torch"]')
    expect(torch).to_have_attribute("data-verdict", "drifts", timeout=15_000)
    expect(verdict).to_contain_text("torch drifts from its trainer from step")
    expect(page.get_by_test_id("firing-alarms")).to_contain_text("entropy collapse")
