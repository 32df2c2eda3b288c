"""deploy/docker/healthcheck.py, the containers' health checks, against a stand-in /healthz
on 127.0.0.1 (the web check) and a schedule file (the beat check)."""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from .conftest import DOCKER


@pytest.fixture()
def hc():
    spec = importlib.util.spec_from_file_location("deploy_healthcheck", DOCKER / "healthcheck.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def server():
    seen: list[dict] = []
    status = {"code": 200}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the stdlib's name)
            seen.append({"path": self.path, **dict(self.headers)})
            self.send_response(status["code"])
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1], seen, status
    httpd.shutdown()
    httpd.server_close()


def test_web_sends_an_allowed_host_and_the_proxy_scheme(hc, server, monkeypatch):
    port, seen, _ = server
    monkeypatch.setattr(hc, "WEB_PORT", port)
    monkeypatch.setenv("PADDOCK_ALLOWED_HOSTS", "*,.example.com,other.example.com")
    monkeypatch.setenv("PADDOCK_PUBLIC_URL", "https://paddock.example.com")
    assert hc.main(["web"]) == 0
    assert seen[-1]["path"] == "/healthz"
    assert seen[-1]["Host"] == "example.com"
    assert seen[-1]["X-Forwarded-Proto"] == "https"


def test_web_over_plain_http_and_a_failing_healthz(hc, server, monkeypatch):
    port, seen, status = server
    monkeypatch.setattr(hc, "WEB_PORT", port)
    monkeypatch.delenv("PADDOCK_ALLOWED_HOSTS", raising=False)
    monkeypatch.setenv("PADDOCK_PUBLIC_URL", "http://web:8000")
    assert hc.main(["web"]) == 0
    assert seen[-1]["Host"] == "127.0.0.1" and "X-Forwarded-Proto" not in seen[-1]
    status["code"] = 503
    assert hc.main(["web"]) == 1


def test_beat_wants_a_recent_schedule(hc, tmp_path, monkeypatch):
    monkeypatch.setenv("PADDOCK_HOME", str(tmp_path))
    assert hc.main(["beat"]) == 1  # not written yet
    schedule = tmp_path / "celerybeat-schedule.db"
    schedule.write_bytes(b"")
    assert hc.main(["beat"]) == 0
    old = time.time() - hc.BEAT_STALE_S - 60
    os.utime(schedule, (old, old))
    assert hc.main(["beat"]) == 1


def test_unknown_role(hc):
    assert hc.main(["nonsense"]) == 2
