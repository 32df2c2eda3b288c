"""Django's ASGI handler with a few long-lived request threads per process (lanes), the
middleware chain and view in one hop, and a fast path (`fast`) tried first in the lane.

Why (bench/load/rest_ws.py, docs/reliability.md "Load"): every API view is synchronous.
Django's handler gives each request a thread of its own (a `ThreadSensitiveContext` per
request), created and joined for that request, so 16 concurrent requests in one process
were 16 threads taking turns at the GIL with the event loop, which waited up to the GIL's
switch interval behind each of them before it could accept a connection, answer a
websocket handshake or send a reply. And its async middleware chain ran each
MiddlewareMixin hook through `sync_to_async` and WhiteNoise (sync only) through
`async_to_sync`: about fifteen crossings between the loop and the request's thread per
request, each waiting for the loop.

Here a request runs in one of `LANES` single-thread executors, the least busy when it
arrives (its thread-sensitive calls all go to that thread, as in Django's own context, so
the ORM keeps its connection), and the whole middleware chain and view are one call in it.
A slow request holds up only the requests queued on its lane. Reading the body and sending
the answer stay in the event loop; the request's signals, building the request, the chain
and view and, for an answer already rendered, its close (request_finished, which gives the
database connection back to the pool) are that one call: Django's handler made three hops
to the request's thread for them, each a wait for the thread and one for the loop.

This reaches into Django's handler: `handle` below is a copy of `ASGIHandler.handle` with
the hops merged. tests/platform/http/test_framework_internals.py fails when Django's
`handle` changes (compare and copy again), and `switch_interval` sets the GIL's switch
interval for the whole process (`paddock/asgi.py` calls it once)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import FileResponse, HttpResponse
from django.urls import set_script_prefix

# Five: a request waits on PostgreSQL part of its time, and other lanes fill it; fewer lanes
# left the process idle while PostgreSQL was slow (on a busy machine, against Django's
# thread per request: 2 lanes served 0.33 times its REST requests, 6 lanes 0.8 and 12 lanes
# 1.0, with 3.7, 2.4 and 1.8 times its websockets; bench/load/rest_ws.py), and more
# would outnumber the connection pool (8 a process: the lanes, the consumers' threads and
# the ingest threads share it) and bring back the contention for the GIL. Since the reads
# wait less on PostgreSQL (prepared statements, docs/reliability.md "Load"), each lane
# fewer gives the event loop and the websockets' threads more of the GIL: side by side
# against 6, 3 lanes served 0.73 times the REST requests at 1.4 times the p99 with 1.6
# times the websockets at 0.36 times their p99; 5 lanes the same REST (p99 237 against
# 223 ms) with 1.2 times the websockets at 0.87 times their p99 (415 against 477 ms).
LANES = 5
# The event loop takes the GIL back from a busy lane after 1 ms, not CPython's 5: every
# accept, websocket handshake step and reply sent waits for it behind the lanes' Python.
SWITCH_INTERVAL_S = 0.001


def switch_interval() -> None:
    sys.setswitchinterval(SWITCH_INTERVAL_S)


Fast = Callable[[object], HttpResponse | None]


class LanedASGIHandler(ASGIHandler):
    def __init__(self, lanes: int = LANES, fast: Fast | None = None):
        super().__init__()
        self.lanes = [
            ThreadPoolExecutor(1, thread_name_prefix=f"http-lane-{i}") for i in range(lanes)
        ]
        self.queued = [0] * lanes  # requests on each lane now (only the loop touches it)
        self.fast = fast  # its answer, or None: the middleware chain answers

    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)  # the sync chain: no crossing inside it

    def _respond(self, scope, body_file):
        """In the request's lane: what Django's handle does between reading the body and
        sending the answer, and the close of an answer that is not streamed."""
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = (self.fast and self.fast(request)) or self.get_response(request)
            response._handler_class = self.__class__
            if isinstance(response, FileResponse):
                response.block_size = self.chunk_size  # the server chunks it
        if not response.streaming:
            response.close()  # its content is rendered: request_finished now, not after a hop
            body_file.close()
        return response

    async def handle(self, scope, receive, send):
        """Django's ASGIHandler.handle, with one hop to the lane (`_respond`) where it makes
        three; a streamed answer is sent as Django sends it, stopped if the client leaves."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        response = await sync_to_async(self._respond, thread_sensitive=True)(scope, body_file)
        if not response.streaming:
            await self.send_response(response, send)
            return
        tasks = [
            asyncio.create_task(self.listen_for_disconnect(receive)),
            asyncio.create_task(self.send_response(response, send)),
        ]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if not task.done():
                task.cancel()
            try:
                await task
            except (asyncio.CancelledError, RequestAborted):
                pass
        await sync_to_async(response.close, thread_sensitive=True)()
        body_file.close()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        lane = min(range(len(self.lanes)), key=self.queued.__getitem__)
        self.queued[lane] += 1
        try:
            async with ThreadSensitiveContext(executor=self.lanes[lane]):
                await self.handle(scope, receive, send)
        finally:
            self.queued[lane] -= 1
