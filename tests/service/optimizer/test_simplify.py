"""The baseline's program is simplified as XLA simplifies: common subexpressions, units, double
transposes and transposes read by a dot_general are gone, the program computes the same, and it
holds as many GEMMs as XLA's own compile of the original (read from the optimized HLO)."""
from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from bench.models.zoo import ZOO
from service.optimizer.simplify import simplify
from wire.capture import capture
from wire.execute import program_to_callable
from wire.primitives import GEMMS, nested_programs


def _redundant(a, b, w):
    x = (a @ b) * 1.0 + 0.0
    z = (a @ b) / 1.0 - 0.0
    return -(-(x + (a @ b) + z)) @ w.T.T, jnp.swapaxes(a, 0, 1).T @ b, a.T.T @ b.T.T


def _looped(xs, h, w):
    return lax.scan(lambda h, x: ((x * 1.0) @ w.T.T + h @ w + h @ w, None), h, xs)[0]


CASES = {
    "redundant": (_redundant, [(4, 5), (5, 6), (6, 3)]),
    "looped": (_looped, [(3, 4, 8), (4, 8), (8, 8)]),
    "transposed_operands": (lambda a, b: (a.T @ b.T, jnp.einsum("ji,kj->ik", a, b)), [(6, 5), (7, 6)]),
}


def _args(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s).astype(np.float32) for s in shapes]


def _gemms(program: dict) -> int:
    """GEMMs of the program, loop bodies and branches included (each once)."""
    return sum((e["op"] in GEMMS) + sum(_gemms(b) for b in nested_programs(e)) for e in program["eqns"])


def _xla_gemms(fn, args) -> int:
    text = jax.jit(fn).lower(*args).compile().as_text()
    return len(re.findall(r" (?:dot|convolution)\(", text))


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_simplified_program_computes_the_same_with_fewer_equations(name):
    fn, shapes = CASES[name]
    args = _args(shapes)
    program = capture(fn, *args)
    simplified = simplify(program)
    assert len(simplified["inputs"]) == len(program["inputs"])
    assert len(simplified["outputs"]) == len(program["outputs"])
    assert _gemms(simplified) < _gemms(program) or len(simplified["eqns"]) < len(program["eqns"])
    for want, got in zip(program_to_callable(program)(*args), program_to_callable(simplified)(*args)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_units_and_transposes_are_gone(name):
    fn, shapes = CASES[name]
    simplified = simplify(capture(fn, *_args(shapes)))
    ops = [e["op"] for e in simplified["eqns"]] + [e["op"] for e in simplified["eqns"]
                                                   for b in nested_programs(e) for e in b["eqns"]]
    assert "transpose" not in ops and "neg" not in ops and "div" not in ops and "sub" not in ops


@pytest.mark.parametrize("name", [*sorted(CASES), *sorted(ZOO)])
def test_the_simplified_program_holds_as_many_gemms_as_xlas_compile_of_the_original(name):
    fn, args = (CASES[name][0], _args(CASES[name][1])) if name in CASES else ZOO[name]()
    assert _gemms(simplify(capture(fn, *args))) == _xla_gemms(fn, args)


def test_an_equation_the_table_does_not_know_is_neither_shared_nor_dropped():
    """An unknown primitive may draw random numbers or act on the host: two alike are two values,
    and one whose value nothing reads still runs."""
    out = lambda name: [{"name": name, "shape": [3], "dtype": "float32"}]
    call = lambda name: {"op": "host_callback_of_some_library", "in": ["x"], "out": out(name), "params": {}}
    program = {"format": "optu.jaxpr/v1", "inputs": [{"name": "x", "shape": [3], "dtype": "float32"}],
               "eqns": [call("a"), call("b"), call("unread"),
                        {"op": "add", "in": ["a", "b"], "out": out("c"), "params": {}}], "outputs": ["c"]}
    assert simplify(program)["eqns"] == program["eqns"]


def test_adding_zero_is_kept_where_only_bit_exact_simplifications_may_run():
    """-0 + 0 is +0: dropping it changes the sign of a zero, which `exact` mode does not allow."""
    program = capture(lambda x: (x + 0.0) * 1.0, np.array([-0.0, 1.0], np.float32))
    assert [e["op"] for e in simplify(program, exact=True)["eqns"]] == ["add"]
    assert simplify(program)["eqns"] == []
