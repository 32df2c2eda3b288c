"""The browser app's session endpoints (paddock.teams.session_views): login with Django's
session and CSRF, who am I, logout. Plain HTTP through Django's test client with CSRF checks
on, as the browser meets them."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from tests.platform.factories import MembershipFactory, TeamFactory, UserFactory


def _csrf_client() -> tuple[Client, str]:
    client = Client(enforce_csrf_checks=True)
    response = client.get("/api/v1/session/csrf")
    assert response.status_code == 200
    return client, response.cookies["csrftoken"].value


def _post(client: Client, path: str, token: str, body: dict | None = None):
    return client.post(
        path, data=json.dumps(body or {}), content_type="application/json", HTTP_X_CSRFTOKEN=token
    )


@pytest.mark.django_db
def test_login_me_logout():
    team = TeamFactory(name="Alpha", slug="alpha")
    user = UserFactory(username="ada", password="s3cret-pass")
    MembershipFactory(team=team, user=user, role="admin")
    client, token = _csrf_client()

    assert client.get("/api/v1/session/me").json() == {
        "code": "not_authenticated", "message": "not logged in", "field": None,
    }  # fmt: skip

    credentials = {"username": "ada", "password": "s3cret-pass"}
    response = _post(client, "/api/v1/session/login", token, credentials)
    assert response.status_code == 200
    body = response.json()
    assert body["user"]["username"] == "ada"
    assert body["teams"] == [{"id": team.pk, "name": "Alpha", "slug": "alpha", "role": "admin"}]

    # login rotates the CSRF token: the SPA reads the new cookie
    token = response.cookies["csrftoken"].value
    assert client.get("/api/v1/session/me").json()["user"]["id"] == user.pk
    assert _post(client, "/api/v1/session/logout", token).status_code == 200
    assert client.get("/api/v1/session/me").status_code == 401


@pytest.mark.django_db
def test_login_errors_name_the_field():
    UserFactory(username="ada", password="s3cret-pass")
    client, token = _csrf_client()
    wrong = _post(client, "/api/v1/session/login", token, {"username": "ada", "password": "nope"})
    assert wrong.status_code == 400
    assert wrong.json() == {
        "code": "invalid_credentials", "message": "wrong username or password", "field": "password",
    }  # fmt: skip
    missing = _post(client, "/api/v1/session/login", token, {"password": "x"})
    assert missing.json()["field"] == "username"


@pytest.mark.django_db
def test_login_needs_the_csrf_token():
    UserFactory(username="ada", password="s3cret-pass")
    client, _ = _csrf_client()
    response = client.post(
        "/api/v1/session/login",
        data=json.dumps({"username": "ada", "password": "s3cret-pass"}),
        content_type="application/json",
    )
    assert response.status_code == 403
