"""A reference environment server for Paddock's `env.name: http` (NeMo Gym's style), on the
standard library alone: the calculator environment (an `add` tool; the episode ends at the
first reply without a tool call, scored 1.0 when its last \\boxed{} is the sum).

    GET  /tools              → {"tools": [schemas]}
    POST /seed_session       {"seed", "example": {"prompt", "answer", "metadata"}}
                             → {"session_id", "prompt": null}  (the example's prompt as it is)
    POST /tools/add          {"session_id", "turn", "arguments": {"a", "b"}} → {"output"}
    POST /verify             {"session_id", "turn", "response"} → {"done", "reward", "correct"}
    POST /close              {"session_id"}

    python examples/env_server/server.py --port 8124

Replace the tool and `verify` with your environment's and keep the contract
(docs/environments.md#http). The --fail-first, --status, --delay and --malformed flags make
it misbehave on purpose, for testing a client's retries and errors.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


class State:
    """Sessions, counts, and what the server does wrong on purpose (tests)."""

    def __init__(self, args: argparse.Namespace):
        self.fail_first, self.status = args.fail_first, args.status
        self.delay, self.malformed = args.delay, args.malformed
        self.requests = 0
        self.sessions: dict[str, str] = {}  # session id → answer
        self.closed = 0
        self.ids = itertools.count()
        self.lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    state: State
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args) -> None:
        pass

    def _reply(self, status: int, body: dict | bytes) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        s = self.state
        if self.path == "/tools":
            return self._reply(200, {"tools": [ADD]})
        with s.lock:
            counts = {"requests": s.requests, "sessions": len(s.sessions), "closed": s.closed}
        self._reply(200, {"ok": True, **counts})

    def do_POST(self) -> None:
        s = self.state
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with s.lock:
            s.requests += 1
            n = s.requests
        if s.delay:
            time.sleep(s.delay)
        if n <= s.fail_first or s.status:
            return self._reply(s.status or 500, {"error": "injected failure"})
        if s.malformed:
            return self._reply(200, b"<html>not json</html>")
        try:
            body = json.loads(raw)
            assert isinstance(body, dict)
        except (ValueError, AssertionError):
            return self._reply(400, {"error": "expected a JSON object"})
        if self.path == "/seed_session":
            sid = f"s{next(s.ids)}"
            with s.lock:
                s.sessions[sid] = str(body.get("example", {}).get("answer", ""))
            return self._reply(200, {"session_id": sid, "prompt": None})
        answer = s.sessions.get(str(body.get("session_id")))
        if answer is None:
            return self._reply(404, {"error": "no such session"})
        if self.path == "/tools/add":
            args = body.get("arguments") or {}
            a, b = args.get("a"), args.get("b")
            if not isinstance(a, int) or not isinstance(b, int):
                return self._reply(200, {"output": "error: add takes two integers"})
            return self._reply(200, {"output": str(a + b)})
        if self.path == "/verify":
            found = BOXED.findall(str(body.get("response", "")))
            ok = bool(found) and found[-1].strip() == answer
            return self._reply(200, {"done": True, "reward": float(ok), "correct": ok})
        if self.path == "/close":
            with s.lock:
                s.sessions.pop(str(body.get("session_id")), None)
                s.closed += 1
            return self._reply(200, {})
        self._reply(404, {"error": f"no route {self.path}"})


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8124, help="0: any free port (printed)")
    p.add_argument("--fail-first", type=int, default=0, help="answer 500 to the first N POSTs")
    p.add_argument("--status", type=int, default=0, help="answer every POST with this")
    p.add_argument("--delay", type=float, default=0.0, help="seconds before each POST's answer")
    p.add_argument("--malformed", action="store_true", help="answer POSTs with a non-JSON body")
    args = p.parse_args(argv)
    Handler.state = State(args)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    host, port = server.server_address[:2]
    print(f"listening on http://{host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        sys.stdout.flush()


if __name__ == "__main__":
    main()
