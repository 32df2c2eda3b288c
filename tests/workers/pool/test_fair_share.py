"""The trainer's fair share between pooled runs: a pure schedule driven by a made-up clock."""

from __future__ import annotations

import pytest

from workers.policy.fair_share import FairShare, target_shares


def simulate(share: FairShare, cost: dict[str, float], steps: int, ready=None) -> dict[str, float]:
    """Run `steps` train steps on one trainer; every run is ready again right after its own
    step unless `ready(run, now)` says otherwise. Returns the trainer seconds per run."""
    now = 0.0
    used = dict.fromkeys(cost, 0.0)
    for run in cost:
        share.ready(run, now)
    for _ in range(steps):
        run = share.next(now)
        assert run is not None
        now += cost[run]
        share.charge(run, cost[run])
        used[run] += cost[run]
        if ready is None or ready(run, now):
            share.ready(run, now)
    return used


def test_equal_shares_of_time_whatever_a_step_costs():
    share = FairShare()
    for run in "abc":
        share.join(run)
    used = simulate(share, {"a": 2.0, "b": 1.0, "c": 0.5}, steps=700)
    total = sum(used.values())
    for run in "abc":
        assert used[run] / total == pytest.approx(1 / 3, abs=0.01)
    shares = share.metrics()
    assert {r: m["pool/share"] for r, m in shares.items()} == pytest.approx(
        {r: u / total for r, u in used.items()}
    )
    assert share.metrics()["a"]["pool/share"] == 0.0  # a new window starts empty


def test_weights_set_the_shares():
    share = FairShare()
    share.join("a", weight=2.0)
    share.join("b", weight=1.0)
    used = simulate(share, {"a": 1.0, "b": 1.0}, steps=300)
    assert used["a"] / used["b"] == pytest.approx(2.0, rel=0.02)
    assert target_shares({"a": 2.0, "b": 1.0}) == pytest.approx({"a": 2 / 3, "b": 1 / 3})
    share.set_weight("b", 2.0)
    used = simulate(share, {"a": 1.0, "b": 1.0}, steps=300)
    assert used["a"] == pytest.approx(used["b"], rel=0.02)
    with pytest.raises(ValueError, match="must be > 0"):
        share.join("c", weight=0)


def test_a_run_that_is_not_ready_never_holds_up_the_others():
    share = FairShare()
    share.join("a")
    share.join("slow")
    share.ready("a", 0.0)  # slow is still generating
    assert share.next(0.0) == "a"
    share.charge("a", 1.0)
    share.ready("a", 1.0)
    assert share.next(1.0) == "a"  # not waiting for slow
    assert share.next(2.0) is None  # nobody ready: the trainer idles


def test_no_credit_for_time_away():
    """A run back after a long absence shares from then on; it does not take the trainer
    alone until its total catches up."""
    share = FairShare()
    share.join("a")
    share.join("b")
    simulate(share, {"a": 1.0, "b": 1.0}, steps=20, ready=lambda run, now: run == "a")
    # b was away for 19 of a's steps; both ready now
    share.ready("b", 20.0)
    seq = []
    for i in range(10):
        run = share.next(20.0 + i)
        seq.append(run)
        share.charge(run, 1.0)
        share.ready(run, 21.0 + i)
    assert seq.count("a") == seq.count("b") == 5


def test_a_late_joiner_starts_at_the_pools_time_and_waits_are_measured():
    share = FairShare()
    share.join("a")
    simulate(share, {"a": 1.0}, steps=50)
    share.join("b")
    share.ready("b", 50.0)
    share.ready("a", 50.0)
    runs = []
    for i in range(10):
        run = share.next(50.0 + i)
        runs.append(run)
        share.charge(run, 1.0)
        share.ready(run, 51.0 + i)
    assert runs.count("b") == 5  # shares from the start, not 50 steps in a row
    share.leave("a")
    share.not_ready("b")  # its batch withdrawn (a pause)
    share.ready("b", 70.0)
    assert share.next(72.5) == "b"
    assert share.metrics()["b"]["pool/wait_s"] == pytest.approx(2.5)


def test_each_run_reports_its_share_over_its_own_window():
    share = FairShare()
    for run in "ab":
        share.join(run)
    used = simulate(share, {"a": 1.0, "b": 3.0}, steps=200)
    total = sum(used.values())
    assert share.run_metrics("a")["pool/share"] == pytest.approx(used["a"] / total)
    # a's window restarts; b's still spans everything since it joined
    share.charge("b", 5.0)
    assert share.run_metrics("a")["pool/share"] == 0.0
    assert share.run_metrics("b")["pool/share"] == pytest.approx((used["b"] + 5) / (total + 5))


def test_next_many_takes_the_ready_runs_in_fair_order():
    share = FairShare()
    for run, w in (("a", 1.0), ("b", 2.0), ("c", 1.0)):
        share.join(run, w)
    share.charge("a", 3.0)  # a is ahead; b and c are level
    for run in "abc":
        share.ready(run, 0.0)
    assert share.next_many(1.0, limit=2) == ["b", "c"]
    assert share.next_many(1.0) == ["a"] and share.next_many(1.0) == []
    assert share.clocks["a"].last_wait_s == 1.0


def test_batched_turns_take_every_waiting_run_and_wait_for_none():
    """A turn starts with whatever is waiting (one run alone, never held for another's
    batch); the runs that arrive during a turn go together in the next; each run gets its
    own result (or its exception), and the turn's time is charged by cost."""
    import asyncio

    from workers.pool.gate import FairGate, TrainTurns

    calls: list[list[str]] = []
    now = [0.0]

    def step_many(works):
        calls.append(sorted(works))
        now[0] += 1.0  # each turn takes a second of the made-up clock
        return {r: ValueError(r) if w == "bad" else (r, w) for r, w in works.items()}

    async def scenario():
        gate = FairGate(clock=lambda: now[0])
        for run in "abc":
            gate.join(run)
        turns = TrainTurns(gate, step_many, cost=lambda w: 3.0 if w == "big" else 1.0)
        first = asyncio.create_task(turns.step("a", "x"))
        await asyncio.sleep(0)  # a's turn starts alone, at once
        later = [asyncio.create_task(turns.step(r, w)) for r, w in (("b", "big"), ("c", "bad"))]
        assert await first == ("a", "x")
        assert await later[0] == ("b", "big")
        with pytest.raises(ValueError, match="c"):
            await later[1]
        return gate

    gate = asyncio.run(scenario())
    assert calls == [["a"], ["b", "c"]]
    used = {r: c.used_s for r, c in gate.share.clocks.items()}
    assert used == pytest.approx({"a": 1.0, "b": 0.75, "c": 0.25})


def test_a_batched_turn_withdrawn_before_it_starts_steps_nothing():
    import asyncio

    from workers.pool.gate import FairGate, TrainTurns

    calls: list[list[str]] = []

    async def scenario():
        gate = FairGate()
        for run in "ab":
            gate.join(run)
        turns = TrainTurns(gate, lambda works: calls.append(sorted(works)) or dict(works))
        async with gate.exclusive("a"):  # the trainer is busy: b's step waits
            waiting = asyncio.create_task(turns.step("b", 1))
            while "b" not in turns.pending:  # until b's step waits for its turn
                await asyncio.sleep(0)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
        assert await turns.step("a", 2) == 2
        assert gate.share.clocks["b"].ready_since is None

    asyncio.run(scenario())
    assert calls == [["a"]]


@pytest.mark.parametrize("slots", [1, 2])
def test_a_runs_overlapping_asks_each_get_a_turn(slots):
    """A run that asks again while its earlier ask still waits (an episode's overlapping
    turns, an evaluation beside the producer) gets a turn for each ask; with free slots
    they are held at once. Before, its second ask waited forever: the first ask's pick
    marked the run not ready, so the pick never named it again."""
    import asyncio

    from workers.pool.gate import FairGate

    async def scenario():
        gate = FairGate(slots=slots)
        for run in "ab":
            gate.join(run)
        busy, free = asyncio.Event(), asyncio.Event()
        held, release = asyncio.Event(), asyncio.Event()
        entered: list[str] = []

        async def block():  # every slot taken, so that a's two asks both wait
            async with gate.exclusive("b"):
                if gate.busy == slots:
                    busy.set()
                await free.wait()

        async def ask(run: str, tag: str):
            async with gate.turn(run):
                entered.append(tag)
                if len(entered) == slots:
                    held.set()
                await release.wait()

        blockers = [asyncio.create_task(block()) for _ in range(slots)]
        await asyncio.wait_for(busy.wait(), 10)
        tasks = [asyncio.create_task(ask("a", "a1")), asyncio.create_task(ask("a", "a2"))]
        while gate.asks["a"] < 2:  # both of a's asks wait
            await asyncio.sleep(0)
        free.set()
        await asyncio.wait_for(held.wait(), 10)  # a hang fails here
        if slots == 2:  # both of a's asks hold a slot at once
            assert sorted(entered) == ["a1", "a2"] and gate.busy == 2
        tasks.append(asyncio.create_task(ask("b", "b1")))
        release.set()
        await asyncio.wait_for(asyncio.gather(*tasks, *blockers), 10)
        assert sorted(entered) == ["a1", "a2", "b1"]
        assert gate.busy == 0 and not +gate.asks
        assert all(c.ready_since is None for c in gate.share.clocks.values())

    asyncio.run(scenario())
