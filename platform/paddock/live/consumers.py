"""Websocket consumers for `run.<id>` and `experiment.<id>` (docs/live-protocol.md).

Thin on purpose: access is decided in access.py, snapshots and replays are built in
snapshots.py, control goes through the same services as the REST API (and so is audited).

Ordering: the consumer joins its group *before* it reads the snapshot, and drops any group
message whose cursor the snapshot already covers; so nothing stored between the two is
lost and nothing is sent twice. Metric batches are coalesced to one message per
`MIN_INTERVAL_S` per consumer on average, with bursts of up to `BURST` (everything is stored;
a viewer needs a few updates a second).
"""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from channels.db import DatabaseSyncToAsync
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from pydantic import ValidationError

from paddock.core.errors import DomainError, ErrorCode
from paddock.core.jsonbody import JsonBodyError, json_parse
from paddock.experiments.control import RUN_CONTROLS
from workers.live_messages import ControlMessage, ErrorMessage, MetricsMessage

from . import revocations
from .access import (
    accepted_subprotocol,
    access_change_applies,
    parse_cursors,
    scope_actor,
    session_mark,
    stream_experiment,
    stream_run,
    stream_run_allowed,
)
from .groups import experiment_group, run_group
from .snapshots import experiment_run_ids, run_replay, run_snapshot_text

MIN_INTERVAL_S = 0.2
# A token bucket rather than a fixed gap after each send: with a gap, a batch that arrived
# late pushed every later send back with it, so a job reporting at about the rate limit saw
# its delays ratchet up to the worst jitter so far. The bucket lets a late batch and the
# next one through at once and still holds a viewer to 1 / MIN_INTERVAL_S messages a second.
BURST = 3
FORBIDDEN = 4403
MAX_CLIENT_FRAME = 4096  # a control message is a few dozen bytes
# An open stream re-checks its viewer's access this often: what no `access.changed` message
# announces (a token that expired, a membership changed in the database by hand) stops it
# within this time. A revoked token, a removed member and a logout close it at once
# (live/access.py). One or two indexed queries per viewer per interval.
ACCESS_RECHECK_S = 30.0
# The consumers' reads (the access checks, the snapshots and replays, control) run in these
# threads, not in the one thread Channels gives all the consumers of a process: there a
# connect's snapshot queued behind every other connect's, and under load that queue was
# most of a connect's p99 (docs/reliability.md "Load"). Each call takes a connection from
# the pool and gives it back when it returns (close_old_connections), so they hold at most
# this many of its 8 connections, and only while they read (with the six HTTP lanes they
# can want more than 8 at once: a thread then waits for one). Four, not two: a connect's
# access check waited behind the snapshots in flight, whose threads mostly wait on
# PostgreSQL (rest_ws.py, 4 against 2 side by side at load 8-12: websocket p99 444 against
# 542 ms at 1.5 times the connects, REST the same).
DB_THREADS = 4
_db_threads = ThreadPoolExecutor(DB_THREADS, thread_name_prefix="ws-db")


def database_sync_to_async(func):
    """Channels' database_sync_to_async in the consumers' own threads (DB_THREADS)."""
    return DatabaseSyncToAsync(func, thread_sensitive=False, executor=_db_threads)


def _snapshot_text(run_id: int) -> tuple[str, tuple[int, int]]:
    """The run's snapshot encoded as send_json encodes it (json.dumps: AsyncJsonWebsocket-
    Consumer.encode_json; its points written by PostgreSQL: run_snapshot_text), and its
    cursor: encoded in the reading thread, not in the event loop, where a 49 KB snapshot's
    JSON held up every other socket and request of the process for about 2 ms."""
    text, cursor = run_snapshot_text(run_id)
    return text, _key(cursor)


def _key(cursor: dict[str, int]) -> tuple[int, int]:
    return (cursor["dispatch"], cursor["seq"])


class _StreamConsumer(AsyncJsonWebsocketConsumer):
    groups_joined: list[str]

    def _begin(self) -> None:
        self.streaming = False  # accepted and sent its snapshot or replay: group messages go out
        self.sent_cursor: dict[int, tuple[int, int]] = {}
        self.pending: dict[int, list[str]] = {}  # run → encoded metrics messages
        self.sends = float(BURST)  # the bucket: metric messages that may go out now
        self.refilled = time.monotonic()
        self.flush_task: asyncio.Task | None = None
        self.groups_joined = []

    async def _join(self, group: str) -> None:
        await self.channel_layer.group_add(group, self.channel_name)
        self.groups_joined = [group]
        revocations.watch(self)

    async def accept(self, subprotocol=None, headers=None):
        await super().accept(accepted_subprotocol(self.scope), headers)

    async def _start(self, group: str, run_ids: list[int], cursors: dict[int, tuple]) -> None:
        self._begin()
        self.access_task = asyncio.create_task(self._recheck_access())
        await self._join(group)
        await self.accept()
        self.streaming = True
        for run_id in run_ids:
            after = cursors.get(run_id)
            if after is None:
                text, cursor = await database_sync_to_async(_snapshot_text)(run_id)
                await self.send(text_data=text)
                self.sent_cursor[run_id] = cursor
            else:
                messages = await database_sync_to_async(run_replay)(run_id, after)
                for message in messages:
                    await self.send_json(message)
                self.sent_cursor[run_id] = _key(messages[-1]["cursor"])

    async def websocket_disconnect(self, message):
        """Channels' own, less its last step: a hop to Channels' shared thread to close that
        thread's database connections, which these consumers never use (their reads run in
        DB_THREADS, each call closing its own: DatabaseSyncToAsync). On a connect's close
        that hop and its wake-up were about 5 % of a loaded server's CPU."""
        for group in self.groups:  # the static ones (none here: see groups_joined)
            await self.channel_layer.group_discard(group, self.channel_name)
        await self.disconnect(message["code"])
        raise StopConsumer()

    async def disconnect(self, code):
        revocations.unwatch(self)
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)
        for name in ("flush_task", "access_task"):
            task = getattr(self, name, None)
            if task is not None:
                task.cancel()

    async def _recheck_access(self) -> None:
        while True:
            await asyncio.sleep(ACCESS_RECHECK_S)
            if not await database_sync_to_async(self._still_allowed)():
                await self.close(code=FORBIDDEN)
                return

    def _still_allowed(self) -> bool:
        """Whether the scope's credentials still reach the stream (read anew each time)."""
        self.actor = scope_actor(self.scope)
        session = self.scope.get("session")
        self.session = session_mark(session.session_key if session is not None else None)
        return self._allowed(self.actor)

    def _allowed(self, actor) -> bool:
        raise NotImplementedError

    async def access_changed(self, event: dict[str, Any]) -> None:
        """Credentials stopped working (live/access.py): close if they were this stream's."""
        actor = getattr(self, "actor", None)
        if actor is None:
            return  # not through its first check yet: that check reads them anew
        what = access_change_applies(event, actor=actor, session=self.session)
        if what == "close" or (
            what == "recheck" and not await database_sync_to_async(self._still_allowed)()
        ):
            await self.close(code=FORBIDDEN)

    # ---- group messages -------------------------------------------------------------------

    async def run_batch(self, event: dict[str, Any]) -> None:
        if not getattr(self, "streaming", False):
            return  # joined before its access check, refused or not yet sent its snapshot
        run_id, cursor = event["run_id"], _key(event["cursor"])
        if cursor <= self.sent_cursor.get(run_id, (-1, -1)):
            return  # already covered by the snapshot or replay
        self.sent_cursor[run_id] = cursor
        for message in event.get("messages", []):  # built once, by live/ingest.py
            await self.send_json(message)
        if event.get("metrics_text"):
            self.pending.setdefault(run_id, []).append(event["metrics_text"])
            await self._flush_soon()

    async def run_state(self, event: dict[str, Any]) -> None:
        if not getattr(self, "streaming", False):
            return
        await self._flush_now()  # metrics before the state that follows them
        await self.send_json({**event, "type": "state"})  # a StateMessage: broadcast.py

    async def run_alarms(self, event: dict[str, Any]) -> None:
        if not getattr(self, "streaming", False):
            return
        await self.send_json({**event, "type": "alarms"})  # an AlarmsMessage: broadcast.py

    def _take_send(self) -> float:
        """0 and one send taken from the bucket, or the seconds until one is there."""
        now = time.monotonic()
        self.sends = min(BURST, self.sends + (now - self.refilled) / MIN_INTERVAL_S)
        self.refilled = now
        if self.sends >= 1:
            self.sends -= 1
            return 0.0
        return (1 - self.sends) * MIN_INTERVAL_S

    async def _flush_soon(self) -> None:
        if self.flush_task is not None and not self.flush_task.done():
            return  # a flush is already waiting for the bucket: it takes these too
        wait = self._take_send()
        if wait <= 0:
            await self._flush_now()
        else:
            self.flush_task = asyncio.create_task(self._flush_later(wait))

    async def _flush_later(self, wait: float) -> None:
        await asyncio.sleep(wait)
        while (wait := self._take_send()) > 0:
            await asyncio.sleep(wait)
        await self._flush_now()

    async def _flush_now(self) -> None:
        pending, self.pending = self.pending, {}
        for texts in pending.values():
            if len(texts) == 1:
                await self.send(text_data=texts[0])  # the common case: already encoded
                continue
            # batches that arrived within one interval: one message, the newest cursor
            messages = [json.loads(t) for t in texts]
            steps = [step for m in messages for step in m["steps"]]
            merged = MetricsMessage.model_validate({**messages[-1], "steps": steps})
            await self.send_json(merged.model_dump())

    # ---- client messages ------------------------------------------------------------------

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        # A bad frame is the client's mistake: answer it and keep the stream (the default
        # decoder raises, which closes the socket with a server error).
        if text_data is None or len(text_data) > MAX_CLIENT_FRAME:
            await self._error(
                ErrorCode.INVALID_JSON, "send a JSON text frame {'action': …} under 4 KiB"
            )
            return
        try:
            content = json_parse(text_data)
        except JsonBodyError as exc:
            await self._error(ErrorCode.INVALID_JSON, f"the frame is refused: {exc.message}")
            return
        await self.receive_json(content)

    async def receive_json(self, content, **kwargs):
        try:
            asked = ControlMessage.model_validate(content)
        except ValidationError as exc:
            if any(e["loc"][:1] != ("run_id",) for e in exc.errors()):
                await self._error(ErrorCode.INVALID_ACTION, "action must be pause, resume or abort")
                return
            asked = ControlMessage(action=content["action"])  # its run_id names no run
        run_id = self._control_target(asked.run_id)
        if run_id is None:
            await self._error(ErrorCode.INVALID_RUN, "name the run: {'action': …, 'run_id': N}")
            return
        try:
            await database_sync_to_async(self._control)(RUN_CONTROLS[asked.action], run_id)
        except DomainError as exc:
            error = ErrorMessage(code=str(exc.code), message=exc.message, field=exc.field)
            await self.send_json(error.model_dump())

    def _control(self, control, run_id: int) -> None:
        actor = scope_actor(self.scope)  # re-read: a role may have changed since connect
        run = stream_run(actor, run_id)
        if run is None:
            raise DomainError(ErrorCode.NOT_FOUND, "run not found")
        control(actor=actor, run=run)

    def _control_target(self, run_id: int | None) -> int | None:
        """The run a control names on this stream (`run_id`: the message's), or None."""
        raise NotImplementedError

    async def _error(self, code: ErrorCode, message: str) -> None:
        await self.send_json(ErrorMessage(code=str(code), message=message).model_dump())


class RunStreamConsumer(_StreamConsumer):
    async def connect(self):
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        cursors = parse_cursors(self.scope)
        if 0 in cursors:
            cursors[self.run_id] = cursors.pop(0)
        if self.run_id in cursors:  # a reconnect: the access check, then the replay
            if not await database_sync_to_async(self._still_allowed)():
                await self.close(code=FORBIDDEN)
                return
            await self._start(run_group(self.run_id), [self.run_id], cursors)
            return
        # A first connect: the actor, the access check and the snapshot in one hop (each hop
        # waits for the consumers' threads and then for the event loop, behind every other
        # request of the process). So the group is joined before the check, as it must be
        # before the snapshot's read; nothing of it reaches a socket before the snapshot
        # (`streaming`: group messages are handled after connect returns, and dropped until
        # then), and a refused socket leaves the group at its close.
        self._begin()
        await self._join(run_group(self.run_id))
        first = await database_sync_to_async(self._snapshot_if_allowed)()
        if first is None:
            await self.close(code=FORBIDDEN)
            return
        text, cursor = first
        self.access_task = asyncio.create_task(self._recheck_access())
        await self.accept()
        await self.send(text_data=text)
        self.sent_cursor[self.run_id] = cursor
        self.streaming = True

    def _snapshot_if_allowed(self) -> tuple[str, tuple[int, int]] | None:
        return _snapshot_text(self.run_id) if self._still_allowed() else None

    def _control_target(self, run_id: int | None) -> int | None:
        return self.run_id

    def _allowed(self, actor) -> bool:
        return stream_run_allowed(actor, self.run_id)


class ExperimentStreamConsumer(_StreamConsumer):
    async def connect(self):
        experiment_id = self.experiment_id = int(self.scope["url_route"]["kwargs"]["experiment_id"])
        run_ids = await database_sync_to_async(self._runs_if_allowed)()
        if run_ids is None:
            await self.close(code=FORBIDDEN)
            return
        self.run_ids = run_ids
        cursors = parse_cursors(self.scope)
        await self._start(experiment_group(experiment_id), self.run_ids, cursors)

    def _runs_if_allowed(self) -> list[int] | None:
        """The experiment's run ids if the scope's actor may watch it (one hop for both)."""
        if not self._still_allowed():
            return None
        return experiment_run_ids(self.experiment_id)

    def _control_target(self, run_id: int | None) -> int | None:
        return run_id if run_id in self.run_ids else None

    def _allowed(self, actor) -> bool:
        return stream_experiment(actor, self.experiment_id) is not None
