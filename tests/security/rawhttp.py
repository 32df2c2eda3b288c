"""A websocket handshake over a plain socket, to read exactly what the server answers (a
status line, or nothing) whatever the request: an odd path, an oversized line."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass


@dataclass
class Reply:
    status: int | None  # None: no answer within the timeout
    seconds: float
    closed: bool  # the server closed the connection after answering
    head: bytes


def handshake(
    port: int,
    target: str | bytes,
    *,
    origin: str | None = None,
    cookie: str | None = None,
    extra: bytes = b"",
    timeout: float = 10,
) -> Reply:
    target = target.encode("latin-1") if isinstance(target, str) else target
    key = b"dGhlIHNhbXBsZSBub25jZQ=="
    lines = [b"GET " + target + b" HTTP/1.1", b"Host: 127.0.0.1:%d" % port,
             b"Upgrade: websocket", b"Connection: Upgrade", b"Sec-WebSocket-Key: " + key,
             b"Sec-WebSocket-Version: 13"]  # fmt: skip
    if origin is not None:
        lines.append(b"Origin: " + origin.encode())
    if cookie is not None:
        lines.append(b"Cookie: " + cookie.encode())
    request = b"\r\n".join(lines) + b"\r\n" + extra + b"\r\n"
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        try:
            sock.sendall(request)
        except OSError:
            pass  # the server may refuse before reading it all; its answer is still there
        head = b""
        try:
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                head += chunk
        except TimeoutError:
            return Reply(None, time.monotonic() - started, False, head)
        except ConnectionResetError:
            pass
        status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else None
        closed = False
        if status is not None and status != 101:
            try:
                while sock.recv(65536):
                    pass
                closed = True
            except TimeoutError:
                closed = False
            except ConnectionResetError:
                closed = True
        return Reply(status, time.monotonic() - started, closed, head)
