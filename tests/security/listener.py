"""An HTTP server on 127.0.0.1, in a thread of its own, that records what reaches it (the
method, path and headers of every request) and answers with a function of the test's: what
the security probes point a URL, a cluster address or a redirect at."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Seen:
    method: str
    path: str  # without the query
    query: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Reply:
    status: int = 200
    body: bytes | dict | list = b""
    headers: dict[str, str] = field(default_factory=dict)
    drip_s: float = 0.0  # > 0: the body goes out a byte at a time, this long apart


class Listener:
    """`answer(seen) -> Reply` decides each reply; `hold` (an Event) set makes every request
    wait until it is cleared (a cluster that accepts and never answers)."""

    def __init__(self, answer: Callable[[Seen], Reply]):
        self.seen: list[Seen] = []
        self.release = threading.Event()
        self.holding = False
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self):
                path, _, query = self.path.partition("?")
                size = int(self.headers.get("Content-Length") or 0)
                seen = Seen(self.command, path, query, dict(self.headers), self.rfile.read(size))
                listener.seen.append(seen)
                if listener.holding:
                    listener.release.wait(60)
                    return
                reply = answer(seen)
                data = reply.body
                if isinstance(data, dict | list):
                    data = json.dumps(data).encode()
                    reply.headers.setdefault("Content-Type", "application/json")
                self.send_response(reply.status)
                for key, value in {"Content-Length": str(len(data)), **reply.headers}.items():
                    self.send_header(key, value)
                self.end_headers()
                if not reply.drip_s:
                    self.wfile.write(data)
                    return
                for i in range(len(data)):
                    if listener.release.wait(reply.drip_s):
                        return
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()

            do_GET = do_POST = do_PUT = do_DELETE = _any  # noqa: N815

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def hold(self) -> None:
        """Accept every request from now on and never answer it (until stop)."""
        self.holding = True

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
