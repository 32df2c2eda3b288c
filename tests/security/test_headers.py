"""Every HTML page carries a Content-Security-Policy that allows no inline or foreign
script (the browser app, the admin, the API docs); the API docs load Swagger UI from this
server, not a CDN; API answers are not cached, the one with a new token's secret above all."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.test import Client

from paddock.teams.models import Role

pytestmark = pytest.mark.django_db


def _policy(reply) -> dict[str, list[str]]:
    header = reply.get("Content-Security-Policy")
    assert header, (reply.request["PATH_INFO"], dict(reply.headers))
    directives = {}
    for part in filter(None, (p.strip() for p in header.split(";"))):
        name, *values = part.split()
        directives[name] = values
    return directives


def _assert_strict(reply) -> None:
    policy = _policy(reply)
    scripts = policy.get("script-src", policy.get("default-src"))
    assert scripts == ["'self'"], policy  # no 'unsafe-inline', no 'unsafe-eval', no hosts
    assert policy["object-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
    assert policy["base-uri"] == ["'self'"] and "form-action" in policy


def _inline_scripts(html: str) -> list[str]:
    return [m for m in re.findall(r"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", html, re.S)
            if m.strip()]  # fmt: skip


def test_the_browser_app_and_its_routes_have_a_strict_policy(client):
    for path in ("/", "/experiments/7", "/runs/3/metrics", "/login"):
        reply = client.get(path)
        assert reply.status_code == 200 and reply["Content-Type"].startswith("text/html")
        _assert_strict(reply)
        html = b"".join(reply.streaming_content if reply.streaming else [reply.content])
        assert not _inline_scripts(html.decode()), path  # the policy would block them


def test_the_built_index_has_no_inline_script():
    index = settings.FRONTEND_DIST / "index.html"
    if not index.is_file():
        pytest.skip("frontend/dist is not built here (make up builds it)")
    assert not _inline_scripts(index.read_text())


def test_the_admin_pages_have_the_policy(world):
    anonymous = Client()
    _assert_strict(anonymous.get("/admin/login/"))
    staff = world.users_a[Role.OWNER]
    staff.is_staff = staff.is_superuser = True
    staff.save()
    browser = Client()
    browser.force_login(staff)
    for path in ("/admin/", "/admin/teams/team/", f"/admin/teams/team/{world.team_a.pk}/change/"):
        reply = browser.get(path)
        assert reply.status_code == 200, path
        _assert_strict(reply)


def test_the_api_docs_load_swagger_ui_from_this_server(world, client_as):
    client = client_as(world.users_a[Role.VIEWER])
    page = client.get("/api/v1/docs/")
    assert page.status_code == 200
    _assert_strict(page)
    html = page.content.decode()
    assert not _inline_scripts(html)
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources and all(s.startswith("/") for s in sources), sources  # nothing off-site
    for source in sources:
        reply = client.get(source)
        assert reply.status_code == 200, source
        if reply.streaming:
            b"".join(reply.streaming_content)
    script = client.get(next(s for s in sources if "script" in s))
    assert script["Content-Type"].startswith("application/javascript")


def test_a_new_tokens_secret_is_never_cached(world, client_as):
    client = client_as(world.users_a[Role.MEMBER])
    reply = client.post(f"/api/v1/teams/{world.team_a.pk}/tokens", {"name": "t"}, format="json")
    assert reply.status_code == 201 and reply.json()["token"].startswith("pdk_")
    assert "no-store" in reply["Cache-Control"]
    # and every API answer by default: they are one user's data
    for path in ("/api/v1/me", "/api/v1/experiments", "/api/v1/session/me"):
        assert "no-store" in client.get(path)["Cache-Control"], path


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_browser_runs_the_app_and_the_docs_under_the_policy(paddock_server, world, launched):
    """Headless Chromium: the policy blocks nothing the app or Swagger UI need (a violation
    is reported on the console), and both render."""
    from playwright.sync_api import sync_playwright

    from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS

    if not (settings.FRONTEND_DIST / "index.html").is_file():
        pytest.skip("frontend/dist is not built here (make up builds it)")
    user = world.users_a[Role.OWNER]
    user.set_password("pw-for-the-browser")
    user.save()
    base = paddock_server.url
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            problems: list[str] = []
            page.on("pageerror", lambda exc: problems.append(str(exc)))
            page.on("console", lambda m: problems.append(m.text)
                    if "Content Security Policy" in m.text or "Content-Security-Policy" in m.text
                    else None)  # fmt: skip
            page.goto(f"{base}/login")
            page.get_by_label("Username").fill(user.username)
            page.get_by_label("Password").fill("pw-for-the-browser")
            page.get_by_role("button", name="Sign in").click()
            page.get_by_role("button", name="Log out").wait_for()
            page.goto(f"{base}/runs/{launched[0]['runs'][0]['id']}")
            page.wait_for_timeout(3000)  # its fetches and websocket under the policy
            page.goto(f"{base}/api/v1/docs/")
            page.locator("#swagger-ui .information-container").wait_for(timeout=30_000)
            assert not problems, problems
        finally:
            browser.close()
