"""Splicing realized kernels into a program: the equations they replace go, equations nothing
reads any more go, and every kernel's indices and ops follow."""
from __future__ import annotations

from lowering.kernels import Kernel
from lowering.splice import splice


def _eqn(op: str, ins: list[str], out: str) -> dict:
    return {"op": op, "in": ins, "out": [{"name": out, "shape": [2], "dtype": "float32"}], "params": {}}


PROGRAM = {"format": "optu.jaxpr/v1", "inputs": [{"name": "a", "shape": [2], "dtype": "float32"}],
           "eqns": [_eqn("exp", ["a"], "b"), _eqn("neg", ["b"], "c"), _eqn("sin", ["c"], "d"),
                    _eqn("cos", ["d"], "e")],
           "outputs": ["e"]}


def _kernels() -> list[Kernel]:
    return [Kernel(0, "fused", [0, 1], ["exp", "neg"]), Kernel(1, "fused", [2, 3], ["sin", "cos"])]


def test_a_kernel_replaced_by_one_equation_holds_it_and_the_next_is_renumbered():
    kernels = _kernels()
    fused = _eqn("tiled", ["a"], "c")
    program, renumbered = splice(PROGRAM, kernels, {1: [fused]}, {1: kernels[0]}, dropped={0})
    assert [e["op"] for e in program["eqns"]] == ["tiled", "sin", "cos"]
    assert [(k.eqns, k.ops) for k in renumbered] == [([0], ["tiled"]), ([1, 2], ["sin", "cos"])]
    assert [(k.eqns, k.ops) for k in kernels] == [([0, 1], ["exp", "neg"]), ([2, 3], ["sin", "cos"])]  # untouched


def test_equations_nothing_reads_any_more_are_left_out():
    kernels = _kernels()
    # the replacement computes d from a directly: exp and neg are read by nothing any more
    program, renumbered = splice(PROGRAM, kernels, {2: [_eqn("log", ["a"], "x"), _eqn("sin", ["x"], "d")]},
                                 {2: kernels[1]})
    assert [e["op"] for e in program["eqns"]] == ["log", "sin", "cos"]
    assert [(k.eqns, k.ops) for k in renumbered] == [([], []), ([0, 1, 2], ["log", "sin", "cos"])]
