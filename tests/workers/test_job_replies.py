"""workers/job_replies.py: the job reads the job doors' answers with the models the platform
builds them with. Against a real HTTP server: an answer with a field this job does not know
(a newer platform) is read, and one without a field it needs is refused naming the field,
never read as a half-filled assignment."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from workers.bootstrap import bootstrap
from workers.job_replies import ListedMember, PoolBootstrap, PoolMembers, RunBootstrap
from workers.pool.job import bootstrap_pool


@contextmanager
def _serving(answer: dict) -> Iterator[str]:
    """The URL of a platform that answers every POST with `answer`."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_a_run_bootstrap_from_a_newer_platform_is_read(tmp_path):
    sent = RunBootstrap(
        token="pdr_x", spec={"train": {"steps": 3}}, artifacts_uri=f"file://{tmp_path}/runs/7",
        resume_from=f"file://{tmp_path}/runs/7/dispatch-1/checkpoints/step-2",
    ).model_dump(mode="json")  # fmt: skip
    with _serving({**sent, "added_later": {"x": 1}}) as url:
        got = bootstrap(url, 7, 2, "pdb_x")
    assert (got.run_id, got.dispatch, got.token, got.spec) == (7, 2, "pdr_x", sent["spec"])
    assert got.out_dir == tmp_path / "runs" / "7"
    assert got.resume_from == f"{tmp_path}/runs/7/dispatch-1/checkpoints/step-2"


@pytest.mark.parametrize(
    ("answer", "field"),
    [
        ({"token": "pdr_x", "spec": {}}, "artifacts_uri"),
        ({"token": "", "spec": {}, "artifacts_uri": "file:///a"}, "token"),
        ({"token": "pdr_x", "spec": [], "artifacts_uri": "file:///a"}, "spec"),
    ],
)
def test_a_run_bootstrap_the_job_cannot_read_names_the_field(answer, field):
    refused = rf"not the RunBootstrap this job reads.*\n{field}\n"
    with _serving(answer) as url, pytest.raises(SystemExit, match=refused):
        bootstrap(url, 7, 1, "pdb_x")


def test_a_pool_bootstrap_is_read_and_its_capacity_checked():
    with _serving({"token": "pdp_x", "capacity": 3, "key": {"cluster": "local"}}) as url:
        pool = bootstrap_pool(url, 5, 1, "pdpb_x")
    assert (pool.pool_id, pool.token, pool.capacity) == (5, "pdp_x", 3)
    assert pool.key == {"cluster": "local"}
    bad = {"token": "pdp_x", "capacity": 0, "key": {}}
    with _serving(bad) as url, pytest.raises(SystemExit, match=r"PoolBootstrap.*\ncapacity\n"):
        bootstrap_pool(url, 5, 1, "pdpb_x")
    assert PoolBootstrap.model_json_schema()["required"] == ["token", "capacity", "key"]


def test_the_members_answer_round_trips():
    members = PoolMembers(
        members=[
            ListedMember(run_id=3, dispatch=2, bootstrap_token="pdb_y", weight=2.0),
            ListedMember(run_id=4, dispatch=1, bootstrap_token=None, weight=1.0),
        ],
        stop=False,
    )
    wire = json.dumps(members.model_dump(mode="json"))
    assert PoolMembers.model_validate_json(wire) == members
    assert json.loads(wire)["members"][1] == {
        "run_id": 4, "dispatch": 1, "bootstrap_token": None, "weight": 1.0,
    }  # fmt: skip
