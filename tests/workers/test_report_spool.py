"""The reporter's spool survives a kill -9 at any moment: its files are replaced atomically."""

from __future__ import annotations

import socket
import threading

from workers.report import Reporter, ReporterConfig


def _dead_url() -> str:
    with socket.socket() as sock:  # bound, then closed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_the_sequence_marker_is_never_seen_torn(tmp_path):
    """While batches spool (the platform is down), a reader polling the marker, as a new
    process after a kill -9 would, always finds a whole number. A marker rewritten in place
    is empty between its truncation and its write; a killed job then could not start again
    (seen: `invalid literal for int()`), or worse, could reuse sequence numbers that the
    platform already stored and would acknowledge without storing."""
    config = ReporterConfig(url=_dead_url(), run_id=1, token="t", dispatch=1,
                            spool_dir=tmp_path, interval_s=0.001, max_backoff_s=0.001)  # fmt: skip
    marker = tmp_path / "dispatch-1" / "next_seq"
    seen, torn, stop = [], [], threading.Event()

    def read():
        while not stop.is_set():
            if marker.exists():
                text = marker.read_text()
                (seen if text.isdigit() else torn).append(text)

    reader = threading.Thread(target=read)
    reporter = Reporter(config)
    reader.start()
    for i in range(400):
        reporter.log(f"line {i}")
        if i % 4 == 0:
            threading.Event().wait(0.002)  # let the reporter cut a batch
    stop.set()
    reader.join()
    reporter.close(timeout_s=0.1)
    batches = sorted((tmp_path / "dispatch-1").glob("*.json"))
    assert torn == []
    assert len(batches) > 10 and len(seen) > 10
    # a new reporter of the same dispatch continues after the last spooled batch
    again = Reporter(config)
    try:
        assert again._next_seq == int(batches[-1].stem) + 1
    finally:
        again.close(timeout_s=0.1)
