"""egglog's internals behind one door: no module but rewrites/egglog_internals.py imports egglog's
submodules or reads its underscore names; and the expressions and actions it builds as declarations
are the ones egglog-python's own calls build."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from egglog import EGraph, Vec, f64, i64, let, panic, set_, union

from rewrites.egglog_internals import Direct, DirectConstructors, direct_union, register
from rewrites.terms import Body, Term, dtype, ivec, literal_value, output, shape, slot_lo

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("wire", "rewrites", "costmodel", "lowering", "validation", "service", "bench")
DOOR = Path("rewrites/egglog_internals.py")
# an egglog submodule imported, or an underscore (or dunder) attribute, or a rule's `.decl`, read
INTERNALS = re.compile(r"^\s*(from\s+egglog\.\w+\s+import|import\s+egglog\.\w+)|"
                       r"\._(state|egraph|add_decls|run_program)\b|__egg_\w+__|\.rule\.decl\b", re.M)


def _internals_used(text: str) -> list[str]:
    return [m.group(0).strip() for m in INTERNALS.finditer(text)]


def test_only_the_door_touches_egglog_internals():
    used = {
        str(path.relative_to(REPO)): found
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
        if path.relative_to(REPO) != DOOR and (found := _internals_used(path.read_text(encoding="utf-8")))
    }
    assert used == {}


def test_the_door_check_sees_each_kind_of_internal():
    assert _internals_used("from egglog.declarations import CallDecl") == ["from egglog.declarations import"]
    assert _internals_used("import egglog.runtime") == ["import egglog.runtime"]
    assert _internals_used("x = egraph._state.op_mapping()")
    assert _internals_used("raw = egraph._egraph") and _internals_used("t = e.__egg_typed_expr__")
    assert _internals_used("ids = {id(r.rule.decl) for r in rules}")
    assert _internals_used("from egglog import EGraph, Ruleset\nrun = egraph.run(rules)") == []
    assert (REPO / DOOR).is_file() and _internals_used((REPO / DOOR).read_text(encoding="utf-8"))


TERMS, BODIES = DirectConstructors(Term), DirectConstructors(Body)
A, B = Term.var(0), Term.var(1)


def _same(built, expected) -> bool:
    return built.__egg_typed_expr__ == expected.__egg_typed_expr__


@pytest.mark.parametrize("name, direct_args, egglog_args", [
    ("var", (3,), (3,)),
    ("lit", (-4616189618054758400, "float32"), (-4616189618054758400, "float32")),
    ("flit", (0.5, "float32"), (f64(0.5), "float32")),
    ("binary", ("add", A, B, 7), ("add", A, B, 7)),
    ("dot", (A, B, [1], [0], [], [], 2), (A, B, ivec([1]), ivec([0]), ivec(()), ivec(()), 2)),
    ("concat", ([A, B, A], 1), (Vec[Term](A, B, A), 1)),
    ("opaque", ("sort", 5, [], 0), ("sort", 5, Vec[Term](), 0)),
])
def test_a_direct_term_is_the_one_egglog_python_builds(name, direct_args, egglog_args):
    assert _same(getattr(TERMS, name)(*direct_args), getattr(Term, name)(*egglog_args))


def test_a_direct_kernel_body_is_the_one_egglog_python_builds():
    body = BODIES.binary("mul", BODIES.arg(A), BODIES.arg(B), 0, A)
    expected = Body.binary("mul", Body.arg(A), Body.arg(B), 0, A)
    assert _same(body, expected)
    assert _same(TERMS.tee_out(body, [body], 1), Term.tee_out(expected, Vec[Body](expected), i64(1)))


def test_direct_actions_are_the_set_and_union_egglog_python_builds():
    assert Direct(shape).set(A, to=[4, 8]).action == set_(shape(A)).to(ivec([4, 8])).action
    assert Direct(dtype).set(A, to="float32").action == set_(dtype(A)).to("float32").action
    assert Direct(literal_value).set(A, to=2).action == set_(literal_value(A)).to(f64(2.0)).action
    assert Direct(slot_lo).set("input", A, to=3).action == set_(slot_lo("input", A)).to(i64(3)).action
    assert direct_union(Direct(output)(0), A).action == union(output(0)).with_(A).action


def test_an_e_graph_takes_direct_actions_like_its_own():
    egraph = EGraph()
    term = TERMS.binary("add", TERMS.var(0), TERMS.var(1), 0)
    egraph.register(Direct(shape).set(term, to=[2]), direct_union(Direct(output)(0), term))
    egraph.check(shape(Term.binary("add", A, B, 0)) == ivec([2]))
    egraph.check(output(0) == Term.binary("add", A, B, 0))


def _contents(egraph: EGraph) -> list:
    return sorted((str(fn), size) for fn, size in egraph.all_function_sizes())


def test_register_gives_an_e_graph_what_egglog_pythons_register_gives_it():
    shared = TERMS.binary("mul", TERMS.var(0), TERMS.flit(0.5, "float32"), 0)  # in two terms
    body = BODIES.binary("add", BODIES.arg(A), BODIES.arg(A), 0, A)  # a subterm twice in one body
    actions = [let("e0_0", TERMS.dot(shared, TERMS.var(1), [1], [0], [], [], 3)),
               Direct(shape).set(shared, to=[4, 8]), Direct(dtype).set(shared, to="float32"),
               Direct(literal_value).set(TERMS.var(1), to=2.5), Direct(slot_lo).set("input", A, to=-1),
               direct_union(Direct(output)(0), TERMS.unary("exp", shared, 0)),
               direct_union(TERMS.var(2), TERMS.kernel(body))]
    ours, theirs = EGraph(), EGraph()
    register(ours, actions)
    theirs.register(*actions)
    assert _contents(ours) == _contents(theirs) and _contents(ours)
    ours.check(shape(Term.binary("mul", A, Term.flit(0.5, "float32"), 0)) == ivec([4, 8]))
    ours.check(output(0) == Term.unary("exp", Term.binary("mul", A, Term.flit(0.5, "float32"), 0), 0))
    ours.check(slot_lo("input", A) == i64(-1))


def test_register_refuses_what_it_does_not_convert():
    with pytest.raises(TypeError, match="cannot register"):
        register(EGraph(), [panic("not a let, set or union")])


def test_a_call_with_the_wrong_number_or_type_of_arguments_is_a_type_error():
    with pytest.raises(TypeError, match="takes 7 arguments"):
        TERMS.dot(A, B)
    with pytest.raises(TypeError, match="expected a"):  # a term where a kernel body goes
        BODIES.unary("neg", A, 0, A)
