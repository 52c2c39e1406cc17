"""Tests for costmodel.op_cost: GEMMs and convolutions price through the formulas, and control flow
(scan, cond, while) prices its nested bodies."""
from __future__ import annotations

import pytest

from costmodel.formulas import conv_cost, gemm_cost, loop_cost, vector_cost
from costmodel.op_cost import op_cost, program_cost
from costmodel.profile import with_overrides
from tests.costmodel.test_formulas import EXTRAS, TINY

F32 = "float32"


def _body(*ops: str, shape=(4, 8)) -> dict:
    """A wire program applying unary `ops` in a chain to one input."""
    eqns, last = [], "in0"
    for i, op in enumerate(ops):
        eqns.append({"op": op, "in": [last], "out": [{"name": f"v{i}", "shape": list(shape), "dtype": F32}],
                     "params": {}})
        last = f"v{i}"
    return {"format": "optu.jaxpr/v1", "inputs": [{"name": "in0", "shape": list(shape), "dtype": F32}],
            "consts": [], "eqns": eqns, "outputs": [last]}


AVAL = ((4, 8), F32)


def _unary(p, op: str) -> float:
    return vector_cost(p, {op: 32}, 2 * 128)[0]  # reads and writes 4 x 8 fp32: 256 bytes


def test_a_program_costs_the_sum_of_its_ops():
    assert program_cost(TINY, _body("exp", "neg")).time_s == pytest.approx(_unary(TINY, "exp") + _unary(TINY, "neg"))
    assert program_cost(TINY, _body()).time_s == 0.0


def test_scan_costs_its_body_times_its_length_plus_the_iteration_overhead():
    params = {"length": 5, "jaxpr": {"program": _body("exp")}, "reverse": False}
    cost = op_cost(EXTRAS, "scan", params, [AVAL], AVAL)
    assert cost.time_s == pytest.approx(loop_cost(EXTRAS, _unary(EXTRAS, "exp"), 5))
    assert cost.time_s == pytest.approx(5 * (_unary(EXTRAS, "exp") + 1e-7))


def test_cond_costs_its_dearest_branch():
    params = {"branches": [{"program": _body("neg")}, {"program": _body("exp", "exp")}]}
    cost = op_cost(TINY, "cond", params, [((), "int32"), AVAL], AVAL)
    assert cost.time_s == pytest.approx(2 * _unary(TINY, "exp"))


def test_while_costs_one_trip_of_its_condition_and_body():
    params = {"cond_jaxpr": {"program": _body("neg")}, "body_jaxpr": {"program": _body("exp")}}
    cost = op_cost(EXTRAS, "while", params, [AVAL], AVAL)
    assert cost.time_s == pytest.approx(_unary(EXTRAS, "neg") + _unary(EXTRAS, "exp") + 1e-7)


def test_a_loop_whose_body_cannot_be_read_is_priced_by_its_traffic():
    cost = op_cost(TINY, "scan", {"length": 3}, [AVAL], AVAL)
    assert cost.kind == "host" and cost.time_s == pytest.approx(256 / 1e11)


def test_a_dot_pays_the_gemm_call_overhead():
    params = {"dimension_numbers": [[[1], [0]], [[], []]]}
    cost = op_cost(EXTRAS, "dot_general", params, [((100, 8), F32), ((8, 4), F32)], ((100, 4), F32))
    assert cost.time_s == pytest.approx(gemm_cost(TINY, 100, 8, 4).time_s + 5e-8)


def test_a_convolution_prices_through_conv_cost():
    # NHWC 1 x 10 x 10 x 2 input, HWIO 2 x 2 x 2 x 4 filter, VALID: 81 positions, k = 8, n = 4.
    params = {"dimension_numbers": {"fields": {"lhs_spec": [0, 3, 1, 2], "rhs_spec": [3, 2, 0, 1],
                                               "out_spec": [0, 3, 1, 2]}},
              "feature_group_count": 1}
    ins, out = [((1, 10, 10, 2), F32), ((2, 2, 2, 4), F32)], ((1, 9, 9, 4), F32)
    cost = op_cost(EXTRAS, "conv_general_dilated", params, ins, out)
    assert cost.time_s == pytest.approx(conv_cost(EXTRAS, 81, 8, 4).time_s)
    assert cost.time_s == pytest.approx(81 / 1e6 + 1e-6)  # gather-bound, plus the conv setup
    no_gather = with_overrides(EXTRAS, {"gemm.conv_positions_per_s": None, "gemm.conv_overhead_s": 0})
    assert op_cost(no_gather, "conv_general_dilated", params, ins, out).time_s < cost.time_s
