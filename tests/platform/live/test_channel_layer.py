"""The channel layer as configured (Redis pub/sub, settings.py): a broadcast from another
process (as a Celery task makes one) reaches a group member here, once per member; and the
layer's prefix names the Redis database, because pub/sub channels ignore it."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from channels.layers import get_channel_layer
from django.conf import settings

from paddock.environment import redis_db
from paddock.live.groups import run_group
from tests.conftest import REPO, service_env

SEND = """
import django; django.setup()
from paddock.live.broadcast import broadcast_batch
broadcast_batch(run_id=987654, experiment_id=987653,
                payload={"run_id": 987654, "cursor": {"dispatch": 1, "seq": 7}})
"""


def test_a_broadcast_from_another_process_reaches_each_group_member_once():
    async def watch():
        layer = get_channel_layer()
        members = [await layer.new_channel() for _ in range(3)]
        for channel in members:
            await layer.group_add(run_group(987654), channel)
        outsider = await layer.new_channel()  # in no group: gets nothing
        sender = await asyncio.create_subprocess_exec(
            sys.executable, "-c", SEND, cwd=REPO, env=service_env()
        )
        assert await sender.wait() == 0
        got = [await asyncio.wait_for(layer.receive(c), 10) for c in members]
        for channel in members:  # nothing more: one copy per member
            try:
                extra = await asyncio.wait_for(layer.receive(channel), 0.3)
            except TimeoutError:
                extra = None
            assert extra is None, extra
        try:
            stray = await asyncio.wait_for(layer.receive(outsider), 0.3)
        except TimeoutError:
            stray = None
        for channel in members:
            await layer.group_discard(run_group(987654), channel)
        await layer.flush()
        return got, stray

    got, stray = asyncio.run(watch())
    assert [m["type"] for m in got] == ["run.batch"] * 3
    assert all(m["cursor"] == {"dispatch": 1, "seq": 7} for m in got)
    assert stray is None


def test_the_layer_prefix_names_the_redis_database():
    assert redis_db("redis://redis.internal:6379/3") == "3"
    assert redis_db("redis://redis.internal:6379") == "0"
    assert redis_db("unix:///var/run/redis.sock?db=5") == "5"
    assert redis_db("unix:///var/run/redis.sock") == "0"
    out = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.conf import "
         "settings; print(settings.CHANNEL_LAYERS['default']['CONFIG']['prefix'])"],
        cwd=REPO, env=service_env(DJANGO_SETTINGS_MODULE="paddock.settings",
                                  REDIS_URL="redis://127.0.0.1:6379/9"),
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == "paddock.db9"
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"].endswith("RedisPubSubChannelLayer")
