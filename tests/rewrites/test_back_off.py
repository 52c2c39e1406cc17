"""Rules back_off held back rest for a while, longer each time, and wake together."""
from __future__ import annotations

from rewrites.back_off import REST, RestingRules


def test_a_rule_held_back_rests_then_runs_again():
    resting = RestingRules()
    assert resting.awake("add-assoc", 0)
    resting.held_back("add-assoc", 2)
    assert not any(resting.awake("add-assoc", i) for i in range(3, 3 + REST))
    assert resting.awake("add-assoc", 3 + REST)
    assert resting.awake("add-comm", 3)  # another rule is not held back with it


def test_each_further_hold_back_doubles_the_rest():
    resting = RestingRules()
    resting.held_back("r", 0)
    resting.held_back("r", REST + 1)
    wakes = REST + 2 + 2 * REST
    assert not resting.awake("r", wakes - 1) and resting.awake("r", wakes)


def test_waking_all_lets_every_resting_rule_run_from_then_on():
    resting = RestingRules()
    resting.held_back("a", 0)
    resting.held_back("b", 1)
    resting.wake_all(2)
    assert resting.awake("a", 2) and resting.awake("b", 2)
    resting.held_back("a", 2)  # the rest still doubles after a wake-up
    assert not resting.awake("a", 2 + 2 * REST) and resting.awake("a", 3 + 2 * REST)
