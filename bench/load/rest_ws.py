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
import math
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


# the five read endpoints every REST client cycles through (server_cost.py reads them too)
REST_PATHS = [
    "/api/v1/runs?page_size=50", "/api/v1/runs/{run}",
    "/api/v1/runs/{run}/metrics?keys=bench/metric_000", "/api/v1/experiments", "/api/v1/me",
]  # fmt: skip


def _content_length(head: bytes) -> int:
    at = head.lower().find(b"\r\ncontent-length:")
    if at < 0:
        raise ValueError("an answer without Content-Length")
    return int(head[at + 17 : head.index(b"\r\n", at + 2)])


async def rest_client(url, token, run_ids, stop_at, times, failures):
    """One closed-loop client on one keep-alive connection: each request's whole answer is
    read (its status line, headers and Content-Length bytes of body) before the next is
    sent. A few lines of asyncio streams, not aiohttp: the generator shares the machine's
    two cores with the server, and aiohttp's CPU per request was about a third of a cheap
    answer's on the server (docs/reliability.md "Load"); the requests are the same."""
    host, port = url.removeprefix("http://").split(":")
    reader = writer = None
    i = 0
    while time.monotonic() < stop_at:
        path = REST_PATHS[i % len(REST_PATHS)].format(run=run_ids[i % len(run_ids)])
        i += 1
        request = (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                   f"Authorization: Bearer {token}\r\nAccept: */*\r\n\r\n").encode()  # fmt: skip
        started = time.perf_counter()
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            await reader.readexactly(_content_length(head))
            ok = status == 200
            if not ok:
                failures.append(f"HTTP {status}")
            if b"\r\nconnection: close" in head.lower():
                writer.close()
                writer = None
        except Exception as exc:
            ok = False
            failures.append(type(exc).__name__)
            if writer is not None:
                writer.close()
                writer = None
        if ok:
            times.append(time.perf_counter() - started)
    if writer is not None:
        writer.close()


async def ws_client(url, port, token, run_ids, stop_at, phases, failures):
    """Connect, wait for the snapshot, close; `phases` gets (handshake, snapshot, close)
    seconds of each: connect + snapshot is the figure, the close is timed on its own (it
    waits for the server's close frame and its end of the TCP connection)."""
    from websockets.asyncio.client import connect

    i = 0
    while time.monotonic() < stop_at:
        run = run_ids[i % len(run_ids)]
        i += 1
        started = time.perf_counter()
        try:
            ws = await connect(f"ws://127.0.0.1:{port}/ws/runs/{run}/", origin=url,
                               additional_headers={"Authorization": f"Bearer {token}"},
                               max_size=2**24, open_timeout=10)  # fmt: skip
            opened = time.perf_counter()
            try:
                await asyncio.wait_for(ws.recv(), 10)  # the snapshot
                received = time.perf_counter()
            finally:
                await ws.close()
            closed = time.perf_counter()
            phases.append((opened - started, received - opened, closed - received))
        except Exception as exc:
            failures.append(type(exc).__name__)


async def trial(url, port, token, run_ids, args, cpu) -> dict:
    """One trial; `cpu` (bench/live_latency.py's ServerCpu) counts the CPU seconds of the
    server, of PostgreSQL's backends of the bench database and of this load generator."""
    rest_times, rest_fail, ws_phases, ws_fail = [], [], [], []
    stop_at = time.monotonic() + args.seconds
    started = time.monotonic()
    cpu.start()
    await asyncio.gather(
        *(rest_client(url, token, run_ids, stop_at, rest_times, rest_fail)
          for _ in range(args.rest)),
        *(ws_client(url, port, token, run_ids, stop_at, ws_phases, ws_fail)
          for _ in range(args.ws)),
    )  # fmt: skip
    cpu.stop()
    elapsed = time.monotonic() - started
    return {"elapsed": elapsed, "rest": rest_times, "rest_fail": rest_fail,
            "ws": [h + s for h, s, _ in ws_phases], "ws_phases": ws_phases, "ws_fail": ws_fail,
            "cpu": dict(cpu.used), "load": os.getloadavg()[0]}  # fmt: skip


def _ms(values: list[float]) -> str:
    return f"{percentile(values, 0.5) * 1e3:.0f}/{percentile(values, 0.99) * 1e3:.0f}"


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


def start_server(tree: Path, port: int, args, env: dict, log) -> subprocess.Popen:
    """uvicorn serving the platform of checkout `tree`, as `paddock up` runs it."""
    tree_env = {**env, "PYTHONPATH": f"{tree / 'platform'}{os.pathsep}{tree}"}
    return subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "paddock.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--workers", str(args.workers), "--lifespan", "off",
         "--ws", "websockets-sansio", "--log-level", "warning", "--no-access-log",
         "--no-proxy-headers"],
        env=tree_env, cwd=tree, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def wait_ready(url: str) -> None:
    import requests

    for _ in range(150):
        try:
            requests.get(f"{url}/healthz", timeout=2)
            return
        except requests.RequestException:
            time.sleep(0.2)


def stop_server(server: subprocess.Popen) -> None:
    """uvicorn and its workers (one process group). A websocket consumer blocked in Redis'
    BRPOP can hold the graceful shutdown past any wait, so SIGKILL follows after 20 s."""
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def report(label: str, i: int, r: dict) -> None:
    print(f"{label} trial {i}: REST {len(r['rest']) / r['elapsed']:.0f} req/s "
          f"p50 {percentile(r['rest'], 0.5) * 1e3:.0f} ms "
          f"p99 {percentile(r['rest'], 0.99) * 1e3:.0f} ms, {_failures(r['rest_fail'])} | "
          f"websocket connect+snapshot {len(r['ws']) / r['elapsed']:.1f}/s "
          f"p50 {percentile(r['ws'], 0.5) * 1e3:.0f} ms "
          f"p99 {percentile(r['ws'], 0.99) * 1e3:.0f} ms, "
          f"{_failures(r['ws_fail'])} | 1-min load average at its end "
          f"{r['load']:.2f}")  # fmt: skip
    handshake, snapshot, close = ([p[k] for p in r["ws_phases"]] for k in range(3))
    print(f"  websocket phases p50/p99: handshake {_ms(handshake)}, snapshot after it "
          f"{_ms(snapshot)}, close {_ms(close)} ms")  # fmt: skip
    answered = len(r["rest"]) + len(r["ws"])
    per = ", ".join(f"{who} {used / max(1, answered) * 1e3:.2f} ms"
                    for who, used in r["cpu"].items())  # fmt: skip
    share = ", ".join(f"{who} {used / r['elapsed']:.2f}" for who, used in r["cpu"].items())
    print(f"  CPU per answered request or websocket: {per} (cores busy over the trial: "
          f"{share})")  # fmt: skip


def _ratio(new: float, old: float) -> str:
    return f"{new / old:.2f}" if old and not math.isnan(old) and not math.isnan(new) else "n/a"


def _median(results: list[dict], figure) -> float:
    return statistics.median(figure(r) for r in results)


FIGURES = {
    "REST req/s": lambda r: len(r["rest"]) / r["elapsed"],
    "REST p99 ms": lambda r: percentile(r["rest"], 0.99) * 1e3,
    "websocket connect+snapshot/s": lambda r: len(r["ws"]) / r["elapsed"],
    "websocket p99 ms": lambda r: percentile(r["ws"], 0.99) * 1e3,
    "server CPU ms per answer": lambda r: (
        r["cpu"]["server"] * 1e3 / max(1, len(r["rest"]) + len(r["ws"]))
    ),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rest", type=int, default=32, help="concurrent REST clients")
    parser.add_argument("--ws", type=int, default=8, help="concurrent websocket clients")
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--trials", type=int, default=3, help="per server")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn worker processes")
    parser.add_argument(
        "--baseline", type=Path, default=None,
        help="another checkout (e.g. `git archive <ref> | tar -x -C DIR`): its server and this "
        "one's are measured in alternating trials on one database, and their ratios printed",
    )  # fmt: skip
    args = parser.parse_args()

    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    name, db_url = live.make_database(base)
    env = {
        **os.environ, "DATABASE_URL": db_url,
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14"),
        "PADDOCK_HOME": f"/tmp/paddock-bench-load-{os.getpid()}",
        # one token makes every request here: its rate limit is counted, never reached
        "PADDOCK_API_RATE_LIMIT": os.environ.get("PADDOCK_API_RATE_LIMIT", str(10**9)),
        "DJANGO_SETTINGS_MODULE": "paddock.settings",
    }  # fmt: skip
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "REDIS_URL", "PADDOCK_HOME",
                                            "DJANGO_SETTINGS_MODULE")})  # fmt: skip
    trees = {"this tree": REPO}
    if args.baseline is not None:
        trees = {"baseline": args.baseline.resolve(), **trees}
    servers: dict[str, subprocess.Popen] = {}
    results: dict[str, list[dict]] = {label: [] for label in trees}
    # the server's own tracebacks (see docs/reliability.md) go to a file, not over the figures
    server_log_path = Path(env["PADDOCK_HOME"]) / "uvicorn.log"
    server_log_path.parent.mkdir(parents=True, exist_ok=True)
    server_log = server_log_path.open("wb")
    try:
        runs, token = live.setup_runs(args.runs)
        run_ids = [run_id for run_id, _ in runs]
        seed_metrics(run_ids)
        ports = {label: 19000 + os.getpid() % 1000 + 2 * k for k, label in enumerate(trees)}
        for label, tree in trees.items():
            servers[label] = start_server(tree, ports[label], args, env, server_log)
        for port in ports.values():
            wait_ready(f"http://127.0.0.1:{port}")
        print(f"1-min load average before the trials: {os.getloadavg()[0]:.2f}")
        admin = live.urlunparse(live.urlparse(base)._replace(path="/postgres"))
        admin = admin.replace("postgres://", "postgresql://")
        for _ in range(args.trials):
            for label, port in ports.items():  # alternating: both see the same neighbours
                cpu = live.ServerCpu(servers[label].pid, name, admin)
                url = f"http://127.0.0.1:{port}"
                results[label].append(asyncio.run(trial(url, port, token, run_ids, args, cpu)))
    finally:
        for server in servers.values():
            stop_server(server)
        server_log.close()
        live.drop_database(base, name)
    tracebacks = server_log_path.read_bytes().count(b"Traceback")
    print(f"server log: {server_log_path} ({tracebacks} tracebacks)")
    print(f"concurrency: {args.rest} REST clients + {args.ws} websocket clients (closed loop), "
          f"uvicorn workers={args.workers}, {args.trials} trials x {args.seconds:g}s per server, "
          f"{os.cpu_count()} CPUs")  # fmt: skip
    for label, trials in results.items():
        for i, r in enumerate(trials, 1):
            report(label, i, r)
    for label, trials in results.items():
        medians = ", ".join(f"{k} {_median(trials, f):.1f}" for k, f in FIGURES.items())
        print(f"{label}, median of its trials: {medians}")
    if "baseline" in results:
        ratios = ", ".join(
            f"{k} {_ratio(_median(results['this tree'], f), _median(results['baseline'], f))}"
            for k, f in FIGURES.items()
        )  # fmt: skip
        print(f"this tree / baseline: {ratios}")
    failed = sum(len(r["rest_fail"]) + len(r["ws_fail"]) for t in results.values() for r in t)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
