"""Container health checks of the platform image: `healthcheck.py [web|worker|beat]`.

web     GET /healthz on this container (200 while the database answers; the body names each
        component). The request carries a Host from PADDOCK_ALLOWED_HOSTS (Django answers 400
        to any other) and, when PADDOCK_PUBLIC_URL is https, `X-Forwarded-Proto: https`, as
        the TLS-terminating proxy would (else SECURE_SSL_REDIRECT answers 301).
worker  a Celery ping of this container's worker (celery@<hostname>) through the broker.
beat    the beat schedule file under PADDOCK_HOME was written recently (beat syncs it every
        3 minutes while it ticks).

Exit 0 when healthy, 1 otherwise, with one line saying why. Standard library only, except the
worker check, which loads the Celery app."""

from __future__ import annotations

import os
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

WEB_PORT = 8000  # the port of the image's CMD
BEAT_STALE_S = 600


def probe_host() -> str:
    hosts = [h.strip() for h in os.environ.get("PADDOCK_ALLOWED_HOSTS", "").split(",")]
    for host in hosts:
        if host and host != "*":
            return host.lstrip(".")  # ".example.com" allows example.com too
    return "127.0.0.1"


def check_web() -> str:
    headers = {"Host": probe_host()}
    if os.environ.get("PADDOCK_PUBLIC_URL", "").startswith("https://"):
        headers["X-Forwarded-Proto"] = "https"
    request = urllib.request.Request(f"http://127.0.0.1:{WEB_PORT}/healthz", headers=headers)
    try:
        # no proxy: a container's HTTP(S)_PROXY must not carry a probe of itself
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=8) as reply:
            return f"web: HTTP {reply.status}"
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"web: /healthz answered HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise RuntimeError(f"web: /healthz unreachable: {exc}") from exc


def check_worker() -> str:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddock.settings")
    from paddock.celery import app

    name = f"celery@{socket.gethostname()}"
    replies = app.control.ping(destination=[name], timeout=5.0)
    if not replies:
        raise RuntimeError(f"worker: {name} did not answer a ping within 5 s")
    return f"worker: {name} answered"


def check_beat() -> str:
    home = Path(os.environ.get("PADDOCK_HOME", "/var/lib/paddock"))
    files = list(home.glob("celerybeat-schedule*"))
    if not files:
        raise RuntimeError(f"beat: no schedule file under {home} yet")
    age = time.time() - max(f.stat().st_mtime for f in files)
    if age > BEAT_STALE_S:
        raise RuntimeError(f"beat: schedule last written {age:.0f} s ago")
    return f"beat: schedule written {age:.0f} s ago"


CHECKS = {"web": check_web, "worker": check_worker, "beat": check_beat}


def main(argv: list[str]) -> int:
    role = argv[0] if argv else "web"
    if role not in CHECKS:
        print(f"usage: healthcheck.py [{'|'.join(CHECKS)}]", file=sys.stderr)
        return 2
    try:
        print(CHECKS[role]())
    except Exception as exc:  # any failure is "unhealthy", said in one line
        print(exc if isinstance(exc, RuntimeError) else f"{role}: {exc!r}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
