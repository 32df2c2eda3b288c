"""Fixtures of the browser tests: a team with an owner and a cluster, a headless Debian
Chromium page, and a way to touch the database from a Playwright test."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.db import connections
from playwright.sync_api import Page, sync_playwright

from tests.platform.factories import ClusterFactory, MembershipFactory, TeamFactory, UserFactory

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip
PASSWORD = "golden-path-pw"


def orm(fn, *args):
    """Run `fn` in a thread of its own: Playwright's sync API keeps an event loop in the
    test's thread, where Django refuses database calls (and async_to_sync broadcasts)."""

    def call():
        try:
            return fn(*args)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result()


def log_in(page: Page, base: str, username: str = "ada") -> None:
    page.goto(f"{base}/login")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("button", name="Log out").wait_for()


@pytest.fixture
def people():
    """Team "RL lab", its owner "ada", and a cluster that runs torch and vLLM."""
    team = TeamFactory(name="RL lab", slug="rl-lab")
    owner = UserFactory(username="ada", password=PASSWORD)
    MembershipFactory(team=team, user=owner, role="owner")
    ClusterFactory(name="local", backends=["torch", "vllm"])
    return team, owner


@pytest.fixture
def browser_page():
    """A 1280×800 page of headless Debian Chromium; fails the test on any uncaught error."""
    if not (REPO / "frontend" / "dist" / "index.html").is_file():
        pytest.fail("the browser app is not built: run `make frontend`")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            yield page
        finally:
            browser.close()
        assert not errors, f"uncaught errors in the page: {errors}"
