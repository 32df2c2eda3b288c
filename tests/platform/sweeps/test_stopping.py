"""The early-stopping rules on hand-made metric tables, each verdict worked out in a comment."""

from paddock.sweeps.stopping import (
    StoppingRule,
    best_by,
    best_member,
    running_mean,
    stop_decisions,
)

MEDIAN = StoppingRule("median", min_steps=2, min_members=3)


def test_running_mean_and_best_read_only_the_steps_up_to_the_one_asked():
    points = [(1, 0.1), (2, 0.5), (3, 0.3)]
    assert running_mean(points, 2) == (0.1 + 0.5) / 2
    assert best_by(points, 2, "max") == 0.5 and best_by(points, 3, "min") == 0.1
    assert running_mean(points, 0) is None and best_by([], 5, "max") is None


def test_median_stops_the_member_whose_best_is_below_the_others_running_means():
    tables = {
        "a": [(1, 0.6), (2, 0.8), (3, 0.9)],  # running mean at 3: 0.7667
        "b": [(1, 0.4), (2, 0.6), (3, 0.8)],  # 0.6
        "c": [(1, 0.3), (2, 0.5), (3, 0.4)],  # 0.4
        "d": [(1, 0.1), (2, 0.2), (3, 0.3)],  # best 0.3; a, b, c's median: 0.6 → stopped
    }
    # c: best 0.5 against a, b, d's means (0.7667, 0.6, 0.2): median 0.6 → stopped too;
    # b: best 0.8 against 0.7667, 0.4, 0.2 → 0.4: kept; a: best 0.9, kept
    decided = stop_decisions(MEDIAN, mode="max", tables=tables, candidates=tables)
    assert sorted(decided) == ["c", "d"]
    expected = "median stopping at step 3: its best 0.3 is below the median 0.6 of 3"
    assert decided["d"].startswith(expected)
    # with d gone from the table, c's others are a and b only: fewer than min_members
    tables.pop("d")
    assert stop_decisions(MEDIAN, mode="max", tables=tables, candidates=["c"]) == {}


def test_median_minimises_a_loss_the_other_way_round():
    tables = {
        "a": [(2, 1.0), (4, 0.8)],  # means at 4: 0.9
        "b": [(2, 1.2), (4, 1.0)],  # 1.1
        "c": [(2, 1.4), (4, 1.2)],  # 1.3
        "d": [(2, 2.0), (4, 1.9)],  # best 1.9 above the median 1.1 → stopped
    }
    decided = stop_decisions(MEDIAN, mode="min", tables=tables, candidates=["a", "d"])
    assert list(decided) == ["d"] and "above the median 1.1" in decided["d"]


def test_median_waits_for_min_steps_and_for_enough_members_at_that_step():
    early = {k: [(1, v)] for k, v in {"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.0}.items()}
    assert stop_decisions(MEDIAN, mode="max", tables=early, candidates=["d"]) == {}  # step 1 < 2
    few = {"a": [(2, 0.9)], "b": [(2, 0.8)], "d": [(2, 0.0)]}
    assert stop_decisions(MEDIAN, mode="max", tables=few, candidates=["d"]) == {}  # 2 others
    # a member not reported at all is never stopped
    assert stop_decisions(MEDIAN, mode="max", tables=early, candidates=["zz"]) == {}


def test_the_member_in_front_is_judged_at_the_latest_step_enough_others_reached():
    tables = {
        "lead": [(1, 0.1), (2, 0.1), (3, 0.1), (4, 0.9)],  # at step 4 alone
        "a": [(1, 0.5), (2, 0.5)],
        "b": [(1, 0.6), (2, 0.6), (3, 0.6)],
        "c": [(1, 0.4), (2, 0.4)],
    }
    # three others reached step 2: lead's best by 2 is 0.1, their means 0.5, 0.6, 0.4 → 0.5
    decided = stop_decisions(MEDIAN, mode="max", tables=tables, candidates=["lead"])
    assert decided["lead"].startswith("median stopping at step 2: its best 0.1")


def test_a_finished_or_stopped_member_counts_for_the_steps_it_reached():
    tables = {
        "done1": [(1, 0.5), (2, 0.5), (3, 0.5)],
        "done2": [(1, 0.7), (2, 0.7), (3, 0.7)],
        "stopped": [(1, 0.0), (2, 0.0)],  # reached step 2 only
        "new": [(1, 0.2), (2, 0.2), (3, 0.2)],
    }
    # at step 3 only done1 and done2 reached it (2 < 3); at step 2 all three others did:
    # means 0.5, 0.7, 0.0 → median 0.5 > new's best 0.2 → stopped at step 2
    decided = stop_decisions(MEDIAN, mode="max", tables=tables, candidates=["new"])
    assert decided["new"].startswith("median stopping at step 2")


def test_equal_members_are_never_stopped_by_the_median():
    tables = {k: [(1, 0.5), (2, 0.5), (3, 0.5)] for k in "abcd"}
    assert stop_decisions(MEDIAN, mode="max", tables=tables, candidates=tables) == {}


def test_threshold_stops_a_member_that_has_not_reached_it_by_min_steps():
    rule = StoppingRule("threshold", min_steps=3, threshold=0.5)
    tables = {
        "slow": [(1, 0.1), (2, 0.3), (3, 0.4)],  # best 0.4 < 0.5 at step 3 → stopped
        "good": [(1, 0.1), (2, 0.6), (3, 0.2)],  # best 0.6: it reached the bar once
        "young": [(1, 0.0), (2, 0.0)],  # step 2 < 3: not judged yet
    }
    decided = stop_decisions(rule, mode="max", tables=tables, candidates=tables)
    assert decided == {"slow": "threshold at step 3: its best 0.4 is still below 0.5"}
    loss = StoppingRule("threshold", min_steps=1, threshold=1.0)
    assert list(stop_decisions(loss, mode="min", tables={"x": [(1, 1.5)], "y": [(1, 0.5)]},
                               candidates=["x", "y"])) == ["x"]  # fmt: skip


def test_best_member_by_mode_skips_members_without_a_value():
    bests = {0: 0.4, 1: None, 2: 0.9, 3: 0.9}
    assert best_member(bests, "max") == 2  # ties: the first
    assert best_member(bests, "min") == 0
    assert best_member({0: None}, "max") is None
