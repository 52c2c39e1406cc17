"""The saturation driver: named schedules, stop reasons under each budget, and rule reports that
name family rules."""
from __future__ import annotations

import jax.numpy as jnp
import pytest
from rule_harness import ill_typed_nodes, random_args, saturate_program

from rewrites.ingest import ingest
from rewrites.schedule import ALL_FAMILIES, NO_RULES, SCHEDULES, Budget, saturate, term_enodes
from service.optimizer.pipeline import optimize
from wire.capture import capture

FAMILY_RULES = {n for f in ALL_FAMILIES for n in f.names}
REAL_RULES = {r.name for f in ALL_FAMILIES for r in f.rules if r.mode == "real"}
X = random_args(0, [(3, 4)])
CHAIN = random_args(1, [(3, 5), (5, 4), (4, 6), (6, 2), (2, 7)])


def run(fn, args, schedule=SCHEDULES["real"], **budget):
    loaded = ingest(capture(fn, *args))
    return loaded, saturate(loaded.egraph, schedule, Budget(**budget))


def everything(x, w1, w2, w3, w4):
    """Something for every family: units and inverses, a chain, a double transpose, a shared x."""
    y = jnp.exp(jnp.log(jnp.exp(x @ w1))) * 1.0 + 0.0
    return ((y @ w3) @ w4).T.T, x @ w2


EVERYTHING_ARGS = random_args(2, [(3, 5), (5, 4), (5, 6), (4, 6), (6, 2)])


def test_small_program_saturates():
    _, report = run(lambda x: x.T.T * 1.0, X)
    assert report.stop_reason == "saturated"
    assert report.iterations < 12
    assert {"transpose-transpose", "mul-one"} <= set(report.rules_fired)


def test_iter_limit_stops_a_program_that_needs_more_iterations():
    goal = lambda x: jnp.exp(jnp.log(jnp.exp(x)))
    _, full = run(goal, X)
    assert full.stop_reason == "saturated" and full.iterations >= 2
    _, one = run(goal, X, iter_limit=1)
    assert (one.stop_reason, one.iterations) == ("iter_limit", 1)
    _, zero = run(goal, X, iter_limit=0)
    assert (zero.stop_reason, zero.iterations, zero.rules_fired) == ("iter_limit", 0, {})


def test_after_step_sees_every_iteration_and_its_exception_stops_the_run():
    goal = lambda x: jnp.exp(jnp.log(jnp.exp(x)))
    seen = []
    loaded = ingest(capture(goal, *X))
    full = saturate(loaded.egraph, SCHEDULES["real"], Budget(), lambda r: seen.append((r.iterations, r.enodes)))
    assert [i for i, _ in seen[:full.iterations]] == list(range(1, full.iterations + 1))

    class Stop(Exception):
        pass

    def stop(report):
        raise Stop

    with pytest.raises(Stop):
        saturate(ingest(capture(goal, *X)).egraph, SCHEDULES["real"], Budget(), stop)


def test_node_limit_stops_a_growing_egraph():
    chain = lambda a, b, c, d, e: (((a @ b) @ c) @ d) @ e
    loaded, report = run(chain, CHAIN, node_limit=12)
    assert report.stop_reason == "node_limit"
    assert report.enodes > 12 and report.enodes == term_enodes(loaded.egraph)
    _, free = run(chain, CHAIN)
    assert free.enodes > report.enodes


def horner(x, a):
    """Products over sums nested six deep: distributivity both ways and commutativity multiply
    one another's matches (5k e-nodes became 64k in one pass when distributivity ran unthrottled)."""
    y = a
    for k in range(6):
        y = x * (y + a * k)
    return y


def interleaved(x, a):
    y = x
    for _ in range(5):
        y = (x + a) * (y + x) + a * y
    return y


@pytest.mark.parametrize("program", [horner, interleaved])
def test_distributivity_does_not_multiply_the_forms_of_nested_sums_of_products(program):
    loaded, report = run(program, random_args(3, [(4, 4), (4, 4)]), time_limit_s=600)
    assert report.stop_reason != "node_limit" and report.enodes <= Budget().node_limit
    assert {"factor-mul-add", "expand-mul-add"} <= set(report.rules_fired)


def test_time_limit_is_checked_before_each_iteration():
    _, report = run(lambda x: x.T.T, X, time_limit_s=0.0)
    assert (report.stop_reason, report.iterations) == ("time_limit", 0)


def test_rules_fired_are_family_rule_names_with_positive_counts():
    _, report = run(everything, EVERYTHING_ARGS)
    assert report.rules_fired and set(report.rules_fired) <= FAMILY_RULES
    assert "unnamed" not in report.rules_fired
    assert all(isinstance(v, int) and v > 0 for v in report.rules_fired.values())
    assert {"log-exp", "mul-one", "add-zero", "matmul-assoc-right", "transpose-transpose",
            "same-input-matmul-merge"} <= set(report.rules_fired)


def test_full_schedule_keeps_every_enode_well_typed():
    program = capture(everything, *EVERYTHING_ARGS)
    result = saturate_program(program, ALL_FAMILIES, "real", budget=Budget())
    assert result.report.stop_reason == "saturated"
    assert not ill_typed_nodes(result)


def test_exact_schedule_never_fires_a_real_rule():
    _, report = run(everything, EVERYTHING_ARGS, SCHEDULES["exact"])
    assert report.rules_fired and not set(report.rules_fired) & REAL_RULES


def test_no_rules_schedule_changes_nothing():
    loaded = ingest(capture(lambda x: x.T.T * 1.0 + 0.0, *X))
    before = term_enodes(loaded.egraph)
    report = saturate(loaded.egraph, NO_RULES, Budget())
    assert (report.stop_reason, report.iterations, report.rules_fired) == ("saturated", 1, {})
    assert report.enodes == before


def test_pipeline_reports_the_stop_reason_of_its_budget():
    goal = lambda x: jnp.exp(jnp.log(jnp.exp(x)))
    limited = optimize(capture(goal, *X), options={"iter_limit": 1})
    assert limited["report"]["egraph"]["stop_reason"] == "iter_limit"
    full = optimize(capture(goal, *X))
    assert full["report"]["egraph"]["stop_reason"] == "saturated"


def test_budgets_are_checked_against_where_the_next_iteration_lands():
    from rewrites.schedule import _next_iteration

    seconds, nodes = _next_iteration([0.3, 1.4, 9.1], [315, 2330, 7700, 25240])
    assert seconds == pytest.approx(9.1 * 9.1 / 1.4) and nodes == pytest.approx(25240 * 25240 / 7700)
    assert _next_iteration([0.5], [10, 20]) == (0.5, 20.0)  # one iteration: no growth rate yet
    assert _next_iteration([2.0, 1.0], [10, 20, 20]) == (1.0, 20.0)  # shrinking is not extrapolated
    # a 21x slower iteration over an e-graph grown 9% (an encoder's, once a rule family first matched)
    seconds, _ = _next_iteration([0.039, 0.836], [507, 847, 923])
    assert seconds == pytest.approx(0.836 * (923 / 847) ** 2)


def test_a_rule_back_off_holds_back_does_not_keep_an_unchanged_e_graph_running():
    # A sum of eight terms: add-assoc matches more than a limit of 1, so back_off holds it back
    # every iteration and reports a change although the e-graph stays as it is; the run must
    # stop as saturated once an iteration leaves every table as it found it.
    xs = random_args(3, [(4, 4)] * 8)
    _, report = run(lambda *v: sum(v[1:], v[0]), xs, ac_match_limit=1, iter_limit=40, time_limit_s=60.0)
    assert report.stop_reason == "saturated"
    assert report.iterations < 40
