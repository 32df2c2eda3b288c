"""Loopback load on the REST API and the websockets: requests/s and p50/p99 latency at a
stated concurrency, with every failure counted (a failure is any non-200 answer, a refused
websocket or a timeout).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
    REDIS_URL=redis://127.0.0.1:6379/14 .venv/bin/python bench/load/rest_ws.py

It makes its own database (dropped at the end) with bench/live_latency.py's helpers, starts
uvicorn with `--workers W`, then runs `--trials` trials of `--seconds` each: `--rest` closed-
loop clients cycle through five read endpoints with an API token (a run list, a run, its
metrics, the experiments list, /me) while `--ws` clients open a run's websocket, wait for
its snapshot and close, over and over (connection churn is the costly part of a stream).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("live_latency", REPO / "bench/live_latency.py")
live = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(live)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def rest_client(session, url, token, run_ids, stop_at, times, failures):
    headers = {"Authorization": f"Bearer {token}"}
    paths = [
        "/api/v1/runs?page_size=50", "/api/v1/runs/{run}",
        "/api/v1/runs/{run}/metrics?keys=bench/metric_000", "/api/v1/experiments", "/api/v1/me",
    ]  # fmt: skip
    i = 0
    while time.monotonic() < stop_at:
        path = paths[i % len(paths)].format(run=run_ids[i % len(run_ids)])
        i += 1
        started = time.perf_counter()
        try:
            async with session.get(url + path, headers=headers) as reply:
                await reply.read()
                ok = reply.status == 200
            if not ok:
                failures.append(f"HTTP {reply.status}")
        except Exception as exc:
            ok = False
            failures.append(type(exc).__name__)
        if ok:
            times.append(time.perf_counter() - started)


async def ws_client(url, port, token, run_ids, stop_at, times, failures):
    from websockets.asyncio.client import connect

    i = 0
    while time.monotonic() < stop_at:
        run = run_ids[i % len(run_ids)]
        i += 1
        started = time.perf_counter()
        try:
            async with connect(f"ws://127.0.0.1:{port}/ws/runs/{run}/?token={token}",
                               origin=url, max_size=2**24, open_timeout=10) as ws:  # fmt: skip
                await asyncio.wait_for(ws.recv(), 10)  # the snapshot
            times.append(time.perf_counter() - started)
        except Exception as exc:
            failures.append(type(exc).__name__)


async def trial(url, port, token, run_ids, args) -> dict:
    import aiohttp

    rest_times, rest_fail, ws_times, ws_fail = [], [], [], []
    stop_at = time.monotonic() + args.seconds
    connector = aiohttp.TCPConnector(limit=args.rest)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.monotonic()
        await asyncio.gather(
            *(rest_client(session, url, token, run_ids, stop_at, rest_times, rest_fail)
              for _ in range(args.rest)),
            *(ws_client(url, port, token, run_ids, stop_at, ws_times, ws_fail)
              for _ in range(args.ws)),
        )  # fmt: skip
        elapsed = time.monotonic() - started
    return {"elapsed": elapsed, "rest": rest_times, "rest_fail": rest_fail,
            "ws": ws_times, "ws_fail": ws_fail, "load": os.getloadavg()[0]}  # fmt: skip


def _failures(reasons: list[str]) -> str:
    if not reasons:
        return "0 failures"
    counts = {r: reasons.count(r) for r in sorted(set(reasons))}
    return f"{len(reasons)} failures ({', '.join(f'{n} {r}' for r, n in counts.items())})"


def seed_metrics(run_ids: list[int]) -> None:
    from paddock.experiments.metrics import metric_points_store

    for run_id in run_ids:
        points = [(f"bench/metric_{k:03d}", s, 0.0, s * 0.01) for k in range(5) for s in range(500)]
        metric_points_store(run_id=run_id, points=points)


def stop_server(server: subprocess.Popen) -> None:
    """uvicorn and its workers (one process group). A websocket consumer blocked in Redis'
    BRPOP can hold the graceful shutdown past any wait, so SIGKILL follows after 20 s."""
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rest", type=int, default=32, help="concurrent REST clients")
    parser.add_argument("--ws", type=int, default=8, help="concurrent websocket clients")
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="uvicorn worker processes")
    args = parser.parse_args()

    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    name, db_url = live.make_database(base)
    env = {
        **os.environ, "DATABASE_URL": db_url,
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14"),
        "PADDOCK_HOME": f"/tmp/paddock-bench-load-{os.getpid()}",
        "DJANGO_SETTINGS_MODULE": "paddock.settings",
        "PYTHONPATH": f"{REPO / 'platform'}{os.pathsep}{REPO}",
    }  # fmt: skip
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "REDIS_URL", "PADDOCK_HOME",
                                            "DJANGO_SETTINGS_MODULE")})  # fmt: skip
    server = None
    results = []
    # the server's own tracebacks (see docs/reliability.md) go to a file, not over the figures
    server_log_path = Path(env["PADDOCK_HOME"]) / "uvicorn.log"
    server_log_path.parent.mkdir(parents=True, exist_ok=True)
    server_log = server_log_path.open("wb")
    try:
        runs, token = live.setup_runs(args.runs)
        run_ids = [run_id for run_id, _ in runs]
        seed_metrics(run_ids)
        port = 19000 + os.getpid() % 1000
        server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "paddock.asgi:application", "--host", "127.0.0.1",
             "--port", str(port), "--workers", str(args.workers), "--lifespan", "off",
             "--ws", "websockets-sansio", "--log-level", "warning", "--no-access-log"],
            env=env, cwd=REPO, stdout=server_log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        import requests

        for _ in range(150):
            try:
                requests.get(f"{url}/healthz", timeout=2)
                break
            except requests.RequestException:
                time.sleep(0.2)
        print(f"1-min load average before the trials: {os.getloadavg()[0]:.2f}")
        for _ in range(args.trials):
            results.append(asyncio.run(trial(url, port, token, run_ids, args)))
    finally:
        if server is not None:
            stop_server(server)
        server_log.close()
        live.drop_database(base, name)
    tracebacks = server_log_path.read_bytes().count(b"Traceback")
    print(f"server log: {server_log_path} ({tracebacks} tracebacks)")
    print(f"concurrency: {args.rest} REST clients + {args.ws} websocket clients (closed loop), "
          f"uvicorn workers={args.workers}, {args.trials} trials x {args.seconds:g}s, "
          f"{os.cpu_count()} CPUs")  # fmt: skip
    for i, r in enumerate(results, 1):
        print(f"trial {i}: REST {len(r['rest']) / r['elapsed']:.0f} req/s "
              f"p50 {percentile(r['rest'], 0.5) * 1e3:.0f} ms "
              f"p99 {percentile(r['rest'], 0.99) * 1e3:.0f} ms, {_failures(r['rest_fail'])} | "
              f"websocket connect+snapshot {len(r['ws']) / r['elapsed']:.1f}/s "
              f"p50 {percentile(r['ws'], 0.5) * 1e3:.0f} ms "
              f"p99 {percentile(r['ws'], 0.99) * 1e3:.0f} ms, "
              f"{_failures(r['ws_fail'])} | 1-min load average at its end "
              f"{r['load']:.2f}")  # fmt: skip
    rates = [len(r["rest"]) / r["elapsed"] for r in results]
    print(f"REST req/s over trials: mean {statistics.fmean(rates):.0f}, "
          f"min {min(rates):.0f}, max {max(rates):.0f}")  # fmt: skip
    failed = sum(len(r["rest_fail"]) + len(r["ws_fail"]) for r in results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
