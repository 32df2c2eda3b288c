"""X-Forwarded-For is believed only from PADDOCK_TRUSTED_PROXIES: a client rotating the
header is still one address to the login limit and to the audit log, through the Django
views and through the server as `paddock up` runs it; behind a configured proxy, the
client is the address that proxy saw."""

from __future__ import annotations

import itertools
import json
import os

import pytest
import requests
from django.test import Client

from paddock.http.client_address import client_address
from paddock.teams.models import AuditEvent, Role
from paddock.teams.services import api_token_create

_addresses = itertools.count(1)


@pytest.fixture
def ip() -> str:
    return f"10.{os.getpid() % 250}.{200 + next(_addresses) % 50}.{os.getpid() % 199 + 1}"


@pytest.mark.parametrize(
    ("trusted", "peer", "header", "client"),
    [
        ([], "198.51.100.7", "203.0.113.9", "198.51.100.7"),  # nobody trusted: the peer
        (["10.0.0.0/8"], "198.51.100.7", "203.0.113.9", "198.51.100.7"),  # not a proxy
        (["10.0.0.0/8"], "10.1.2.3", "203.0.113.9", "203.0.113.9"),
        (["10.0.0.0/8"], "10.1.2.3", "1.1.1.1, 203.0.113.9", "203.0.113.9"),  # forged left
        (["10.0.0.0/8"], "10.1.2.3", "203.0.113.9, 10.9.9.9", "203.0.113.9"),  # two proxies
        (["10.0.0.0/8"], "10.1.2.3", "10.4.4.4, 10.9.9.9", "10.4.4.4"),  # all proxies
        (["10.0.0.0/8"], "10.1.2.3", "not-an-ip", "10.1.2.3"),
        (["10.0.0.0/8"], "10.1.2.3", "garbage, 203.0.113.9", "203.0.113.9"),
        (["10.0.0.0/8"], "10.1.2.3", "", "10.1.2.3"),
        (["10.0.0.0/8"], "10.1.2.3", "[2001:db8::1]:443", "2001:db8::1"),
        (["10.0.0.0/8"], "::ffff:10.1.2.3", "203.0.113.9", "203.0.113.9"),  # v4-mapped peer
        (["127.0.0.1", "::1"], "::1", "203.0.113.9:5555", "203.0.113.9"),
        (["10.0.0.0/8"], None, "203.0.113.9", None),
    ],
)
def test_the_client_address(settings, trusted, peer, header, client):
    settings.PADDOCK_TRUSTED_PROXIES = trusted
    assert client_address(peer, header) == client


def test_a_bad_trusted_proxies_setting_fails_the_start():
    from paddock.environment import cidrs_from

    name = "PADDOCK_TRUSTED_PROXIES"
    assert cidrs_from(name, " 10.0.0.0/8, 127.0.0.1 ,") == ["10.0.0.0/8", "127.0.0.1"]
    with pytest.raises(ValueError, match="PADDOCK_TRUSTED_PROXIES: 'localhost'"):
        cidrs_from(name, "10.0.0.0/8,localhost")


def _login(client: Client, username: str, forwarded: str):
    return client.post(
        "/api/v1/session/login", json.dumps({"username": username, "password": "wrong"}),
        content_type="application/json", HTTP_X_FORWARDED_FOR=forwarded,
    )  # fmt: skip


@pytest.mark.django_db
def test_a_rotated_forwarded_for_does_not_escape_the_login_limit(settings, ip):
    settings.PADDOCK_RATE_LIMITS = {"login": (3, 300), "auth": (5, 60)}
    client = Client(REMOTE_ADDR=ip)
    # a new username and a new forged address each time: only the real address repeats
    codes = [_login(client, f"guess-{ip}-{i}", f"203.0.113.{i}").status_code for i in range(5)]
    assert codes == [400, 400, 400, 429, 429]


@pytest.mark.django_db
def test_behind_a_trusted_proxy_each_client_has_its_own_count(settings, ip):
    settings.PADDOCK_RATE_LIMITS = {"login": (3, 300), "auth": (5, 60)}
    settings.PADDOCK_TRUSTED_PROXIES = [ip]
    proxy = Client(REMOTE_ADDR=ip)
    first = [_login(proxy, f"p-{ip}-{i}", f"192.0.2.{next(_addresses) % 250}") for i in range(4)]
    assert [r.status_code for r in first] == [400] * 4  # four clients, one failure each
    client = f"192.0.2.{next(_addresses) % 250 + 1}"
    counted = [_login(proxy, f"q-{ip}-{i}", client).status_code for i in range(4)]
    assert counted == [400, 400, 400, 429]  # one client behind the proxy, limited


@pytest.mark.django_db
def test_the_audit_log_records_the_real_address(world, client_as, settings, ip):
    owner = world.users_a[Role.OWNER]
    client = client_as(owner)
    url = f"/api/v1/teams/{world.team_a.pk}/tokens"
    reply = client.post(url, {"name": "t"}, format="json", REMOTE_ADDR=ip,
                        HTTP_X_FORWARDED_FOR="203.0.113.66")  # fmt: skip
    assert reply.status_code == 201
    assert AuditEvent.objects.get(action="token.create").ip == ip
    settings.PADDOCK_TRUSTED_PROXIES = [ip]
    reply = client.post(url, {"name": "u"}, format="json", REMOTE_ADDR=ip,
                        HTTP_X_FORWARDED_FOR="203.0.113.66")  # fmt: skip
    assert AuditEvent.objects.filter(action="token.create").latest("id").ip == "203.0.113.66"


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_server_as_paddock_up_runs_it_does_not_believe_the_header(paddock_server, world):
    """uvicorn rewrote the peer from X-Forwarded-For for any client on 127.0.0.1 (its
    default); `paddock up` turns that off, so the platform's own rule decides."""
    owner = world.users_a[Role.OWNER]
    _, raw = api_token_create(actor=world.actor(owner), team=world.team_a, name="probe")
    reply = requests.post(
        f"{paddock_server.url}/api/v1/teams/{world.team_a.pk}/tokens", json={"name": "x"},
        headers={"Authorization": f"Bearer {raw}", "X-Forwarded-For": "203.0.113.66"},
        timeout=30,
    )  # fmt: skip
    assert reply.status_code == 201, reply.text
    event = AuditEvent.objects.filter(action="token.create").latest("id")
    assert event.data["name"] == "x" and event.ip == "127.0.0.1", event.ip


def test_the_images_run_uvicorn_without_proxy_headers():
    from pathlib import Path

    from paddock.embedded.up import WEB_SERVER_FLAGS

    repo = Path(__file__).resolve().parents[2]
    assert "--no-proxy-headers" in WEB_SERVER_FLAGS
    for path in ("deploy/docker/platform.Dockerfile", "deploy/helm/paddock/templates/web.yaml"):
        text = (repo / path).read_text()
        assert "--no-proxy-headers" in text and "forwarded-allow-ips" not in text, path
