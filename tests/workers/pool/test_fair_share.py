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
