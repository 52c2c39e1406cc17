"""Control-flow bodies (scan, while, cond, nested scans) are optimized recursively, swapped in only
when they validate with an unchanged interface, and the whole program still validates end to end."""
from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from wire_examples import VALIDATED

from bench.models.zoo import WEIGHT_ARGNUMS, ZOO
from service.optimizer.control_flow import optimize_nested
from service.optimizer.pipeline import optimize
from wire.capture import capture
from wire.execute import program_to_callable

pytestmark = pytest.mark.slow  # whole programs through the pipeline

RNG = np.random.default_rng(0)


def _normal(*shape: int) -> np.ndarray:
    return RNG.normal(size=shape).astype(np.float32)


def _run(program: dict, args) -> list[np.ndarray]:
    return [np.asarray(x) for x in program_to_callable(program)(*args)]


def _eqn(program: dict, op: str) -> dict:
    return next(e for e in program["eqns"] if e["op"] == op)


def _ops(program: dict) -> list[str]:
    return [e["op"] for e in program["eqns"]]


def _body_reports(response: dict, param: str) -> list[dict]:
    return [r for r in response["report"]["control_flow"] if r["param"] == param]


def _check_same_results(program: dict, response: dict, args, exact: bool) -> None:
    assert response["validation"]["status"] == "passed", response["report"]["notes"]
    for want, have in zip(_run(program, args), _run(response["program"], args)):
        if exact:
            np.testing.assert_array_equal(have, want)
        else:
            np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6)


def scan_fn(xs, w):
    def cell(h, x):
        h = jnp.tanh((x @ w).T.T + h)
        return h, jnp.exp(jnp.log(jnp.exp(h)))
    return lax.scan(cell, jnp.zeros((4, 8), jnp.float32), xs)


SCAN_ARGS = (_normal(5, 4, 8), _normal(8, 8) / 3)


@pytest.mark.parametrize("fp_mode", ["exact", "real"])
def test_scan_body_is_optimized_and_whole_program_matches(fp_mode):
    program = capture(scan_fn, *SCAN_ARGS, weight_argnums=(1,))
    before = copy.deepcopy(program)
    response = optimize(program, None, {"fp_mode": fp_mode})
    assert program == before
    (report,) = _body_reports(response, "jaxpr")
    # exact mode only cancels transposes, which value numbering sees as nothing: no run is needed
    assert report["accepted"] and report["validation"]["status"] == ("identical" if fp_mode == "exact" else "passed")
    assert report["rewrites"]["transpose-transpose"] >= 1
    body = _eqn(response["program"], "scan")["params"]["jaxpr"]["program"]
    assert "transpose" not in _ops(body)
    assert report["equations"] == {"original": 8, "optimized": len(body["eqns"])}
    if fp_mode == "real":  # exp(log(exp h)) -> exp h is an identity of the reals only
        assert _ops(body).count("exp") == 1 and "log" not in _ops(body)
    else:
        assert "log" in _ops(body)
    _check_same_results(program, response, SCAN_ARGS, exact=fp_mode == "exact")


def test_scan_body_matmul_chain_is_reassociated():
    def fn(xs, w1, w2):
        def cell(h, x):
            h = jnp.tanh((h @ w1) @ w2 * (1 / 128) + x)
            return h, h
        return lax.scan(cell, jnp.zeros((4, 16), jnp.float32), xs)

    args = (_normal(6, 4, 16), _normal(16, 1024), _normal(1024, 16))
    program = capture(fn, *args, weight_argnums=(1, 2))
    response = optimize(program)
    (report,) = response["report"]["control_flow"]
    assert report["accepted"] and report["rewrites"]["matmul-assoc-right"] >= 1
    body = _eqn(response["program"], "scan")["params"]["jaxpr"]["program"]
    shapes = [e["out"][0]["shape"] for e in body["eqns"]]
    assert [4, 1024] not in shapes  # h @ (w1 @ w2): the [16, 16] product no step needs again...
    outer = [e["out"][0]["shape"] for e in response["program"]["eqns"] if e["op"] == "dot_general"]
    assert outer == [[16, 16]]  # ...is computed once, before the loop
    _check_same_results(program, response, args, exact=False)


def test_while_body_is_optimized_bit_exactly():
    def fn(x, w):
        def body(carry):
            i, h = carry
            return i + 1, jnp.tanh((h @ w).T.T)
        return lax.while_loop(lambda c: c[0] < 3, body, (0, x))

    args = (_normal(4, 8), _normal(8, 8) / 3)
    program = capture(fn, *args, weight_argnums=(1,))
    response = optimize(program, None, {"fp_mode": "exact"})
    (report,) = _body_reports(response, "body_jaxpr")
    assert report["accepted"] and report["equations"]["optimized"] < report["equations"]["original"]
    body = _eqn(response["program"], "while")["params"]["body_jaxpr"]["program"]
    assert "transpose" not in _ops(body)
    _check_same_results(program, response, args, exact=True)


@pytest.mark.parametrize("pred", [True, False])
def test_both_cond_branches_are_optimized(pred):
    def fn(p, x, w):
        return lax.cond(p, lambda x, w: (x @ w).T.T * 2.0, lambda x, w: jnp.exp(x.T.T) - w, x, w)

    args = (np.bool_(pred), _normal(8, 8), _normal(8, 8))
    program = capture(fn, *args)
    response = optimize(program, None, {"fp_mode": "exact"})
    reports = {r["param"]: r for r in response["report"]["control_flow"]}
    assert set(reports) == {"branches[0]", "branches[1]"}
    branches = _eqn(response["program"], "cond")["params"]["branches"]
    for k, branch in enumerate(branches):
        assert reports[f"branches[{k}]"]["accepted"]
        assert "transpose" not in _ops(branch["program"])
    _check_same_results(program, response, args, exact=True)


def test_scan_nested_in_scan_is_optimized_at_both_levels():
    def fn(xss):
        def outer(h, xs):
            inner = lambda g, x: (g + x.T.T, g)
            g, _ = lax.scan(inner, h, xs)
            return g.T.T * 0.5, g
        return lax.scan(outer, jnp.zeros((4, 4), jnp.float32), xss)

    args = (_normal(3, 2, 4, 4),)
    program = capture(fn, *args)
    response = optimize(program, None, {"fp_mode": "exact"})
    (outer,) = response["report"]["control_flow"]
    (inner,) = outer["control_flow"]
    assert outer["accepted"] and inner["accepted"] and inner["rewrites"]["transpose-transpose"] >= 1
    outer_body = _eqn(response["program"], "scan")["params"]["jaxpr"]["program"]
    inner_body = _eqn(outer_body, "scan")["params"]["jaxpr"]["program"]
    assert "transpose" not in _ops(outer_body) and "transpose" not in _ops(inner_body)
    _check_same_results(program, response, args, exact=True)


def _failing_body(body: dict) -> dict:
    wrong = copy.deepcopy(body)
    wrong["eqns"] = wrong["eqns"][:1]
    wrong["outputs"] = [wrong["eqns"][0]["out"][0]["name"]] * len(body["outputs"])
    return {"program": wrong, "validation": {"status": "failed"}, "report": {"rewrites": {"bogus": 1}}}


def test_body_that_fails_validation_keeps_its_original():
    program = capture(scan_fn, *SCAN_ARGS)
    before = copy.deepcopy(program)
    result, (report,) = optimize_nested(program, _failing_body)
    assert result == before and program == before
    assert not report["accepted"] and report["reason"] == "validation failed"
    assert report["equations"] == {"original": 8, "optimized": 8}


def test_body_whose_interface_changes_keeps_its_original():
    program = capture(scan_fn, *SCAN_ARGS)

    def drops_an_output(body):
        changed = copy.deepcopy(body)
        changed["outputs"] = changed["outputs"][:1]
        return {"program": changed, "validation": {"status": "passed"}, "report": {"rewrites": {}}}

    def reshapes_an_input(body):
        changed = copy.deepcopy(body)
        changed["inputs"][0]["shape"] = [8, 9]
        return {"program": changed, "validation": {"status": "passed"}, "report": {"rewrites": {}}}

    for fake, reason in [(drops_an_output, "outputs changed"), (reshapes_an_input, "inputs changed")]:
        result, (report,) = optimize_nested(program, fake)
        assert result == program and report["reason"] == reason


def test_open_body_never_gains_consts():
    program = capture(lambda x, y: x.at[jnp.array([0, 2])].add(y), _normal(4, 3), _normal(2, 3))

    def adds_a_const(body):
        changed = copy.deepcopy(body)
        changed["consts"] = [{"name": "k", "shape": [], "dtype": "float32", "data": "AAAAAA=="}]
        return {"program": changed, "validation": {"status": "passed"}, "report": {"rewrites": {}}}

    result, reports = optimize_nested(program, adds_a_const)
    assert result == program
    assert [r["reason"] for r in reports] == ["an open body cannot hold consts"]
    assert reports[0]["param"] == "update_jaxpr"


def test_scan_consts_fed_by_weights_are_weights_in_the_body():
    program = capture(scan_fn, *SCAN_ARGS, weight_argnums=(1,))
    seen = []

    def record(body):
        seen.append([s.get("role") for s in body["inputs"]])
        return {"program": body, "validation": {"status": "passed"}, "report": {"rewrites": {}}}

    before = copy.deepcopy(program)
    result, _ = optimize_nested(program, record)
    assert seen == [["weight", "activation", "activation"]]  # const w, carry h, slice x
    assert program == before and result == before  # the roles do not leak into the result


def test_zoo_lstm_scan_still_validates():
    fn, args = ZOO["lstm_scan"]()
    program = capture(fn, *args, weight_argnums=WEIGHT_ARGNUMS["lstm_scan"])
    response = optimize(program)
    assert response["validation"]["status"] == "passed", response["report"]["notes"]
    (report,) = response["report"]["control_flow"]
    assert report["param"] == "jaxpr" and report["validation"]["status"] in VALIDATED
    expected = [np.asarray(x) for x in jax.tree.leaves(fn(*args))]
    for want, have in zip(expected, _run(response["program"], jax.tree.leaves(args))):
        np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5)


def test_with_validation_turned_off_a_loop_body_is_still_optimized():
    fn, args = ZOO["lstm_scan"]()
    program = capture(fn, *args, weight_argnums=WEIGHT_ARGNUMS["lstm_scan"])
    checked, unchecked = optimize(program), optimize(program, options={"validate": False})
    assert checked["validation"]["status"] in VALIDATED and unchecked["validation"]["status"] == "skipped"
    assert checked["estimate"]["speedup_vs_baseline"] > 1.2  # the body's rewrites pay
    assert unchecked["estimate"]["speedup_vs_baseline"] == pytest.approx(checked["estimate"]["speedup_vs_baseline"])
