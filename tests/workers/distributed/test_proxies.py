"""The driver-side proxies on stub actor handles (no Ray): requests fan out in contiguous
shares, the ack is a version only when every actor acknowledged it, a token labelled with a
version its actor never acknowledged is refused, and a dead actor is named."""

from __future__ import annotations

import asyncio

import pytest
from ray.exceptions import ActorDiedError

from workers.distributed.fleet import ActorDied, Member
from workers.distributed.proxies import PublishedAdapter, RayRolloutBackend
from workers.rollout import GroupRequest, GroupResult, Sample, SamplingParams


class Method:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args):
        return self.fn(*args)  # a coroutine: awaitable like an ObjectRef


class StubEngine:
    """A rollout actor handle: acknowledges `ack_offset + version`, labels tokens with what
    it last acknowledged plus `label_offset`; `dead` makes every call fail like Ray does."""

    def __init__(self, ack_offset=0, label_offset=0):
        self.ack_offset, self.label_offset = ack_offset, label_offset
        self.served, self.dead, self.seen = -1, False, []

    def __getattr__(self, name):
        async def call(*args):
            if self.dead:
                raise ActorDiedError()
            return getattr(self, f"_{name}")(*args)

        return Method(call)

    def _load_adapter(self, version, ref, probe):
        self.served = version + self.ack_offset
        return self.served

    def _generate(self, requests):
        self.seen.append([r.request_id for r in requests])
        label = self.served + self.label_offset
        return [
            GroupResult(r.request_id, r.prompt_ids,
                        [Sample([5, 1], [-0.1, -0.2], [label, label], "stop") for _ in range(r.n)])
            for r in requests
        ]  # fmt: skip

    def _pause(self, mode):
        return None


def backend(*engines):
    members = [Member(e, f"rollout actor {i} of {len(engines)}", {"pid": 100 + i, "host": "h"})
               for i, e in enumerate(engines)]  # fmt: skip
    return RayRolloutBackend(members, "torch")


def requests(n):
    return [GroupRequest(f"g{i}", [3, 4], 2, i, SamplingParams()) for i in range(n)]


def run(coro):
    return asyncio.run(coro)


def test_groups_fan_out_in_contiguous_shares_and_come_back_in_order():
    a, b = StubEngine(), StubEngine()
    proxy = backend(a, b)
    assert run(proxy.load_adapter(PublishedAdapter(0, ref="ref"))) == 0
    assert proxy.served_version == 0
    out = run(proxy.generate(requests(5)))
    assert [r.request_id for r in out] == ["g0", "g1", "g2", "g3", "g4"]
    assert a.seen == [["g0", "g1"]] and b.seen == [["g2", "g3", "g4"]]


def test_the_ack_is_the_version_only_if_every_actor_acknowledged_it():
    proxy = backend(StubEngine(), StubEngine(ack_offset=-1))
    assert run(proxy.load_adapter(PublishedAdapter(3, ref="ref"))) == 2  # driver: "did not reach"
    assert proxy.served_version == 2


def test_a_token_labelled_with_an_unacknowledged_version_is_refused():
    proxy = backend(StubEngine(), StubEngine(label_offset=1))
    run(proxy.load_adapter(PublishedAdapter(0, ref="ref")))
    refused = r"rollout actor 1 of 2 \(pid 101 on h\) labelled tokens of g1 with adapter "
    with pytest.raises(RuntimeError, match=refused + r"versions \[1\] it never acknowledged"):
        run(proxy.generate(requests(2)))


def test_a_dead_actor_is_named_and_stays_the_failure():
    a, b = StubEngine(), StubEngine()
    proxy = backend(a, b)
    run(proxy.load_adapter(PublishedAdapter(0, ref="ref")))
    b.dead = True
    with pytest.raises(ActorDied, match=r"^rollout actor 1 of 2 \(pid 101 on h\) died: The actor"):
        run(proxy.generate(requests(2)))
    with pytest.raises(ActorDied):
        run(proxy.pause("abort"))
    run(proxy.close())  # the run is failing already; the fleet is killed as a whole
