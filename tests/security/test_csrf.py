"""CSRF on a real browser session: Django's test Client with enforce_csrf_checks, logged in
through the login endpoint (not force_login), so the cookie, the rotated token and the
session are the ones a browser would hold. Without the token every session write is 403 in
the API's one error shape (`csrf_failed`), nothing changes; with it the write goes through."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from paddock.teams.models import Role, Team

pytestmark = pytest.mark.django_db


def _post(client, url, body, token=None, method="post"):
    extra = {"HTTP_X_CSRFTOKEN": token} if token else {}
    return getattr(client, method)(url, json.dumps(body), content_type="application/json", **extra)


def _refused(reply, reason: str) -> None:
    assert reply.status_code == 403, reply.content[:300]
    assert reply["Content-Type"] == "application/json", reply.content[:300]
    answer = reply.json()
    assert answer["code"] == "csrf_failed" and answer["field"] is None, answer
    assert reason in answer["message"], answer


def test_a_session_write_without_the_token_gets_the_json_403_and_with_it_succeeds(world):
    browser = Client(enforce_csrf_checks=True)
    login = {"username": world.users_a[Role.OWNER].username, "password": "pw"}
    # no cookie yet: Django's middleware refuses the login itself (login CSRF)
    _refused(_post(browser, "/api/v1/session/login", login), "CSRF cookie not set")
    assert browser.get("/api/v1/session/csrf").status_code == 200
    _refused(_post(browser, "/api/v1/session/login", login), "CSRF token missing")
    _refused(_post(browser, "/api/v1/session/login", login, token="x" * 10), "incorrect length")
    assert browser.get("/api/v1/session/me").status_code == 401  # still nobody
    token = browser.cookies["csrftoken"].value
    ok = _post(browser, "/api/v1/session/login", login, token=token)
    assert ok.status_code == 200 and ok.json()["user"]["username"] == login["username"]

    # logged in: a DRF write with the session cookie and no token (a forged cross-site form)
    team = world.team_a
    url = f"/api/v1/teams/{team.pk}"
    _refused(_post(browser, url, {"name": "forged"}, method="patch"), "CSRF token missing")
    # the pre-login token was rotated at login: the stale one is refused too
    stale = _post(browser, url, {"name": "forged"}, token=token, method="patch")
    _refused(stale, "HTTP header incorrect")
    assert Team.objects.get(pk=team.pk).name != "forged"
    fresh = browser.cookies["csrftoken"].value
    assert fresh != token
    renamed = _post(browser, url, {"name": "renamed"}, token=fresh, method="patch")
    assert renamed.status_code == 200 and renamed.json()["name"] == "renamed"
    assert Team.objects.get(pk=team.pk).name == "renamed"
    # logout is a session write too
    _refused(_post(browser, "/api/v1/session/logout", {}), "CSRF token missing")
    assert browser.get("/api/v1/session/me").status_code == 200
    assert _post(browser, "/api/v1/session/logout", {}, token=fresh).status_code == 200
    assert browser.get("/api/v1/session/me").status_code == 401


def test_pages_outside_the_api_keep_djangos_html_refusal(world):
    browser = Client(enforce_csrf_checks=True)
    reply = browser.post("/admin/login/", {"username": "a-owner", "password": "pw"})
    assert reply.status_code == 403
    assert reply["Content-Type"].startswith("text/html")
    assert b"CSRF verification failed" in reply.content
