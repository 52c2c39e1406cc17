"""Delta debugging over rule names finds a 1-minimal failing subset, tries each subset once, and says
when there is nothing to minimize."""
from __future__ import annotations

import pytest

from validation.rule_bisect import NotFailing, minimal_failing

RULES = [f"rule-{k:02d}" for k in range(16)]


def _counting(culprits: set[str]):
    calls: list[frozenset[str]] = []

    def fails(subset: frozenset[str]) -> bool:
        calls.append(subset)
        return culprits <= subset

    return fails, calls


@pytest.mark.parametrize("culprits", [{"rule-07"}, {"rule-02", "rule-13"}, {"rule-00", "rule-05", "rule-15"}])
def test_the_rules_that_together_make_validation_fail_are_found_and_nothing_else(culprits):
    fails, calls = _counting(culprits)
    found, tried, minimal = minimal_failing(RULES, fails)
    assert set(found) == culprits and minimal
    assert tried == len(calls) == len(set(calls))  # no subset optimized twice


def test_one_culprit_among_sixteen_takes_far_fewer_runs_than_trying_each_rule():
    fails, calls = _counting({"rule-11"})
    minimal_failing(RULES, fails)
    assert len(calls) < len(RULES)


def test_a_failure_that_needs_no_rule_blames_none():
    assert minimal_failing(RULES, lambda subset: True).rules == []


def test_a_rule_set_that_does_not_fail_is_refused():
    with pytest.raises(NotFailing, match="does not fail with all 16 rules"):
        minimal_failing(RULES, lambda subset: False)


def test_out_of_time_the_smallest_failing_set_so_far_is_the_answer_marked_not_minimal():
    fails, calls = _counting({"rule-07"})
    found, tried, minimal = minimal_failing(RULES, fails, out_of_time=lambda: len(calls) >= 4)
    assert not minimal and tried == len(calls) == 4
    assert fails(frozenset(found)) and len(found) < len(RULES)  # it fails, and the first halvings narrowed it


def test_the_whole_set_is_tried_even_when_time_is_already_out():
    fails, calls = _counting({"rule-07"})
    found, tried, minimal = minimal_failing(RULES, fails, out_of_time=lambda: True)
    assert (found, tried, minimal) == (RULES, 1, False)
