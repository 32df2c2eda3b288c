"""A websocket client that drives the ASGI app in process (asgiref's communicator; the
one of channels.testing needs daphne, which Paddock does not install)."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from asgiref.testing import ApplicationCommunicator

from paddock.asgi import application

ORIGIN = b"http://127.0.0.1:8000"


class Ws:
    def __init__(self, url: str, origin: bytes | None = ORIGIN, token: str | None = None,
                 subprotocols: tuple[str, ...] = ()):  # fmt: skip
        parts = urlsplit(url)
        headers = [(b"host", b"127.0.0.1:8000")] + ([(b"origin", origin)] if origin else [])
        if token is not None:  # as a program sends it (docs/live-protocol.md)
            headers.append((b"authorization", f"Bearer {token}".encode()))
        scope = {
            "type": "websocket", "path": parts.path, "raw_path": parts.path.encode(),
            "query_string": parts.query.encode(), "headers": headers,
            "subprotocols": list(subprotocols), "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8000),
        }  # fmt: skip
        self.app = ApplicationCommunicator(application, scope)

    async def connect(self) -> tuple[bool, int | None]:
        await self.app.send_input({"type": "websocket.connect"})
        reply = await self.app.receive_output(10)
        if reply["type"] == "websocket.accept":
            return True, None
        return False, reply.get("code")

    async def send_text(self, text: str) -> None:
        await self.app.send_input({"type": "websocket.receive", "text": text})

    async def send_bytes(self, data: bytes) -> None:
        await self.app.send_input({"type": "websocket.receive", "bytes": data})

    async def receive(self, timeout: float = 5) -> dict:
        return await self.app.receive_output(timeout)

    async def receive_json(self, timeout: float = 5):
        message = await self.receive(timeout)
        assert message["type"] == "websocket.send", message
        return json.loads(message["text"])

    async def close(self) -> None:
        await self.app.send_input({"type": "websocket.disconnect", "code": 1000})
        await self.app.wait(5)
