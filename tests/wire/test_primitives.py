"""The primitive table: the sets every layer reads come from its entries, control-flow entries
name where their bodies are, and a primitive it does not know stays opaque."""
from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from costmodel.node_equation import node_equation
from costmodel.op_cost import FREE_OPS, GEMM_OPS, op_cost
from costmodel.profile import load_profile
from rewrites.ingest import ENCODERS
from rewrites.merge import MERGE
from rewrites.registry import pattern_ops
from rewrites.terms import BINARY_OPS, REDUCE_OPS, UNARY_OPS
from validation.compare import bit_identical
from wire.capture import capture
from wire.execute import primitive_table, typecheck
from wire.primitives import GEMMS, GENERIC_TERMS, PRIMITIVES, PURE, const_operands, names, nested_programs


def test_each_layers_sets_are_the_tables():
    assert GEMMS == GEMM_OPS == {"dot_general", "conv_general_dilated"}
    assert names(role="view") == FREE_OPS
    assert UNARY_OPS | BINARY_OPS | REDUCE_OPS == names(term="unary") | names(term="binary") | names(term="reduce")
    assert {"tanh", "add", "reduce_sum"} <= UNARY_OPS | BINARY_OPS | REDUCE_OPS


def test_every_primitive_held_as_a_term_is_ingested_as_one_and_lowered_back():
    assert {p.name for p in PRIMITIVES.values() if p.term} <= set(ENCODERS)
    constructors = {p.term for p in PRIMITIVES.values() if p.term} - set(GENERIC_TERMS)
    lowering = inspect.getsource(node_equation)
    assert constructors and all(f'case "{c}"' in lowering for c in constructors)
    # rules name their patterns' primitives through the table's constructors
    assert {"dot_general", "concatenate", "slice"} <= pattern_ops(MERGE.rules)["same-input-matmul-merge"]


def test_primitives_ieee_fixes_compute_the_correctly_rounded_result():
    # float32 results equal the float64 ones rounded to float32 (a double has more than 2p+2 bits,
    # so that is the correctly rounded result): a transcendental marked exact would fail here
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(4096).astype(np.float32) * 10 for _ in range(2))
    checked, jax_primitives = [], primitive_table()
    for p in PRIMITIVES.values():
        if not p.fp_exact or p.term not in ("unary", "binary") or p.dtype_rule != "operands" or p.name == "nextafter":
            continue  # nextafter steps one ulp of its own type: exact, but not a rounded real function
        primitive, args = jax_primitives.get(p.name), (x,) if p.term == "unary" else (x, y)
        if primitive is None:  # stop_gradient: no primitive of its own (the identity when run)
            continue
        try:
            narrow = np.asarray(primitive.bind(*map(jnp.asarray, args)))
        except TypeError:  # bitwise ops take no floats
            continue
        with jax.enable_x64(True):
            wide = np.asarray(primitive.bind(*(jnp.asarray(a.astype(np.float64)) for a in args)))
        assert bit_identical(narrow, wide.astype(np.float32)), p.name
        checked.append(p.name)
    assert {"add", "sub", "mul", "div", "sqrt", "max", "rem", "neg"} <= set(checked)


def test_control_flow_is_never_moved_and_names_its_bodies():
    for name in names(role="control"):
        assert name not in PURE and PRIMITIVES[name].bodies
    assert {"add", "dot_general", "reshape"} <= PURE


def test_the_pure_ones_are_real_primitives_and_none_is_random_effectful_or_with_a_body():
    assert PURE <= set(primitive_table())
    never = {"rng_bit_generator", "rng_uniform", "random_bits", "random_seed", "random_split",
             "random_fold_in", "threefry2x32", "optimization_barrier", "scan", "while", "cond",
             "reduce", "sort", "scatter", "custom_jvp_call", "custom_vjp_call", "closed_call", "jit"}
    assert not PURE & never


def test_nested_programs_are_each_loops_bodies_in_param_order():
    x = np.ones((4, 3), np.float32)

    def fn(x):
        def step(c, row):
            return c + row, jnp.tanh(c)
        carry, _ = lax.scan(step, x[0], x)
        small = lax.while_loop(lambda c: c.sum() < 10.0, lambda c: c * 2.0, carry)
        return lax.cond(small.sum() > 0, lambda v: v + 1.0, lambda v: v - 1.0, small)

    program = capture(fn, x)
    bodies = {e["op"]: list(nested_programs(e)) for e in program["eqns"] if e["op"] in ("scan", "while", "cond")}
    assert [len(b) for b in bodies.values()] == [1, 2, 2]
    cond_body, loop_body = bodies["while"]
    assert [e["op"] for e in cond_body["eqns"]][-1] == "lt" and [e["op"] for e in loop_body["eqns"]] == ["mul"]
    assert [[e["op"] for e in b["eqns"]] for b in bodies["cond"]] == [["sub"], ["add"]]  # branch 0 is false
    loops = {e["op"]: e for e in program["eqns"] if e["op"] in ("scan", "while", "cond")}
    # operands: a while's condition consts, then its body's, then its carries; a cond passes them through
    params = loops["while"]["params"]
    assert const_operands(loops["while"]) == {"cond_jaxpr": (0, params["cond_nconsts"]),
                                              "body_jaxpr": (params["cond_nconsts"], params["body_nconsts"])}
    assert const_operands(loops["scan"]) == {"jaxpr": (0, loops["scan"]["params"]["num_consts"])}
    assert const_operands(loops["cond"]) == {}


def test_a_primitive_outside_the_table_is_opaque():
    unknown = {"op": "my_custom_call", "in": ["a"], "params": {"body": {"program": {"eqns": []}}}}
    assert list(nested_programs(unknown)) == []
    cost = op_cost(load_profile("optu-v1"), "my_custom_call", {}, [((8,), "float32")], ((8,), "float32"))
    assert cost.kind == "host"


def test_each_elementwise_dtype_rule_is_jaxs():
    # the e-graph's type analysis (rewrites/shapes.py) gives a new term the dtype its table entry names
    logical = {"not", "and", "or", "xor"}
    checked = 0
    for name in sorted((names(term="unary") | names(term="binary")) & set(primitive_table())):
        entry = PRIMITIVES[name]
        operand = "int32" if name in logical else "complex64" if entry.dtype_rule == "real" else "float32"
        result = {"operands": operand, "bool": "bool", "real": "float32"}[entry.dtype_rule]
        args = [f"a{k}" for k in range(1 if entry.term == "unary" else 2)]
        typecheck({"format": "optu.jaxpr/v1", "inputs": [{"name": a, "shape": [3], "dtype": operand} for a in args],
                   "consts": [], "eqns": [{"op": name, "in": args, "params": {},
                                           "out": [{"name": "out", "shape": [3], "dtype": result}]}],
                   "outputs": ["out"]})
        checked += 1
    assert checked >= 40
