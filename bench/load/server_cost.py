"""What one request of the load bench costs the server, free of the machine's load: SQL
statements and server CPU time per REST endpoint and per websocket snapshot, measured in
this process (no network, no other clients), on the same data as bench/load/rest_ws.py.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
    REDIS_URL=redis://127.0.0.1:6379/14 .venv/bin/python bench/load/server_cost.py

CPU time is this process's (`time.process_time`, all threads); PostgreSQL's is read apart,
from /proc, for the backends of the bench database (its column is empty where /proc is
not readable); statements are counted in Django's cursor wrapper, in every thread. A REST
request is one call of the platform's ASGI application (paddock.asgi, as uvicorn calls it:
middleware, authentication, DRF, the renderer, the thread hops), one at a time, so its wall
time is its service time with no queue. A snapshot is what the run consumer does in its
threads after the handshake: the actor, the access check and the snapshot's JSON text
(`run_snapshot_text`).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("rest_ws", REPO / "bench/load/rest_ws.py")
rest_ws = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rest_ws)
live = rest_ws.live


async def asgi_get(application, url: str, token: str) -> int:
    """One GET through the ASGI application; its status."""
    path, _, query = url.partition("?")
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": query.encode(), "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "headers": [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {token}".encode())],
    }  # fmt: skip
    received = asyncio.Event()
    sent: list[dict] = []

    async def receive():
        if not received.is_set():
            received.set()
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client stays connected

    async def send(message):
        sent.append(message)

    await application(scope, receive, send)
    return next(m["status"] for m in sent if m["type"] == "http.response.start")


class DatabaseCpu:
    """CPU seconds of PostgreSQL's backends of one database so far (0 without /proc)."""

    def __init__(self, database: str, admin_url: str):
        import psycopg

        self.database = database
        self.admin = psycopg.connect(admin_url, autocommit=True)

    def __call__(self) -> float:
        rows = self.admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", [self.database]
        ).fetchall()
        ticks = 0
        for (pid,) in rows:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            ticks += int(fields[11]) + int(fields[12])  # utime + stime
        return ticks / os.sysconf("SC_CLK_TCK")


def measure(fn, repeat: int, database_cpu) -> tuple[int, float, float, float]:
    """(statements of one call, median CPU ms, median wall ms, PostgreSQL's CPU ms per call)
    over `repeat` calls."""
    from django.db.backends.utils import CursorWrapper

    statements = []
    execute = CursorWrapper._execute

    def counted(self, sql, *rest):
        statements.append(sql)
        return execute(self, sql, *rest)

    fn()  # warm: imports, the connection, caches
    # every thread's connection (the request runs in Django's request thread, not this one)
    CursorWrapper._execute = counted
    try:
        fn()
    finally:
        CursorWrapper._execute = execute
    cpu, wall = [], []
    database0 = database_cpu()
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    database = (database_cpu() - database0) / repeat * 1e3
    return len(statements), statistics.median(cpu) * 1e3, statistics.median(wall) * 1e3, database


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=100)
    args = parser.parse_args()

    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    name, db_url = live.make_database(base)
    os.environ.update({
        "DATABASE_URL": db_url, "DJANGO_SETTINGS_MODULE": "paddock.settings",
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14"),
        "PADDOCK_HOME": f"/tmp/paddock-bench-cost-{os.getpid()}",
    })  # fmt: skip
    rows = []
    try:
        runs, token = live.setup_runs(args.runs)
        run_ids = [run_id for run_id, _ in runs]
        rest_ws.seed_metrics(run_ids)
        from paddock.asgi import application
        from paddock.live.access import scope_actor, stream_run_allowed
        from paddock.live.snapshots import run_snapshot_text

        admin = live.urlunparse(live.urlparse(base)._replace(path="/postgres"))
        database_cpu = DatabaseCpu(name, admin.replace("postgres://", "postgresql://"))

        loop = asyncio.new_event_loop()
        run = run_ids[0]
        for path in rest_ws.REST_PATHS:
            url = path.format(run=run)

            def get(url=url):
                status = loop.run_until_complete(asgi_get(application, url, token))
                assert status == 200, (url, status)

            rows.append((f"GET {url}", *measure(get, args.repeat, database_cpu)))
        scope = {"headers": [(b"authorization", f"Bearer {token}".encode())], "client": None}

        def snapshot():
            actor = scope_actor(scope)
            assert stream_run_allowed(actor, run)
            run_snapshot_text(run)

        rows.append(
            (f"websocket snapshot of run {run}", *measure(snapshot, args.repeat, database_cpu))
        )
    finally:
        from django.db import connections

        connections.close_all()
        live.drop_database(base, name)
    print(f"{args.runs} runs of 5 keys x 500 steps; median of {args.repeat} calls each; "
          f"1-min load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"{'request':<58} {'SQL':>4} {'CPU ms':>7} {'wall ms':>8} {'PostgreSQL CPU ms':>18}")
    for label, statements, cpu, wall, database in rows:
        print(f"{label:<58} {statements:>4} {cpu:>7.2f} {wall:>8.2f} {database:>18.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
