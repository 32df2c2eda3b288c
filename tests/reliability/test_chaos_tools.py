"""The chaos suite's own parts, checked apart from a chaos run (seconds, no services): the
books catch each kind of loss and duplicate they claim to, the proxy records exactly the
acknowledgements it hands over and swallows a partitioned run's traffic, the schedule is
seeded and holds every kind."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from tests.conftest import wait_for
from tests.reliability.chaos_ledger import books
from tests.reliability.chaos_proxy import Ack, IngestProxy
from tests.reliability.chaos_schedule import KINDS, MIN_GAP_S, schedule


def _metric(step, t, value):
    return {"type": "metric", "step": step, "time": t, "values": {"loss": value}}


def _log(message, t):
    return {"type": "log", "time": t, "level": "info", "message": message}


def _stamp(t):
    return datetime.fromtimestamp(t, tz=UTC)


ACKS = [
    Ack(1, 1, 1, [_metric(1, 10.0, 0.5), _log("one", 10.1)], 0.0),
    Ack(1, 1, 2, [_metric(2, 11.0, 0.4)], 0.0),
]
STORED = {
    "stored_batches": [(1, 1, 1), (1, 1, 2)],
    "stored_points": [(1, "loss", 1, 10.0, 0.5), (1, "loss", 2, 11.0, 0.4)],
    "stored_logs": [(1, 1, "one", _stamp(10.1))],
}


def _books(acks=ACKS, emitted=None, **changes):
    return books(acks=acks, emitted=emitted or {}, **{**STORED, **changes})


def test_books_of_a_clean_run_balance():
    account = _books()
    assert (account.losses, account.duplicates) == (0, 0)
    assert (account.batches_acknowledged, account.points_acknowledged) == (2, 2)
    assert account.logs_acknowledged == 1


def test_books_catch_each_loss_and_duplicate():
    assert _books(stored_batches=[(1, 1, 1)]).batches_lost == [(1, 1, 2)]
    assert _books(stored_points=STORED["stored_points"][:1]).points_lost == [(1, "loss", 2, 1)]
    changed = [(1, "loss", 1, 10.0, 0.5), (1, "loss", 2, 11.0, 0.9)]  # another value
    assert _books(stored_points=changed).points_lost == [(1, "loss", 2, 1)]
    assert _books(stored_logs=[]).logs_lost == [(1, 1, "one")]
    twice = STORED["stored_logs"] * 2  # a retried batch stored again
    assert _books(stored_logs=twice).logs_duplicated == [(1, 1, "one")]
    assert _books(stored_batches=[(1, 1, 1), (1, 1, 1), (1, 1, 2)]).duplicates == 1
    reused = [*ACKS, Ack(1, 1, 2, [_metric(3, 12.0, 0.1)], 0.0)]  # other events, same seq
    assert _books(acks=reused).seq_reused == [(1, 1, 2)]


def test_a_later_dispatch_may_replace_a_step_and_an_earlier_one_may_not():
    resumed = [(1, "loss", 1, 10.0, 0.5), (1, "loss", 2, 20.0, 0.7)]  # step 2 re-run
    account = _books(stored_points=resumed, emitted={(1, 2): {(2, 20.0)}})
    assert account.losses == 0 and account.points_replaced_by_a_later_dispatch == 1
    later_acks = [*ACKS, Ack(1, 2, 1, [_metric(2, 20.0, 0.7)], 0.0)]
    stale = [(1, "loss", 1, 10.0, 0.5), (1, "loss", 2, 11.0, 0.4)]  # dispatch 1 won: wrong
    account = _books(acks=later_acks, stored_points=stale, emitted={(1, 1): {(2, 11.0)}})
    assert account.points_lost == [(1, "loss", 2, 2)]


class _Ingest(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.received.append(body["seq"])
        reply = json.dumps({"ack": body["seq"], "desired_state": "running"}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


@pytest.fixture
def upstream():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ingest)
    server.received = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def test_the_proxy_records_acks_and_swallows_a_partitioned_run(upstream):
    proxy = IngestProxy(upstream_port=upstream.server_address[1])
    session = requests.Session()

    def post(run, seq, events):
        return session.post(f"{proxy.url}/api/v1/runs/{run}/ingest", timeout=2,
                            json={"dispatch": 1, "seq": seq, "events": events})  # fmt: skip

    try:
        assert post(7, 1, [_log("a", 1.0)]).json()["ack"] == 1
        assert post(7, 1, []).status_code == 200  # a heartbeat acknowledges nothing new
        wait_for(lambda: proxy.acks, 5, "the first ack recorded")
        assert [(a.run_id, a.seq) for a in proxy.acks] == [(7, 1)]
        proxy.partition(7)
        with pytest.raises(requests.RequestException):
            post(7, 2, [_log("b", 2.0)])
        assert post(8, 1, [_log("c", 3.0)]).json()["ack"] == 1  # another run is not cut
        proxy.heal(7)
        assert post(7, 2, [_log("b", 2.0)]).json()["ack"] == 2
        # recorded once handed to the job: a moment after the job has it
        wait_for(lambda: len(proxy.acks) == 3, 5, "the third ack recorded")
        assert [(a.run_id, a.seq) for a in proxy.acks] == [(7, 1), (8, 1), (7, 2)]
        # the swallowed request never reached the platform: seq 2 arrived once, after the heal
        assert upstream.received == [1, 1, 1, 2] and proxy.swallowed == {(7, "request"): 1}
    finally:
        proxy.close()


def test_the_schedule_is_seeded_and_holds_every_kind():
    assert schedule(3, 90) == schedule(3, 90) != schedule(4, 90)
    assert sorted(f.kind for f in schedule(3, 90)) == sorted(KINDS)
    long = schedule(3, 400)
    assert len(long) == 4 * len(KINDS)
    moments = [f.at_s for f in long]
    assert all(b - a >= MIN_GAP_S - 0.01 for a, b in zip(moments, moments[1:], strict=False))
    assert moments[0] >= 0 and moments[-1] <= 400
