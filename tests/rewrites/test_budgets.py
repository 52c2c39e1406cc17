"""Budgets: a pathological program stops at its budget and still returns a validated program."""
from __future__ import annotations

import functools
import operator

import numpy as np
import pytest
from rule_harness import VALIDATED

from service.optimizer.pipeline import optimize
from wire.capture import capture

pytestmark = pytest.mark.slow  # whole programs through the pipeline

TERMS = [np.full((4,), i / 200, np.float32) for i in range(200)]
SUM = capture(lambda *xs: functools.reduce(operator.add, xs), *TERMS)  # 199 chained adds


# The node and iteration budgets get a time limit no loaded machine reaches, so only they can bind.
@pytest.mark.parametrize("options, reasons", [
    ({"node_limit": 500, "time_limit_s": 600}, {"node_limit"}),
    ({"iter_limit": 1, "time_limit_s": 600}, {"iter_limit"}),
    ({"time_limit_s": 0.5}, {"time_limit", "saturated", "iter_limit"}),
])
def test_two_hundred_term_sum_stops_at_its_budget_and_is_validated(options, reasons):
    response = optimize(SUM, options=options)
    egraph = response["report"]["egraph"]
    assert egraph["stop_reason"] in reasons
    assert response["validation"]["status"] in VALIDATED
    assert response["estimate"]["optimized"]["time_s"] <= response["estimate"]["baseline"]["time_s"]


def test_commutativity_is_throttled_not_unbounded():
    response = optimize(SUM, options={"iter_limit": 8})
    assert response["report"]["rewrites"]["add-comm"] > 0
    assert response["report"]["egraph"]["enodes"] < 50_000
