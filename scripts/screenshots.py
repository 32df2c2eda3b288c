"""Regenerate the quickstart's screenshots (docs/images/*.png) from a running Paddock.

Start the platform as the quickstart does (`make up`, which launches the demo experiments),
then, from the repository root, while it runs:

    .venv/bin/python scripts/screenshots.py            # --url, --credentials, --out, --only

It drives Debian's Chromium through Playwright along the quickstart's browser journey: the
login page, the run list with the demo runs, an API token created on the team page (and
revoked again at the end), an experiment launched from the form, its run page while it
trains, the same run paused (with the checkpoint the pause wrote) and resumed, the demo's
torch and vLLM runs compared, and a pool's page (docs/pools.md) with two runs of the tiny
task sharing one pool job. Each step waits for what its picture must show (a run running,
points on a chart, a badge that says paused, the pool's members reporting throughput), so a
picture never shows a page still loading. It launches two experiments of its own
("quickstart tour", and "pool tour" with two seeds in one `auto` pool) and aborts their
runs at the end. `--only runs,compare` takes those pictures alone and skips the steps that
only the others need (the token, the launch and its pause). `--compare-name TEXT` compares
the demo experiment whose name holds TEXT (say `calculator`) instead of the first that is
ready; the compare step prints the page's verdicts either way.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import yaml
from playwright.sync_api import Locator, Page, expect, sync_playwright

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run"]
VIEWPORT = {"width": 1280, "height": 800}
TIMEOUT_MS = 180_000  # a step of the tour on a loaded 2-core machine
START_MS = 1_800_000  # a launched run waits for the demo runs to free the local cluster
NAME = "quickstart tour"
POOL_NAME = "pool tour"
# steps both runs of a comparison have trained before its picture: the divergence verdict's
# 20-step means over its 40-step persistence (frontend/src/compare/divergence.ts)
COMPARE_STEPS = 60
PICTURES = (
    "login", "token", "launcher", "run", "run-paused", "run-checkpoints", "compare", "pool",
    "runs",
)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument(
        "--credentials",
        type=Path,
        default=REPO / ".paddock" / "admin-credentials",
        help="the `admin / password` file `paddock up` writes under PADDOCK_HOME",
    )
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images")
    parser.add_argument(
        "--only",
        type=lambda text: set(text.split(",")),
        default=set(PICTURES),
        help=f"comma-separated pictures to take, of {','.join(PICTURES)} (default: all)",
    )
    parser.add_argument(
        "--compare-name", default="", help="compare the demo experiment whose name holds this"
    )
    args = parser.parse_args(argv)
    if args.only - set(PICTURES):
        parser.error(f"unknown pictures: {sorted(args.only - set(PICTURES))}")
    username, _, password = args.credentials.read_text().strip().partition(" / ")
    args.out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(TIMEOUT_MS)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            WANTED.clear()
            WANTED.update(args.only)
            COMPARE_NAME[0] = args.compare_name
            tour(page, args.url.rstrip("/"), username, password, args.out)
        finally:
            browser.close()
    if errors:
        print(f"uncaught errors in the page: {errors}", file=sys.stderr)
        return 1
    return 0


def shot(page: Page, out: Path, name: str, part: Locator | None = None) -> None:
    """The top of the page as a 1280×800 window shows it, or one part of the page; nothing
    when the picture was not asked for (--only)."""
    if name not in WANTED:
        return
    page.evaluate("window.scrollTo(0, 0)")  # else the sticky top bar lands mid-page
    page.wait_for_timeout(500)  # let charts finish their resize
    path = out / f"{name}.png"
    if part is None:
        page.screenshot(path=str(path))
    else:
        part.screenshot(path=str(path))
    print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")


def api(page: Page, base: str, path: str) -> dict | list:
    """A GET of the REST API with the browser's session cookie."""
    response = page.request.get(f"{base}/api/v1{path}")
    assert response.ok, f"GET {path}: {response.status} {response.text()[:200]}"
    return json.loads(response.text())


def items(body: dict | list) -> list[dict]:
    return body["results"] if isinstance(body, dict) else body


def post(page: Page, base: str, path: str, body: dict) -> dict:
    """A POST of the REST API with the browser's session and its CSRF token."""
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    response = page.request.post(
        f"{base}/api/v1{path}", data=json.dumps(body),
        headers={"Content-Type": "application/json", "X-CSRFToken": csrf, "Referer": f"{base}/"},
    )  # fmt: skip
    assert response.ok, f"POST {path}: {response.status} {response.text()[:300]}"
    return json.loads(response.text())


WANTED: set[str] = set(PICTURES)  # the pictures asked for (--only)
COMPARE_NAME = [""]  # the demo experiment to compare: one whose name holds this (--compare-name)


def pool_launch(page: Page, base: str) -> list[int]:
    """Two runs of the tiny task launched into one `auto` pool (two seeds of one
    experiment). Returns the runs' ids."""
    team = api(page, base, "/session/me")["teams"][0]["id"]
    spec = yaml.safe_load((REPO / "examples" / "tiny-async.yaml").read_text())
    spec["train"]["steps"] = 2000
    spec.setdefault("resources", {})["pool"] = "auto"
    launched = post(page, base, "/experiments", {"team": team, "name": POOL_NAME, "spec": spec,
                                                 "seeds": 2})  # fmt: skip
    return [r["id"] for r in launched["runs"]]


def pool_shot(page: Page, base: str, out: Path, runs: list[int]) -> None:
    """The pool's page once its runs have all reported their throughput."""
    deadline = time.monotonic() + START_MS / 1000
    while True:
        pools = [p for p in items(api(page, base, "/pools"))
                 if {m["run"] for m in p["members"] if not m["left_at"]} >= set(runs)]  # fmt: skip
        reporting = [p for p in pools
                     if all("throughput/tokens_per_s" in m["latest"] for m in p["members"]
                            if m["run"] in runs)]  # fmt: skip
        if reporting:
            break
        assert time.monotonic() < deadline, f"the pool tour's runs {runs} never reported"
        page.wait_for_timeout(3000)
    page.goto(f"{base}/pools/{reporting[0]['id']}")
    expect(page.get_by_test_id("pool-members").locator("tbody tr")).to_have_count(len(runs))
    shot(page, out, "pool")


def demo_to_compare(page: Page, base: str) -> int:
    """A demo experiment with a torch and a vLLM run that have both trained COMPARE_STEPS
    (waiting for one whose second engine is still on its way), else one with a run that
    has."""
    deadline = time.monotonic() + START_MS / 1000
    while True:
        demo = [r for r in items(api(page, base, "/runs"))
                if r["experiment_name"] not in (NAME, POOL_NAME)
                and COMPARE_NAME[0] in r["experiment_name"]]  # fmt: skip
        trained: dict[int, set[str]] = {}
        for run in demo:
            if run["step"] >= COMPARE_STEPS:
                trained.setdefault(run["experiment"], set()).add(run["backend"])
        pairs = [e for e, backends in trained.items() if {"torch", "vllm"} <= backends]
        coming = [r for r in demo if r["experiment"] in trained and r["step"] < COMPARE_STEPS
                  and r["state"] not in ("succeeded", "failed", "aborted")]  # fmt: skip
        if pairs or (trained and not coming):
            return (pairs or list(trained))[0]
        assert time.monotonic() < deadline, "no demo run trained"
        page.wait_for_timeout(3000)


def tour(page: Page, base: str, username: str, password: str, out: Path) -> None:
    # 1. log in
    page.goto(f"{base}/")
    expect(page).to_have_url(f"{base}/login")
    page.get_by_label("Username").fill(username)
    shot(page, out, "login")
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()

    # 2. the run list (its picture is taken at the end, with the tour's run in it)
    table = page.get_by_test_id("runs-table")
    expect(table.locator("tbody tr").first).to_be_visible()

    # 3. an API token for the CLI, shown once
    if "token" in WANTED:
        token_step(page, out)
    # 4-6. launch from the form, the run page, pause and resume
    launching = WANTED & {"launcher", "run", "run-paused", "run-checkpoints"}
    run_id = launch_step(page, out) if launching else None
    rest_of_tour(page, base, out, table, run_id)


def token_step(page: Page, out: Path) -> None:
    page.get_by_role("link", name="Team", exact=True).click()
    page.get_by_label("Token name").fill("laptop")
    page.get_by_role("button", name="Create token").click()
    expect(page.get_by_test_id("token-secret")).to_be_visible()
    shot(page, out, "token")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("tokens-table").get_by_role("button", name="Revoke").first.click()
    expect(page.get_by_test_id("tokens-table").get_by_text("revoked").first).to_be_visible()


def launch_step(page: Page, out: Path) -> int:
    """Returns the launched run's id."""
    # 4. launch from the form: the tiny arithmetic task, long enough to pause and resume
    page.get_by_role("link", name="Launch", exact=True).click()
    page.get_by_label("Experiment name").fill(NAME)
    page.get_by_label("Steps", exact=True).fill("2000")
    expect(page.get_by_test_id("validation")).to_have_text("✓ valid")
    shot(page, out, "launcher")
    page.get_by_test_id("launch").click()

    # 5. one run launched: the app opens its page, which fills in live once it trains (it
    # waits in queued while the demo runs hold the local cluster's CPUs)
    expect(page).to_have_url(re.compile(r"/runs/\d+$"))
    run_id = int(page.url.rsplit("/", 1)[1])
    badge = page.locator(".run-head [data-testid='state-badge']")
    expect(badge).to_have_attribute("data-state", "running", timeout=START_MS)
    reward = page.get_by_test_id("chart-Reward")
    expect(reward.locator("canvas")).to_be_visible()
    page.wait_for_function(
        "el => Number(el.dataset.points) >= 20", arg=reward.element_handle(), timeout=TIMEOUT_MS
    )
    shot(page, out, "run")

    # 6. pause: the job checkpoints and stops; then resume from that checkpoint
    page.get_by_test_id("run-pause").click()
    expect(badge).to_have_attribute("data-state", "paused")
    shot(page, out, "run-paused")
    page.get_by_role("tab", name="checkpoints").click()
    expect(page.get_by_role("link", name="Download").first).to_be_visible()
    shot(page, out, "run-checkpoints", page.locator(".run-tabs"))
    page.get_by_test_id("run-resume").click()
    expect(badge).to_have_attribute("data-state", "running")
    return run_id


def rest_of_tour(page: Page, base: str, out: Path, table: Locator, run_id: int | None) -> None:
    # (the pool tour's runs are launched first: they train while the demo's finish)
    pooled = pool_launch(page, base) if WANTED & {"pool", "runs"} else []

    try:
        # 7. compare the demo's torch and vLLM runs of one experiment (once both have trained)
        if "compare" in WANTED:
            experiment = demo_to_compare(page, base)
            page.goto(f"{base}/experiments/{experiment}/compare")
            expect(page.locator(".compare-page")).to_have_attribute("data-stage", "full")
            expect(page.get_by_test_id("chart-Reward").locator("canvas")).to_be_visible()
            for verdict in ("verdict", "engine-verdict"):
                print(f"{verdict}: {page.get_by_test_id(verdict).all_inner_texts()}")
            shot(page, out, "compare")

        # 8. a pool: two runs sharing one pool job (docs/pools.md)
        if pooled:
            pool_shot(page, base, out, pooled)

        # the run list again: the tour's runs training beside the demo's
        page.get_by_role("link", name="Runs", exact=True).click()
        for launched in ([] if run_id is None else [run_id]) + pooled:
            row = table.locator(f'tr[data-run-id="{launched}"]')
            expect(row.get_by_test_id("last-reward")).not_to_have_text("—")
        shot(page, out, "runs")
    finally:  # leave nothing of the tour running
        for run in pooled:
            post(page, base, f"/runs/{run}/abort", {})
    if run_id is not None:
        page.goto(f"{base}/runs/{run_id}")
        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_test_id("run-abort").click()


if __name__ == "__main__":
    sys.exit(main())
