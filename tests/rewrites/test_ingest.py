"""Ingest with no rules is the identity: wire -> e-graph -> extracted term -> wire gives the same
equations (up to names and order) and bit-identical results; shared values stay shared; every
class carries its wire shape and dtype, and a union of differently shaped classes panics."""
from __future__ import annotations

import json
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from egglog import EGraph, union
from egglog.bindings import EggSmolError
from jax import lax

from costmodel.extract import extract_greedy_dag
from costmodel.kernel_cost import NodeCoster
from costmodel.profile import load_profile
from lowering.emit import emit_program
from lowering.kernels import NAIVE, build_kernel_program
from rewrites.egraph_view import view_egraph
from rewrites.ingest import ingest
from rewrites.schedule import NO_RULES, Budget, saturate
from rewrites.terms import Term
from rule_harness import Saturated, bits_equal, ill_typed_nodes, nodes, typed
from wire.capture import capture
from wire.execute import program_to_callable, typecheck
from wire.params import strip_none_defaults

rng = np.random.default_rng(0)
F = lambda *s: rng.standard_normal(s).astype(np.float32)
Ints = lambda *s: rng.integers(-5, 5, s).astype(np.int32)
DN = (((1,), (0,)), ((), ()))
TABLE = np.linspace(-1.0, 1.0, 6, dtype=np.float32)  # closed over: becomes a program const


def _scan(x):
    return lax.scan(lambda c, r: (c * 0.5 + r, jnp.tanh(c)), x[0], x)


# name -> (function, args): together every first-class op and some opaque ones.
PROGRAMS = {
    "dot_general": (lambda x, w, b: (lax.dot_general(x, w, DN, precision=lax.Precision.HIGHEST,
                                                     preferred_element_type=jnp.float32),
                                     lax.dot_general(b, b, (((2,), (1,)), ((0,), (0,))))),
                    [F(3, 4), F(4, 5), F(2, 3, 3)]),
    "unary": (lambda x: (jnp.tanh(jnp.exp(-x)), lax.logistic(jnp.sin(x)), jnp.floor(x),
                         (lambda a: (jnp.sqrt(a), lax.rsqrt(a + 1.0), jnp.log1p(a)))(jnp.abs(x))),
              [F(3, 4)]),
    "binary": (lambda x, y: (jnp.maximum(x, y) - x * y / (y + 2.0), jnp.minimum(x, 0.5),
                             lax.pow(jnp.abs(x), y), lax.atan2(x, y), lax.rem(x, y)),
               [F(3, 4), F(3, 4)]),
    "compare_select": (lambda x, y, i: (lax.select_n(x < y, x, y),
                                        lax.select_n(jnp.clip(i, 0, 2), y, x, y * 2.0),  # opaque
                                        (x == y) | (x >= 0.0) & ~(y != 1.0), i & 3 ^ i,
                                        jnp.where(x <= y, 1.0, jnp.nan)),
                       [F(3, 4), F(3, 4), Ints(3, 4)]),
    "layout": (lambda x, v: (x.T.reshape(12), jnp.broadcast_to(v, (3, 4)), lax.squeeze(x[:1], (0,)),
                             lax.slice(x, (1, 0), (3, 4), (1, 2)), jnp.concatenate([x, x * 2.0], 0),
                             lax.expand_dims(v, (0,)), x[:, 1:3]),
               [F(3, 4), F(4)]),
    "reductions": (lambda x: (x.sum(1), x.max(0), x.min(), jnp.sum(x, (0, 1))), [F(3, 4)]),
    "convert_pow": (lambda x: (x.astype(jnp.bfloat16), x.astype(jnp.int32), lax.integer_pow(x, 3),
                               lax.integer_pow(x, -2), (x > 0).astype(jnp.float32)), [F(3, 4)]),
    "conv": (lambda a, k: lax.conv_general_dilated(a, k, (2, 1), ((1, 1), (0, 2)), rhs_dilation=(1, 2)),
             [F(2, 3, 8, 8), F(4, 3, 3, 3)]),
    "literals_consts": (lambda x, i: (x + jnp.asarray(TABLE[:4]), jnp.full((2,), jnp.inf), i * 7 + 3,
                                      x * TABLE[2], jnp.float32(np.nan)), [F(3, 4), Ints(3)]),
    "opaque": (lambda x, y, i: (jnp.cumsum(x, 1), *lax.sort((x, y), num_keys=1), *_scan(x),
                                x[i], jnp.exp(lax.cumsum(x, 0))),
               [F(3, 4), F(3, 4), np.array([2, 0, 2], np.int32)]),
}


def roundtrip(program: dict) -> tuple[dict, Saturated]:
    """Wire -> e-graph (no rules) -> greedy extraction (any cost: one node per class) -> wire."""
    loaded = ingest(program)
    report = saturate(loaded.egraph, NO_RULES, Budget())
    view = view_egraph(loaded.egraph)
    extraction = extract_greedy_dag(view, lambda node: 1.0)
    emitted = emit_program(view, extraction.choice, loaded.params, program).program
    return emitted, Saturated(loaded, view, report, program)


def signature(program: dict) -> Counter:
    """The equations as a multiset of (op, params, input/output types), names left out. Params are
    compared in canonical form: None-valued params the decoder fills in may be omitted."""
    types = {s["name"]: (tuple(s["shape"]), s["dtype"]) for s in [*program["inputs"], *program["consts"]]}
    for e in program["eqns"]:
        types.update((o["name"], (tuple(o["shape"]), o["dtype"])) for o in e["out"])
    def arg(a):
        return types[a] if isinstance(a, str) else json.dumps(a, sort_keys=True)
    return Counter(json.dumps([e["op"], strip_none_defaults(e["op"], e["params"]), [arg(a) for a in e["in"]],
                               [arg(o["name"]) for o in e["out"]]], sort_keys=True) for e in program["eqns"])


def assert_same_program(original: dict, emitted: dict, args) -> None:
    typecheck(emitted)
    assert len(emitted["eqns"]) == len(original["eqns"])
    assert Counter(e["op"] for e in emitted["eqns"]) == Counter(e["op"] for e in original["eqns"])
    assert signature(emitted) == signature(original)
    assert len(emitted["consts"]) == len(original["consts"])
    expected, got = program_to_callable(original)(*args), program_to_callable(emitted)(*args)
    assert len(expected) == len(got)
    for k, (e, g) in enumerate(zip(expected, got)):
        assert bits_equal(e, g), f"output {k}"


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_roundtrip_without_rules_is_the_same_program(name):
    fn, args = PROGRAMS[name]
    program = capture(fn, *args)
    emitted, _ = roundtrip(program)
    assert_same_program(program, emitted, args)


def test_programs_cover_every_first_class_op():
    ops = set()
    for fn, args in PROGRAMS.values():
        ops |= {e["op"] for e in capture(fn, *args)["eqns"]}
    first_class = {"dot_general", "select_n", "transpose", "reshape", "broadcast_in_dim", "reduce_sum",
                   "reduce_max", "reduce_min", "convert_element_type", "concatenate", "slice", "squeeze",
                   "integer_pow", "conv_general_dilated", "exp", "tanh", "add", "mul", "lt", "eq", "and"}
    opaque = {"cumsum", "sort", "scan", "gather"}
    assert first_class | opaque <= ops, (first_class | opaque) - ops


def test_every_class_carries_its_wire_shape_and_dtype():
    for fn, args in PROGRAMS.values():
        program = capture(fn, *args)
        _, result = roundtrip(program)
        assert not ill_typed_nodes(result)
        outputs = [o for o in program["outputs"] if isinstance(o, str)]
        specs = {s["name"]: s for s in program["inputs"]}
        specs.update({o["name"]: o for e in program["eqns"] for o in e["out"]})
        for name, cid in zip(program["outputs"], result.view.roots):
            if isinstance(name, str):
                cls = result.view.classes[cid]
                assert (list(cls.shape), cls.dtype) == (specs[name]["shape"], specs[name]["dtype"])
        assert outputs


def test_x64_program_with_a_huge_integer_literal_roundtrips():
    with jax.enable_x64(True):
        args = [np.arange(4, dtype=np.int64), np.linspace(0, 1, 4)]
        program = capture(lambda i, x: (i + 2**60 + 1, x * 1e300), *args)
        emitted, _ = roundtrip(program)
        assert_same_program(program, emitted, args)


# --- Sharing -------------------------------------------------------------------------------------

def test_a_value_used_twice_is_one_class_and_one_equation():
    x = F(3, 4)
    program = capture(lambda x: (lambda e: e * e + e)(jnp.exp(x)), x)
    emitted, result = roundtrip(program)
    assert len([n for n in nodes(result.view, "unary") if n.attrs[0] == "exp"]) == 1
    assert [e["op"] for e in emitted["eqns"]].count("exp") == 1
    assert_same_program(program, emitted, [x])


def test_identical_equations_are_hash_consed_into_one():
    x = F(3, 4)
    program = capture(lambda x: (jnp.exp(x) + jnp.exp(x), jnp.exp(x)), x)
    assert [e["op"] for e in program["eqns"]].count("exp") == 3
    emitted, result = roundtrip(program)
    assert [e["op"] for e in emitted["eqns"]].count("exp") == 1
    (add,) = [n for n in nodes(result.view, "binary") if n.attrs[0] == "add"]
    assert add.children == (result.view.roots[1], result.view.roots[1])
    expected, got = program_to_callable(program)(x), program_to_callable(emitted)(x)
    assert all(bits_equal(e, g) for e, g in zip(expected, got))


def _renamed(program: dict) -> dict:
    """The same program with every computed value renamed."""
    inputs = {s["name"] for s in program["inputs"]}
    name = lambda a: a if not isinstance(a, str) or a in inputs else f"r_{a}"
    return {**program, "eqns": [{**e, "in": [name(a) for a in e["in"]],
                                 "out": [{**o, "name": name(o["name"])} for o in e["out"]]} for e in program["eqns"]],
            "outputs": [name(o) for o in program["outputs"]]}


def test_an_alternative_shares_the_classes_of_what_it_computes_alike_and_keeps_its_origins():
    x, w = F(3, 4), F(4, 4)
    program = capture(lambda x, w: jnp.tanh(x @ w) + 1.0, x, w)
    changed = capture(lambda x, w: jnp.exp(x @ w) + 1.0, x, w)  # shares the matmul only
    with ingest(program) as alone, ingest(program, [_renamed(program), changed]) as together:
        alone_view, view = view_egraph(alone.egraph), view_egraph(together.egraph)
        assert view.enode_count == alone_view.enode_count + 2  # exp and the add over it
        for i in range(len(program["eqns"])):  # the renamed copy's equation i is the program's class
            assert [c.origins.get(1) for c in view.classes.values() if c.origins.get(0) == i] == [i]
        assert {c.origins.get(2) for c in view.classes.values() if c.origins.get(0) == 0} == {0}


def test_an_output_holding_anothers_strictly_below_it_is_not_unioned_into_a_cycle():
    # select(c, y, y) and y: one class would hold a node over itself, and fusion rules inlining
    # the class into itself would grow it without end
    x = F(3)
    same = capture(lambda x: lax.select(x > 0, x * 2.0, x * 2.0), x)
    below, added = capture(lambda x: x * 2.0, x), capture(lambda x: x + x, x)
    with ingest(same, [below, added]) as loaded:
        view = view_egraph(loaded.egraph)
        assert not [n for c in view.classes.values() for n in c.nodes if c.id in n.children]
        root = view.classes[view.roots[0]]
        assert sorted(n.op for n in root.nodes) == ["binary", "binary"]  # x * 2 and x + x, no select


def test_multi_output_opaque_is_emitted_once():
    x, y = F(3, 4), F(3, 4)
    program = capture(lambda x, y: lax.sort((x, y), num_keys=1), x, y)
    emitted, result = roundtrip(program)
    assert [e["op"] for e in emitted["eqns"]] == ["sort"] and len(emitted["eqns"][0]["out"]) == 2
    assert len(nodes(result.view, "opaque")) == 2  # one term per output, one equation


def test_split_becomes_one_slice_per_output():
    x = F(4, 12)
    program = capture(lambda x: jnp.split(x, [2, 7], axis=1), x)
    assert [e["op"] for e in program["eqns"]] == ["split"]
    emitted, _ = roundtrip(program)
    assert [e["op"] for e in emitted["eqns"]] == ["slice"] * 3
    expected, got = program_to_callable(program)(x), program_to_callable(emitted)(x)
    assert all(bits_equal(e, g) for e, g in zip(expected, got))


def test_add_any_from_autodiff_is_an_add():
    x = F(3, 4)
    program = capture(jax.grad(lambda x: jnp.sum(jnp.sin(x) * x)), x)
    assert "add_any" in [e["op"] for e in program["eqns"]]
    emitted, result = roundtrip(program)
    assert "add_any" not in [e["op"] for e in emitted["eqns"]]
    assert any(n.attrs[0] == "add" for n in nodes(result.view, "binary"))
    expected, got = program_to_callable(program)(x), program_to_callable(emitted)(x)
    assert all(bits_equal(e, g) for e, g in zip(expected, got))


def test_multi_output_opaque_is_priced_once_by_extraction():
    x, y = F(3, 4), F(3, 4)
    program = capture(lambda x, y: lax.sort((x, y), num_keys=1), x, y)
    loaded = ingest(program)
    view = view_egraph(loaded.egraph)
    coster = NodeCoster(view, loaded.params, load_profile("optu-v1"), set())
    outputs = nodes(view, "opaque")
    kernel = build_kernel_program(program, load_profile("optu-v1"), NAIVE).total.time_s
    assert sum(coster(n) for n in outputs) == pytest.approx(kernel, abs=1e-9)  # up to the tie epsilon


def test_signed_zero_literals_stay_distinct():
    x = np.array([-0.0, 0.0, 1.0], np.float32)
    program = capture(lambda x: (x + 0.0, x + (-0.0)), x)
    emitted, _ = roundtrip(program)
    assert_same_program(program, emitted, [x])


# --- The e-class invariant -----------------------------------------------------------------------

def test_union_of_classes_with_different_shapes_panics():
    a, b = Term.var(0), Term.var(1)
    egraph = EGraph()
    egraph.register(*typed(a, (2, 3)), *typed(b, (3, 2)))
    with pytest.raises(EggSmolError, match="Illegal merge"):
        egraph.register(union(a).with_(b))
        egraph.run(1)


def test_union_of_classes_with_different_dtypes_panics():
    a, b = Term.var(0), Term.var(1)
    egraph = EGraph()
    egraph.register(*typed(a, (2, 3)), *typed(b, (2, 3), "int32"))
    with pytest.raises(EggSmolError, match="Illegal merge"):
        egraph.register(union(a).with_(b))
        egraph.run(1)


def test_union_of_classes_of_one_type_is_fine():
    a, b = Term.var(0), Term.var(1)
    egraph = EGraph()
    egraph.register(*typed(a, (2, 3)), *typed(b, (2, 3)))
    egraph.register(union(a).with_(b))
    egraph.run(1)
    assert egraph.check_bool(a == b)
