"""A reference reward service for Paddock's `service` reward term, on the standard library
alone.

It scores each item 1.0 when the completion's final answer (the last \\boxed{...}, else the
last number) equals the item's answer, else 0.0, and says what it compared in `details`.
Replace `score()` with your own verifier (a code sandbox, an LLM judge) and keep the
contract:

    POST /   {"items": [{"prompt", "completion", "answer", "metadata"}, ...]}
    200      {"rewards": [float, one per item], "details": [object, one per item]}

    python examples/reward_service/server.py --port 8123
    curl -s localhost:8123 -d '{"items": [{"prompt": "1+1?", "completion": "so \\\\boxed{2}",
        "answer": "2", "metadata": {}}]}'

The --fail-first, --status, --delay, --malformed and --wrong-length flags make it misbehave
on purpose, for testing a client's retries and errors.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def final_answer(completion: str) -> str | None:
    boxed = last_boxed(completion)
    if boxed is not None:
        return boxed.strip()
    found = NUMBER.findall(completion)
    return found[-1].replace(",", "") if found else None


def score(item: dict) -> tuple[float, dict]:
    """1.0 when the final answer equals the gold answer (as numbers when both are)."""
    got, gold = final_answer(str(item.get("completion", ""))), str(item.get("answer", "")).strip()
    if got is None:
        return 0.0, {"extracted": None}
    try:
        ok = abs(float(got) - float(gold.replace(",", ""))) < 1e-9
    except ValueError:
        ok = got == gold
    return float(ok), {"extracted": got}


class Faults:
    """What the server does wrong, on purpose (tests)."""

    def __init__(self, args: argparse.Namespace):
        self.fail_first, self.status = args.fail_first, args.status
        self.delay, self.malformed = args.delay, args.malformed
        self.wrong_length = args.wrong_length
        self.token = args.token
        self.requests = 0
        self.lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    faults: Faults
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args) -> None:  # quiet: one line per request is noise
        pass

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # a health check, and the count of scoring requests so far
        self._reply(200, json.dumps({"ok": True, "requests": self.faults.requests}).encode())

    def do_POST(self) -> None:
        f = self.faults
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with f.lock:
            f.requests += 1
            n = f.requests
        if f.token and self.headers.get("Authorization") != f"Bearer {f.token}":
            return self._reply(401, b'{"error": "bad or missing token"}')
        if f.delay:
            time.sleep(f.delay)
        if n <= f.fail_first or f.status:
            return self._reply(f.status or 500, b'{"error": "injected failure"}')
        try:
            items = json.loads(raw)["items"]
            assert isinstance(items, list)
        except (ValueError, KeyError, TypeError, AssertionError):
            return self._reply(400, b'{"error": "expected {\\"items\\": [...]}"}')
        if f.malformed:
            return self._reply(200, b"<html>not json</html>")
        scored = [score(it if isinstance(it, dict) else {}) for it in items]
        rewards = [r for r, _ in scored]
        if f.wrong_length:
            rewards = rewards[:-1]
        body = {"rewards": rewards, "details": [d for _, d in scored]}
        self._reply(200, json.dumps(body).encode())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8123, help="0: any free port (printed)")
    p.add_argument("--token", default=None, help="require Authorization: Bearer TOKEN")
    p.add_argument("--fail-first", type=int, default=0, help="answer 500 to the first N")
    p.add_argument("--status", type=int, default=0, help="answer every request with this")
    p.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    p.add_argument("--malformed", action="store_true", help="answer with a non-JSON body")
    p.add_argument("--wrong-length", action="store_true", help="one reward too few")
    args = p.parse_args(argv)
    Handler.faults = Faults(args)
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
