"""The chaos suite's view of the jobs' side of the wire: a proxy between every job and the
platform (a job's `PADDOCK_PUBLIC_URL` points here) that

- records every ingest batch whose 200 reply, acknowledging its seq, it handed to the job:
  the ledger of what the platform acknowledged, kept outside the platform and the job;
- cuts one run off the platform for a while (a network partition): its requests are
  swallowed, and so are replies still on their way (the job then resends a batch the
  platform has stored), until `heal` closes its connections.

It speaks just enough HTTP/1.1 for that: one request, then its reply, at a time on each
connection (what a `requests.Session` does; it never pipelines), bodies framed by
Content-Length or chunked."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

_RUN_PATH = re.compile(rb"^[A-Z]+ /api/v1/runs/(\d+)/(\w+)")


@dataclass(frozen=True)
class Ack:
    """A batch the platform acknowledged, as the job received it."""

    run_id: int
    dispatch: int
    seq: int
    events: list[dict[str, Any]]
    at: float  # when the reply was handed to the job (Unix seconds)


class _Closed(Exception):
    pass


class _Reader:
    """Reads HTTP messages off a socket, keeping what it read past one for the next."""

    def __init__(self, sock: socket.socket):
        self.sock, self.buf = sock, b""

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise _Closed
        self.buf += data

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def message(self) -> tuple[bytes, bytes, bytes]:
        """(head, raw body as framed on the wire, decoded body)."""
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        headers = {}
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            raw, body = b"", b""
            while True:
                size_line = self._line()
                size = int(size_line.split(b";")[0], 16)
                chunk = self._take(size + 2)
                raw += size_line + b"\r\n" + chunk
                body += chunk[:-2]
                if size == 0:
                    return head + b"\r\n\r\n", raw, body
        body = self._take(int(headers.get(b"content-length", b"0")))
        return head + b"\r\n\r\n", body, body


@dataclass
class IngestProxy:
    upstream_port: int
    port: int = 0
    acks: list[Ack] = field(default_factory=list)
    # (run id, "request" | "reply") -> how many a partition swallowed: a swallowed reply is
    # a batch stored whose job resends it (acknowledged again, stored once)
    swallowed: Counter = field(default_factory=Counter)

    def __post_init__(self):
        self._lock = threading.Lock()
        self._cut: dict[int, threading.Event] = {}  # run id -> set when healed
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._closing = False
        threading.Thread(target=self._accept, name="chaos-proxy", daemon=True).start()

    # ---- faults ---------------------------------------------------------------------------

    def partition(self, run_id: int) -> None:
        with self._lock:
            self._cut.setdefault(run_id, threading.Event())

    def heal(self, run_id: int) -> None:
        with self._lock:
            healed = self._cut.pop(run_id, None)
        if healed is not None:
            healed.set()

    def acks_of(self, run_id: int) -> list[Ack]:
        with self._lock:
            return [a for a in self.acks if a.run_id == run_id]

    def close(self) -> None:
        self._closing = True
        with self._lock:
            cuts = list(self._cut.values())
            self._cut.clear()
        for healed in cuts:
            healed.set()
        self._listener.close()

    # ---- plumbing -------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _cut_event(self, run_id: int | None) -> threading.Event | None:
        with self._lock:
            return self._cut.get(run_id) if run_id is not None else None

    def _swallow(self, run_id: int, what: str, healed: threading.Event) -> None:
        """A partition: nothing more passes on this connection; it is closed at the heal
        (the job's request times out, or meets a closed connection, and is retried)."""
        with self._lock:
            self.swallowed[(run_id, what)] += 1
        healed.wait()

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            requests_in = _Reader(client)
            while True:
                head, raw, body = requests_in.message()
                found = _RUN_PATH.match(head)
                run_id = int(found.group(1)) if found else None
                healed = self._cut_event(run_id)
                if healed is not None:
                    return self._swallow(run_id, "request", healed)
                if upstream is None:
                    upstream = socket.create_connection(("127.0.0.1", self.upstream_port), 10)
                    upstream.settimeout(None)
                    replies_in = _Reader(upstream)
                upstream.sendall(head + raw)
                reply_head, reply_raw, reply_body = replies_in.message()
                healed = self._cut_event(run_id)
                if healed is not None:
                    return self._swallow(run_id, "reply", healed)  # stored, reply lost
                client.sendall(reply_head + reply_raw)
                if found and found.group(2) == b"ingest":
                    self._record(run_id, reply_head, body, reply_body)
        except (_Closed, OSError):
            pass
        finally:
            for sock in (client, upstream):
                if sock is not None:
                    try:
                        sock.close()
                    except OSError:
                        pass

    def _record(self, run_id: int, reply_head: bytes, body: bytes, reply_body: bytes) -> None:
        if not reply_head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
            return
        batch, reply = json.loads(body), json.loads(reply_body)
        # a heartbeat (no events) repeats the last ack: it acknowledges nothing new
        if batch["events"] and reply.get("ack") == batch["seq"]:
            ack = Ack(run_id, batch["dispatch"], batch["seq"], batch["events"], time.time())
            with self._lock:
                self.acks.append(ack)
