"""`python -m workers.pool.job`: the entrypoint of a pool's Ray job (docs/pools.md).

Started by the control plane through the Ray Jobs API with PADDOCK_POOL_ID,
PADDOCK_POOL_DISPATCH, PADDOCK_PUBLIC_URL and a one-time PADDOCK_BOOTSTRAP_TOKEN, it
exchanges the token for the pool's token, capacity and key, then polls the pool's members
every ~2 s. A member listed with a bootstrap token and a dispatch it has not joined with is
new (a run that left and was packed into this pool again joins again): it is bootstrapped
like a run's own job (workers/bootstrap.py: its run token, spec, output directory and
checkpoint) and joins the pool with a Reporter of its own, which carries its events up and
its desired state (pause, resume, abort) down. A member no longer listed leaves
(checkpointed, its slot freed, its reporter closed without a final status: the platform has
decided its state). The job exits when the platform says stop and no member is left, or when
the members call is refused (the pool was dispatched again, or is gone).

By hand, for tests and users, with one spec per run and a control file per run:

    python -m workers.pool.job --spec a.yaml --spec b.yaml [--out DIR]

Each run writes DIR/<name>/ (metrics.jsonl, checkpoints/, events.jsonl) and reads
DIR/<name>/control (`echo paused > DIR/a/control`: running, paused or aborted).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from ..bootstrap import bootstrap, post_bootstrap
from ..job_replies import ListedMember, PoolBootstrap, PoolMembers
from ..loop.control import FileControl, StaticControl
from ..report import Reporter, ReporterConfig
from ..spec import load_spec
from .driver import PoolDriver

log = logging.getLogger("workers.pool.job")

POLL_S = 2.0


@dataclass(frozen=True)
class PoolAssignment:
    pool_id: int
    dispatch: int
    token: str
    capacity: int
    key: dict[str, Any]


def bootstrap_pool(url: str, pool_id: int, dispatch: int, secret: str) -> PoolAssignment:
    body = post_bootstrap(url, f"pools/{pool_id}", dispatch, secret, PoolBootstrap)
    return PoolAssignment(pool_id, dispatch, body.token, body.capacity, body.key)


class PoolJob:
    """The pool job under the platform: the members loop around one PoolDriver."""

    def __init__(self, url: str, pool: PoolAssignment):
        self.url, self.pool = url.rstrip("/"), pool
        self.driver = PoolDriver(
            capacity=pool.capacity, key=pool.key, cluster=pool.key.get("cluster")
        )
        self.reporters: dict[str, Reporter] = {}
        self.dispatches: dict[str, int] = {}  # the dispatch each member joined with
        self.closed: set[str] = set()
        # (run, dispatch) pairs whose bootstrap was refused: not asked again while listed so;
        # the run's next dispatch (queued again and packed here once more) is a new ask
        self.refused: set[tuple[str, int]] = set()

    def _members(self) -> tuple[int, PoolMembers | None]:
        reply = requests.get(
            f"{self.url}/api/v1/pools/{self.pool.pool_id}/members",
            params={"dispatch": self.pool.dispatch},
            headers={"Authorization": f"Bearer {self.pool.token}"},
            timeout=30,
        )
        if reply.status_code != 200:
            return reply.status_code, None
        return 200, PoolMembers.model_validate_json(reply.content)

    async def run(self) -> int:
        try:
            while True:
                try:
                    code, body = await asyncio.to_thread(self._members)
                except requests.RequestException as exc:  # the platform away: ask again
                    log.warning("members call failed: %s", exc)
                    await asyncio.sleep(POLL_S)
                    continue
                if code in (401, 409):
                    log.warning("members call refused (HTTP %s): this pool dispatch ends", code)
                    return 0
                if body is None:
                    log.warning("members call answered HTTP %s; asking again", code)
                    await asyncio.sleep(POLL_S)
                    continue
                listed = {str(m.run_id): m for m in body.members}
                for run_id, m in listed.items():
                    joined = self.dispatches.get(run_id)
                    new = joined != m.dispatch and (run_id, m.dispatch) not in self.refused
                    if m.bootstrap_token and new:
                        if joined is not None and run_id in self.reporters:
                            await self._leave(run_id)  # its earlier dispatch is over
                        await self._join(run_id, m, m.bootstrap_token)
                    elif run_id in self.driver.members:
                        self.driver.set_weight(run_id, m.weight)
                for run_id in [r for r in self.reporters if r not in listed]:
                    await self._leave(run_id)
                for run_id, member in self.driver.members.items():
                    if member.task is not None and member.task.done():
                        await self._close_reporter(run_id)  # its final status went out
                if body.stop and not listed:
                    return 0
                await asyncio.sleep(POLL_S)
        finally:
            for run_id in list(self.reporters):
                await self._leave(run_id)
            await self.driver.close()

    async def _join(self, run_id: str, m: ListedMember, bootstrap_token: str) -> None:
        dispatch = m.dispatch
        try:
            a = await asyncio.to_thread(bootstrap, self.url, m.run_id, dispatch, bootstrap_token)
        except SystemExit as exc:  # refused: the run is another job's now, or its token spent
            log.warning("member %s: %s", run_id, exc)
            self.refused.add((run_id, dispatch))
            return
        control = StaticControl("running")
        reporter = Reporter(
            ReporterConfig(self.url, int(run_id), a.token, dispatch, a.out_dir / "spool"),
            on_desired_state=lambda state: control.set(state),  # type: ignore[arg-type]
        )
        self.reporters[run_id], self.dispatches[run_id] = reporter, dispatch
        self.closed.discard(run_id)  # closed with its earlier dispatch, if it had one here
        reporter.status(
            "starting", f"dispatch {dispatch} in pool {self.pool.pool_id} on {os.uname().nodename}"
        )
        if a.resume_from:
            reporter.log(f"dispatch {dispatch}: resuming from {a.resume_from}")
        await asyncio.to_thread(reporter.flush, 10)  # a pause asked already holds from step 1
        try:
            self.driver.admit(
                run_id,
                a.spec,
                a.out_dir / f"dispatch-{dispatch}",
                control,
                on_event=reporter.emit,
                resume_from=a.resume_from,
                weight=m.weight,
                grants=a.grants,
            )
        except Exception as exc:  # a misfit (PoolAdmissionError), a bad spec, a failed start
            log.warning("member %s cannot join: %s: %s", run_id, type(exc).__name__, exc)
            reporter.status("failed", f"{type(exc).__name__}: {exc}")
            await self._close_reporter(run_id)

    async def _leave(self, run_id: str) -> None:
        member = self.driver.members.get(run_id)
        if member is not None and member.task is not None and not member.task.done():
            await self.driver.leave(run_id)
        await self._close_reporter(run_id)
        self.reporters.pop(run_id, None)
        self.dispatches.pop(run_id, None)

    async def _close_reporter(self, run_id: str) -> None:
        reporter = self.reporters.get(run_id)
        if reporter is not None and run_id not in self.closed:
            self.closed.add(run_id)
            if not await asyncio.to_thread(reporter.close, 60):
                log.error(
                    "run %s: some events could not be delivered; they stay in the spool", run_id
                )


# -------------------------------------------------------------------- by hand


class _EventFile:
    """A run's events as JSON lines (what the platform would have received)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = path.open("a", encoding="utf-8")

    def __call__(self, event) -> None:
        self.file.write(event.model_dump_json() + "\n")
        self.file.flush()


def run_specs(specs: list[str], out: Path, progress: bool = False) -> dict[str, dict[str, Any]]:
    """Every spec a run of one pool, to their ends; a summary per run."""
    names: list[str] = []
    for path in specs:
        stem = Path(path).stem
        name, i = stem, 2
        while name in names:
            name, i = f"{stem}-{i}", i + 1
        names.append(name)
    loaded = {name: load_spec(path) for name, path in zip(names, specs, strict=True)}

    async def main() -> dict[str, dict[str, Any]]:
        rank = max(s.lora.r for s in loaded.values())
        driver = PoolDriver(capacity=len(loaded), max_lora_rank=rank)
        files = {}
        try:
            for name, spec in loaded.items():
                files[name] = _EventFile(out / name / "events.jsonl")
                try:
                    driver.admit(name, spec, out / name, FileControl(out / name / "control"),
                                 on_event=files[name], progress=progress)  # fmt: skip
                except ValueError as exc:
                    log.error("run %s cannot join: %s", name, exc)
            t0 = time.perf_counter()
            members = await driver.wait()
            wall = time.perf_counter() - t0
        finally:
            await driver.close()
        summary = {}
        for name in loaded:
            m = members.get(name)
            o = m.outcome if m is not None else None
            summary[name] = {
                "state": o.state if o else (m.ended if m else "refused") or "failed",
                "step": o.step if o else None,
                "error": f"{type(m.error).__name__}: {m.error}" if m and m.error else None,
                "wall_s": round(wall, 2),
            }
        return summary

    return asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    parser = argparse.ArgumentParser(
        prog="python -m workers.pool.job",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--spec", action="append", help="a run's spec file (once per run)")
    parser.add_argument("--out", help="output directory (with --spec)")
    args = parser.parse_args(argv)
    if args.spec:
        out = Path(args.out or f"runs/pool-{time.strftime('%Y%m%d-%H%M%S')}")
        summary = run_specs(args.spec, out)
        print(json.dumps(summary))
        return 0 if all(s["state"] == "succeeded" for s in summary.values()) else 1
    env = os.environ
    names = ("PADDOCK_PUBLIC_URL", "PADDOCK_POOL_ID", "PADDOCK_BOOTSTRAP_TOKEN")
    missing = [n for n in names if not env.get(n)]
    if missing:
        parser.error(f"give --spec, or set {', '.join(missing)} (the platform does)")
    url, dispatch = env["PADDOCK_PUBLIC_URL"], int(env.get("PADDOCK_POOL_DISPATCH", "1"))
    pool = bootstrap_pool(
        url, int(env["PADDOCK_POOL_ID"]), dispatch, env["PADDOCK_BOOTSTRAP_TOKEN"]
    )
    return asyncio.run(PoolJob(url, pool).run())


if __name__ == "__main__":
    sys.exit(main())
