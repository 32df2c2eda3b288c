"""Live path under load: N simulated jobs ingest metric batches while M websocket viewers
watch; prints sustained ingest points/s and emit-to-receive latency, measured in one run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
    REDIS_URL=redis://127.0.0.1:6379/14 .venv/bin/python bench/live_latency.py

It makes its own database (paddock_bench_live_<pid>, dropped at the end), starts uvicorn
with `--workers W`, registers N runs with run tokens, then for `--seconds` each job posts one
batch per `--interval` (`--steps` steps × `--keys` metrics) through the real ingest
endpoint, and each viewer holds a real websocket on one run. Latency is measured on the
first point of each batch: every metric event carries the job's emit time, and a viewer
subtracts it from its receive time (same machine, same clock).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse, urlunparse

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "platform"), str(REPO)]


def make_database(base_url: str) -> tuple[str, str]:
    import psycopg

    name = f"paddock_bench_live_{os.getpid()}"
    parts = urlparse(base_url)
    admin = urlunparse(parts._replace(path="/postgres"))
    with psycopg.connect(admin.replace("postgres://", "postgresql://"), autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    return name, urlunparse(parts._replace(path=f"/{name}"))


def drop_database(base_url: str, name: str) -> None:
    import psycopg

    admin = urlunparse(urlparse(base_url)._replace(path="/postgres"))
    with psycopg.connect(admin.replace("postgres://", "postgresql://"), autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def setup_runs(n_runs: int) -> tuple[list[tuple[int, str]], str]:
    """N runs of one team, dispatched, each with a run token; an API token for viewers."""
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model

    from paddock.clusters.models import RayCluster
    from paddock.experiments.launch import experiment_launch
    from paddock.experiments.models import Run
    from paddock.experiments.states import run_transition
    from paddock.experiments.tokens import run_token_mint
    from paddock.teams.access import actor_for
    from paddock.teams.models import Membership, Role, Team
    from paddock.teams.services import api_token_create

    user = get_user_model().objects.create_user("bench", password=secrets.token_hex(8))
    team = Team.objects.create(name="Bench", slug="bench")
    Membership.objects.create(team=team, user=user, role=Role.MEMBER)
    RayCluster.objects.create(name="bench", address="http://127.0.0.1:1", backends=["torch"])
    from paddock.teams.models import TeamQuota

    TeamQuota.objects.update_or_create(team=team, defaults={"max_concurrent_runs": n_runs})
    actor = actor_for(user=user)
    result = experiment_launch(actor=actor, team=team, name="bench", spec={}, seeds=n_runs)
    runs = []
    for run in Run.objects.filter(experiment=result.experiment).order_by("id"):
        Run.objects.filter(pk=run.pk).update(dispatch_count=1)
        run_transition(run=run, to_state="dispatching")
        runs.append((run.pk, run_token_mint(run=run, dispatch=1)))
    _, viewer_token = api_token_create(actor=actor, team=team, name="viewers")
    return runs, viewer_token


async def job(session, url, run_id, token, args, stats, stop_at, replies):
    endpoint = f"{url}/api/v1/runs/{run_id}/ingest"
    headers = {"Authorization": f"Bearer {token}"}
    keys = [f"bench/metric_{k:03d}" for k in range(args.keys)]
    seq, step = 0, 0
    next_at = time.monotonic()
    while time.monotonic() < stop_at:
        seq += 1
        now = time.time()
        events = []
        for _ in range(args.steps):
            step += 1
            events.append({"type": "metric", "step": step, "time": now,
                           "values": {k: step * 0.001 for k in keys}})  # fmt: skip
        body = json.dumps({"dispatch": 1, "seq": seq, "events": events})
        async with session.post(endpoint, data=body, headers=headers) as reply:
            answer = await reply.json()
            if reply.status != 200 or answer.get("ack") != seq:
                stats["errors"] += 1
            else:
                stats["points"] += args.steps * args.keys
                stats["batches"] += 1
                replies.append(time.time() - now)  # emit → the job has its ack
        next_at += args.interval
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))


async def viewer(ws_url, token, origin, latencies, emits, ready, stop_at):
    from websockets.asyncio.client import connect

    bearer = {"Authorization": f"Bearer {token}"}
    async with connect(ws_url, origin=origin, additional_headers=bearer, max_size=2**26) as ws:
        await ws.recv()  # the snapshot
        ready.append(1)
        while time.monotonic() < stop_at:
            try:
                raw = await asyncio.wait_for(
                    ws.recv(), timeout=max(0.1, stop_at - time.monotonic())
                )
            except TimeoutError:
                break
            received = time.time()
            message = json.loads(raw)
            if message.get("type") == "metrics" and message["steps"]:
                # the first point of each batch (steps of one batch share its emit time)
                for emitted in sorted({s["time"] for s in message["steps"]}):
                    latencies.append(received - emitted)
                    emits.append(emitted)


async def load(url, port, runs, viewer_token, args, server_cpu):
    import aiohttp

    stats = {"points": 0, "batches": 0, "errors": 0}
    latencies: list[float] = []
    emits: list[float] = []  # each latency's emit time, to tell one stall from a steady tail
    replies: list[float] = []
    ready: list[int] = []
    origin = url
    start = time.monotonic()
    stop_at = start + args.warmup + args.seconds + 10
    viewers = [
        asyncio.create_task(viewer(
            f"ws://127.0.0.1:{port}/ws/runs/{runs[i % len(runs)][0]}/", viewer_token,
            origin, latencies, emits, ready, stop_at))
        for i in range(args.viewers)
    ]  # fmt: skip
    while len(ready) < args.viewers and time.monotonic() - start < 60:
        await asyncio.sleep(0.1)
    connector = aiohttp.TCPConnector(limit=len(runs) * 2)
    async with aiohttp.ClientSession(connector=connector) as session:
        warm_stop = time.monotonic() + args.warmup
        await asyncio.gather(*(job(session, url, r, t, args, dict.fromkeys(stats, 0), warm_stop,
                                   []) for r, t in runs))  # fmt: skip
        latencies.clear()
        emits.clear()
        t0, t0_wall = time.monotonic(), time.time()
        server_cpu.start()
        measure_stop = t0 + args.seconds
        await asyncio.gather(*(job(session, url, r, t, args, stats, measure_stop, replies)
                               for r, t in runs))  # fmt: skip
        elapsed = time.monotonic() - t0
        server_cpu.stop()
    await asyncio.sleep(1.0)  # the last broadcasts
    for task in viewers:
        task.cancel()
    await asyncio.gather(*viewers, return_exceptions=True)
    return stats, latencies, replies, elapsed, [e - t0_wall for e in emits]


class ServerCpu:
    """CPU seconds spent over the measured window by the server (uvicorn and its workers),
    by PostgreSQL's backends serving the bench database, and by this load generator: unlike
    throughput and latency, a cost per batch that stays comparable when other programs share
    the cores. (Redis is shared with other programs, so it is left out.)"""

    def __init__(self, pid: int, database: str, admin_url: str):
        import psutil

        self.server = psutil.Process(pid)
        self.me = psutil.Process()
        self.database, self.admin_url = database, admin_url
        self.start_times: dict[str, dict[int, float]] = {}
        self.used = {"server": 0.0, "PostgreSQL": 0.0, "load generator": 0.0}

    def _backends(self) -> list[int]:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as c:
            rows = c.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                [self.database],
            ).fetchall()
        return [pid for (pid,) in rows]

    def _now(self) -> dict[str, dict[int, float]]:
        import psutil

        def cpu(pids) -> dict[int, float]:
            times = {}
            for pid in pids:
                try:
                    times[pid] = sum(psutil.Process(pid).cpu_times()[:2])
                except psutil.NoSuchProcess:  # a connection closed meanwhile
                    pass
            return times

        server = [self.server.pid, *(p.pid for p in self.server.children(recursive=True))]
        return {"server": cpu(server), "PostgreSQL": cpu(self._backends()),
                "load generator": cpu([self.me.pid])}  # fmt: skip

    def start(self) -> None:
        self.start_times = self._now()

    def stop(self) -> None:
        for name, times in self._now().items():
            before = self.start_times[name]
            self.used[name] = sum(t - before.get(pid, 0.0) for pid, t in times.items())


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def slowest_by_second(latencies: list[float], emitted_at: list[float]) -> str:
    """Where the slowest 1% of receptions were emitted, in whole seconds of the measured
    window: one or two seconds means a stall (of the server, PostgreSQL or the machine),
    a spread means a steady tail."""
    cut = percentile(latencies, 0.99)
    seconds = sorted(int(t) for lat, t in zip(latencies, emitted_at, strict=True) if lat >= cut)
    counts = {s: seconds.count(s) for s in dict.fromkeys(seconds)}
    return ", ".join(f"{s}s ×{n}" for s, n in counts.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--viewers", type=int, default=50)
    parser.add_argument("--steps", type=int, default=25, help="steps per batch")
    parser.add_argument("--keys", type=int, default=40, help="metrics per step")
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between batches")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--warmup", type=float, default=3)
    parser.add_argument("--workers", type=int, default=2, help="uvicorn worker processes")
    args = parser.parse_args()

    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    name, db_url = make_database(base)
    home = Path(f"/tmp/paddock-bench-live-{os.getpid()}")
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14"),
        "PADDOCK_HOME": str(home),
        "DJANGO_SETTINGS_MODULE": "paddock.settings",
        "PYTHONPATH": f"{REPO / 'platform'}{os.pathsep}{REPO}",
    }
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "REDIS_URL", "PADDOCK_HOME",
                                            "DJANGO_SETTINGS_MODULE")})  # fmt: skip
    server = None
    try:
        runs, viewer_token = setup_runs(args.runs)
        port = 18000 + os.getpid() % 1000
        server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "paddock.asgi:application", "--host", "127.0.0.1",
             "--port", str(port), "--workers", str(args.workers), "--lifespan", "off",
             "--ws", "websockets-sansio", "--log-level", "warning", "--no-access-log"],
            env=env, cwd=REPO,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        import requests

        for _ in range(100):
            try:
                requests.get(f"{url}/api/v1/schema/", timeout=2)
                break
            except requests.RequestException:
                time.sleep(0.2)
        server_cpu = ServerCpu(
            server.pid,
            name,
            urlunparse(urlparse(base)._replace(path="/postgres")).replace(
                "postgres://", "postgresql://"
            ),
        )
        stats, latencies, replies, elapsed, emitted_at = asyncio.run(
            load(url, port, runs, viewer_token, args, server_cpu)
        )
        load_average = os.getloadavg()
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=20)
        drop_database(base, name)
    offered = args.runs * args.steps * args.keys / args.interval
    print(f"runs={args.runs} viewers={args.viewers} batch={args.steps}x{args.keys} points "
          f"every {args.interval}s per run (offered {offered:,.0f} points/s), "
          f"uvicorn workers={args.workers}, {elapsed:.1f}s measured")  # fmt: skip
    print(f"ingest: {stats['points'] / elapsed:,.0f} points/s sustained, "
          f"{stats['batches'] / elapsed:.1f} batches/s, {stats['errors']} errors")  # fmt: skip
    print(f"emit→viewer latency over {len(latencies)} batch receptions: "
          f"p50 {percentile(latencies, 0.5) * 1000:.0f} ms, "
          f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms, "
          f"max {max(latencies, default=float('nan')) * 1000:.0f} ms")  # fmt: skip
    if latencies:
        print(f"mean {statistics.fmean(latencies) * 1000:.0f} ms")
        print(f"slowest 1%, by emit second: {slowest_by_second(latencies, emitted_at)}")
    print(f"emit→ingest reply: p50 {percentile(replies, 0.5) * 1000:.0f} ms, "
          f"p99 {percentile(replies, 0.99) * 1000:.0f} ms")  # fmt: skip
    batches = max(1, stats["batches"])
    print("CPU per batch: " + ", ".join(f"{name} {used / batches * 1000:.1f} ms"
                                        for name, used in server_cpu.used.items())
          + f" (load average {load_average[0]:.2f} at the end)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
