"""`python -m workers.pool.job` against a platform on a real HTTP server that speaks the pool
contract (the pool's bootstrap and members calls, each run's bootstrap and ingest), and the
by-hand form with spec files.

Under the platform: each member bootstraps with its one-time token and reports through its
own run token; run 11 trains to its end, run 12 is aborted through its own desired state,
run 13 leaves when the platform stops listing it (no final status) and, listed again with
its next dispatch (queued again and packed into the same live pool), joins again from its
checkpoint and trains to its end, run 14 does not fit the pool and fails alone naming the
setting; the job exits once told to stop. As the platform does, the fake refuses a batch of
a superseded dispatch (409) and answers the first dispatch's last batch "paused".
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from workers.events import IngestReply
from workers.job_replies import ListedMember, PoolBootstrap, PoolMembers, RunBootstrap
from workers.pool import job as pool_job
from workers.pool_key import pool_key
from workers.spec import parse_spec


class Platform:
    """The platform's side of the pool contract, scripted."""

    def __init__(self, specs: dict[int, dict], root: Path, key: dict):
        self.specs, self.root, self.key = specs, root, key
        self.lock = threading.Lock()
        self.bootstrapped: set[tuple[int, int]] = set()  # (run, dispatch)
        self.dispatch = dict.fromkeys(specs, 1)
        self.resume_from: dict[int, str] = {}
        self.events: dict[int, list[dict]] = {r: [] for r in specs}
        self.desired = dict.fromkeys(specs, "running")
        self.listed = set(specs)
        self.bad_auth: list[str] = []

    def steps(self, run: int) -> list[int]:
        return [e["step"] for e in self.events[run] if e["type"] == "metric"]

    def states(self, run: int) -> list[str]:
        return [e["state"] for e in self.events[run] if e["type"] == "status"]

    def ended(self, run: int) -> bool:
        return any(s in ("succeeded", "aborted", "failed") for s in self.states(run))

    def handle(self, method: str, path: str, auth: str, body: dict) -> tuple[int, dict]:
        """Each answer built with the platform's own models (workers/job_replies.py)."""
        code, answer = self._answer(path, auth, body)
        return code, answer.model_dump(mode="json") if answer is not None else {}

    def _answer(self, path: str, auth: str, body: dict):
        with self.lock:
            parts = path.split("?")[0].strip("/").split("/")  # api v1 pools|runs id verb
            kind, ident, verb = parts[2], int(parts[3]), parts[4]
            if kind == "pools" and verb == "bootstrap":
                if auth != "Bearer pool-boot":
                    return 401, None
                return 200, PoolBootstrap(token="pool-token", capacity=4, key=self.key)
            if kind == "pools" and verb == "members":
                if auth != "Bearer pool-token":
                    return 401, None
                members = [
                    ListedMember(run_id=r, dispatch=d, weight=1.0,
                                 bootstrap_token=None if (r, d) in self.bootstrapped
                                 else f"boot-{r}-{d}")
                    for r in sorted(self.listed) for d in [self.dispatch[r]]
                ]  # fmt: skip
                # stop once every run has ended: a run between two dispatches (13, unlisted
                # until its checkpoint arrives) is still to come back to this pool
                ended = all(self.ended(r) for r in self.specs)
                return 200, PoolMembers(members=members, stop=not self.listed and ended)
            if kind == "runs" and verb == "bootstrap":
                d = self.dispatch[ident]
                if auth != f"Bearer boot-{ident}-{d}" or (ident, d) in self.bootstrapped:
                    return 401, None
                if body.get("dispatch") != d:
                    return 409, None
                self.bootstrapped.add((ident, d))
                out = self.root / f"run-{ident}"
                return 200, RunBootstrap(token=f"run-token-{ident}", spec=self.specs[ident],
                                         artifacts_uri=f"file://{out}",
                                         resume_from=self.resume_from.get(ident))  # fmt: skip
            if kind == "runs" and verb == "ingest":
                if auth != f"Bearer run-token-{ident}":
                    self.bad_auth.append(f"{ident}: {auth}")
                    return 401, None
                if body["dispatch"] != self.dispatch[ident]:
                    return 409, None  # as the platform: a superseded dispatch's batch is refused
                self.events[ident] += body["events"]
                self.script(ident)
                # the batch's own dispatch: once a later one is listed it stays paused until
                # it leaves (the desired state of the run is the new dispatch's)
                superseded = body["dispatch"] != self.dispatch[ident]
                desired = "paused" if superseded else self.desired[ident]
                return 200, IngestReply(ack=body["seq"], desired_state=desired)
            return 404, None

    def script(self, run: int) -> None:
        """What the platform decides as events come in."""
        if self.ended(run):
            self.listed.discard(run)  # ended: no longer a member
        if run == 12 and self.steps(run) and max(self.steps(run)) >= 1:
            self.desired[12] = "aborted"
        if run == 13 and self.dispatch[13] == 1 and self.steps(run):
            # paused (held at a step boundary until it leaves) and no longer listed: e.g.
            # the run was moved, it leaves this pool ...
            self.desired[13] = "paused"
            self.listed.discard(13)
            saved = [e for e in self.events[13] if e["type"] == "checkpoint"]
            if saved:  # ... checkpointed as it left: its next dispatch is packed here again
                self.dispatch[13], self.resume_from[13] = 2, saved[-1]["uri"]
                self.desired[13] = "running"
                self.listed.add(13)


def serve(platform: Platform) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _reply(self, method: str) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n) or b"{}")
            code, out = platform.handle(method, self.path, self.headers.get("Authorization"), body)
            data = json.dumps(out).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            self._reply("GET")

        def do_POST(self):  # noqa: N802
            self._reply("POST")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.slow
# a slow poll leaves run 13's first dispatch in the pool for seconds after its next is
# listed: it must stay paused meanwhile (it resumed and trained on with the fake's old replies)
@pytest.mark.parametrize("poll_s", [0.2, 2.0])
def test_the_pool_job_under_the_platform(make_spec, tmp_path, monkeypatch, poll_s):
    monkeypatch.setattr(pool_job, "POLL_S", poll_s)
    specs = {
        11: make_spec("train.steps=3", "seed=1"),
        12: make_spec("train.steps=30", "seed=2"),
        13: make_spec("train.steps=4", "seed=3", "lora.r=4"),
        14: make_spec("train.steps=3", "model.dtype=bfloat16"),
    }
    key = {**pool_key(parse_spec(specs[11])), "cluster": "local"}
    platform = Platform(specs, tmp_path, key)
    server = serve(platform)
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        with pytest.raises(SystemExit, match="refused the bootstrap of pool 7 dispatch 1"):
            pool_job.bootstrap_pool(url, 7, 1, "wrong")
        pool = pool_job.bootstrap_pool(url, 7, 1, "pool-boot")
        assert asyncio.run(asyncio.wait_for(pool_job.PoolJob(url, pool).run(), 120)) == 0
    finally:
        server.shutdown()
    assert platform.bad_auth == []  # each run reported with its own run token only
    assert platform.states(11) == ["starting", "running", "succeeded"]
    assert platform.steps(11)[-1] == 3
    assert platform.states(12) == ["starting", "running", "aborted"]
    # left with no final status, then joined again from its checkpoint and trained to its
    # end: each step reported once
    states = platform.states(13)
    assert states.count("starting") == 2 and states[-1] == "succeeded"
    assert not {"succeeded", "aborted", "failed"} & set(states[: states.index("starting", 1)])
    assert "dispatch-1" in platform.resume_from[13]
    assert platform.steps(13) == [0, 1, 2, 3, 4]
    assert (tmp_path / "run-13" / "dispatch-2").is_dir()
    assert platform.states(14)[0] == "starting" and platform.states(14)[-1] == "failed"
    failed = [e for e in platform.events[14] if e.get("state") == "failed"][0]
    assert "model.dtype is 'bfloat16', the pool's is 'auto'" in failed["detail"]


@pytest.mark.slow
def test_the_pool_job_by_hand(make_spec, tmp_path, capsys):
    paths = []
    for name, seed in (("a", 1), ("b", 2)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(make_spec("train.steps=2", f"seed={seed}")))
        paths += ["--spec", str(path)]
    assert pool_job.main([*paths, "--out", str(tmp_path / "out")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {r: (s["state"], s["step"]) for r, s in summary.items()} == {
        "a": ("succeeded", 2),
        "b": ("succeeded", 2),
    }
    events = [json.loads(x) for x in (tmp_path / "out" / "a" / "events.jsonl").open()]
    assert [e["state"] for e in events if e["type"] == "status"] == ["running", "succeeded"]
