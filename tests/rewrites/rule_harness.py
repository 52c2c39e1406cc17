"""Shared helpers for the rule tests: goal tests on a saturated e-graph (`proves_equal`), float64
numerics of both sides of a rule, and whole-pipeline checks of what extraction built."""
from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import jax
import numpy as np
from egglog import EGraph, Ruleset, ruleset, set_, union
from hypothesis import strategies as st

from costmodel.node_equation import LEAF_OPS, node_equation
from lowering.emit import wire_literal
from rewrites.egraph_view import EClass, EGraphView, view_egraph
from rewrites.ingest import LoadedProgram, ingest
from rewrites.registry import Family, FpMode
from rewrites.schedule import Budget, SaturationReport, Schedule, saturate
from rewrites.terms import Term, dtype, float_bits, ivec, output, shape
from service.optimizer.pipeline import optimize
from wire.capture import capture
from wire.execute import program_to_callable, typecheck
from wire.format import WireError

# Verdicts that let a result be used: checked and found equal, or the same computation (nothing run).
VALIDATED = ("passed", "identical")

# Rules that only record facts (guards of other rules); they are tested through their users.
ANALYSIS_RULES = frozenset({"positive-exp", "literal-value-of-folded", "literal-as-value"})
MULTI_PATTERN_FAMILIES = frozenset({"merge"})  # run in `Schedule.bounded`, as the driver does
# Normwise relative error (max |lhs - rhs| / max |lhs|) allowed between the two sides in float64.
RTOL = {"exact": 1e-12, "real": 1e-10}
# Special float32 values mixed into inputs of exact-mode checks. No subnormals: XLA:CPU flushes
# them in some compiled ops, which is a property of the backend, not of IEEE arithmetic.
SPECIALS = np.array([-0.0, 0.0, np.inf, -np.inf, np.nan, 1.0, -1.0], np.float32)


# --- Goal tests on the e-graph -------------------------------------------------------------------

def rule_mode(family: Family, name: str) -> FpMode:
    modes = {r.mode for r in family.rules if r.name == name}
    assert len(modes) == 1, f"{name}: {modes}"
    return modes.pop()


@functools.cache
def _ruleset(family: Family, fp_mode: FpMode, only: frozenset[str] | None) -> Ruleset | None:
    if only is None:
        return family.ruleset(fp_mode)
    keep = only | ANALYSIS_RULES
    rules = [r.rule for r in family.rules
             if r.name in keep and r.allowed_in(fp_mode)]
    if not rules:
        return None
    return ruleset(*rules, name=f"harness-{family.name}-{fp_mode}-{'+'.join(sorted(only))}")


@functools.cache
def _empty(slot: str) -> Ruleset:
    return ruleset(name=f"harness-empty-{slot}")


def schedule_for(families: Sequence[Family], fp_mode: FpMode = "real",
                 only: frozenset[str] | None = None) -> Schedule:
    """A schedule of just `families` (optionally just the rules named in `only`, plus analyses)."""
    def combined(multi: bool, slot: str) -> Ruleset:
        sets = [rs for f in families if (f.name in MULTI_PATTERN_FAMILIES) == multi
                for rs in [_ruleset(f, fp_mode, only)] if rs is not None]
        return functools.reduce(operator.or_, sets) if sets else _empty(slot)
    return Schedule("harness", combined(False, "every"), combined(True, "bounded"))


@dataclass
class Saturated:
    loaded: LoadedProgram
    view: EGraphView
    report: SaturationReport
    program: dict[str, Any] = field(repr=False, default_factory=dict)

    def same_class(self, i: int, j: int) -> bool:
        return self.view.roots[i] == self.view.roots[j]

    def root(self, i: int) -> EClass:
        return self.view.classes[self.view.roots[i]]


def saturate_program(program: dict[str, Any], families: Sequence[Family], fp_mode: FpMode = "real",
                     iterations: int = 8, *, only: Sequence[str] | None = None,
                     budget: Budget | None = None) -> Saturated:
    """Ingest a wire program and run only `families` (or only the rules named in `only`)."""
    loaded = ingest(program)
    schedule = schedule_for(tuple(families), fp_mode, None if only is None else frozenset(only))
    report = saturate(loaded.egraph, schedule, budget or Budget(iter_limit=iterations))
    return Saturated(loaded, view_egraph(loaded.egraph), report, program)


def saturate_fn(fn: Callable, args: Sequence[Any], families: Sequence[Family],
                fp_mode: FpMode = "real", iterations: int = 8, *,
                only: Sequence[str] | None = None, budget: Budget | None = None) -> Saturated:
    """Capture `fn` at `args`, ingest it, and run only `families` under a budget."""
    return saturate_program(capture(fn, *args), families, fp_mode, iterations, only=only, budget=budget)


def goal_program(lhs_fn: Callable, rhs_fn: Callable, args: Sequence[Any],
                 context_fn: Callable | None = None) -> dict[str, Any]:
    """The wire program returning (lhs, rhs, *context) that goal tests saturate."""
    def both(*a):
        return (lhs_fn(*a), rhs_fn(*a), *(context_fn(*a) if context_fn else ()))
    return capture(both, *args)


def proves_equal(lhs_fn: Callable, rhs_fn: Callable, args: Sequence[Any], families: Sequence[Family],
                 fp_mode: FpMode = "real", iterations: int = 8, *, only: Sequence[str] | None = None,
                 context_fn: Callable | None = None, budget: Budget | None = None) -> bool:
    """check_eq-style goal: after saturating a program returning (lhs, rhs, *context), the two
    roots are one e-class. `context_fn` adds outputs a multi-pattern rule needs to match."""
    program = goal_program(lhs_fn, rhs_fn, args, context_fn)
    return saturate_program(program, families, fp_mode, iterations, only=only, budget=budget).same_class(0, 1)


def assert_rule_proves(name: str, family: Family, program: dict[str, Any], fp_mode: FpMode) -> Saturated:
    """The per-rule goal: outputs 0 and 1 of `program` are distinct classes with no rules, and one
    class after running rule `name` alone (plus analyses), which reports matches."""
    assert not saturate_program(program, []).same_class(0, 1), "goal holds without rules: vacuous"
    result = saturate_program(program, [family], fp_mode, only=[name])
    assert result.same_class(0, 1), f"{name} did not prove its goal; fired {result.report.rules_fired}"
    assert result.report.rules_fired.get(name, 0) > 0
    assert not ill_typed_nodes(result), ill_typed_nodes(result)
    return result


def typed(term: Term, dims: Sequence[int], dtype_name: str = "float32") -> list:
    """The analysis facts ingest would record for a hand-built term."""
    return [set_(shape(term)).to(ivec(dims)), set_(dtype(term)).to(dtype_name)]


def proves_terms_equal(lhs: Term, rhs: Term, facts: Sequence, families: Sequence[Family],
                       fp_mode: FpMode = "real", iterations: int = 8, *,
                       only: Sequence[str] | None = None) -> bool:
    """`proves_equal` for hand-built terms (constructors ingest never produces); `facts` type them."""
    egraph = EGraph()
    egraph.register(*facts, union(output(0)).with_(lhs), union(output(1)).with_(rhs))
    schedule = schedule_for(tuple(families), fp_mode, None if only is None else frozenset(only))
    saturate(egraph, schedule, Budget(iter_limit=iterations))
    view = view_egraph(egraph)
    return view.roots[0] == view.roots[1]


def ill_typed_nodes(sat: Saturated) -> list[str]:
    """E-nodes whose class's recorded shape/dtype is not what JAX infers for the node from its
    children's recorded shapes and dtypes (the e-class invariant rules must keep)."""
    view, bad = sat.view, []
    for cls in view.classes.values():
        for node in cls.nodes:
            if node.op in LEAF_OPS or node.op == "opaque":
                continue
            op, params = node_equation(node, cls, sat.loaded.params)
            ins, inputs = [], []
            for k, child in enumerate(node.children):
                lit = next((n for n in view.classes[child].nodes if n.op in ("lit", "flit")), None)
                if lit is not None:
                    ins.append(wire_literal(*lit.attrs) if lit.op == "lit" else
                               wire_literal(float_bits(lit.attrs[0]), lit.attrs[1]))
                else:
                    c = view.classes[child]
                    inputs.append({"name": f"a{k}", "shape": list(c.shape), "dtype": c.dtype})
                    ins.append(f"a{k}")
            program = {"format": "optu.jaxpr/v1", "inputs": inputs, "consts": [],
                       "eqns": [{"op": op, "in": ins, "params": params,
                                 "out": [{"name": "out", "shape": list(cls.shape), "dtype": cls.dtype}]}],
                       "outputs": ["out"]}
            try:
                typecheck(program)
            except WireError as err:
                bad.append(f"{node.op}{node.attrs} in class {cls.id} {cls.dtype}{list(cls.shape)}: {err}")
    return bad


def nodes(view: EGraphView, op: str) -> list:
    return [n for c in view.classes.values() for n in c.nodes if n.op == op]


def var_leaves(view: EGraphView, cid: str, depth: int = 6) -> set[int] | None:
    """Input indices a concat class is built from (via its concat/var nodes), or None."""
    for node in view.classes[cid].nodes:
        if node.op == "var":
            return {int(node.attrs[0])}
        if node.op == "concat" and depth:
            parts = [var_leaves(view, c, depth - 1) for c in node.children]
            if all(p is not None for p in parts):
                return set().union(*parts)
    return None


# --- Numerics ------------------------------------------------------------------------------------

def random_args(seed: int, shapes: Sequence[Sequence[int]], dtype=np.float32) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(s)).astype(dtype) for s in shapes]


def with_specials(seed: int, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Copies of float32 `args` with signed zeros, infinities and nans at random positions."""
    rng, out = np.random.default_rng(seed), []
    for a in args:
        a = np.array(a, copy=True)
        if a.size and np.issubdtype(a.dtype, np.floating):
            flat = a.reshape(-1)
            picks = rng.choice(a.size, size=min(a.size, len(SPECIALS)), replace=False)
            flat[picks] = rng.choice(SPECIALS, size=len(picks))
        out.append(a)
    return out


def normwise_error(reference: Any, result: Any) -> float:
    """max |ref - res| / max |ref| over finite entries; non-finite entries must agree exactly."""
    ref, res = np.asarray(reference), np.asarray(result)
    assert ref.shape == res.shape, f"shapes differ: {ref.shape} vs {res.shape}"
    assert ref.dtype == res.dtype, f"dtypes differ: {ref.dtype} vs {res.dtype}"
    ref, res = ref.astype(np.float64), res.astype(np.float64)
    finite = np.isfinite(ref)
    assert np.array_equal(finite, np.isfinite(res)), "nan/inf positions differ"
    assert np.array_equal(ref[~finite], res[~finite], equal_nan=True), "non-finite values differ"
    if not finite.any():
        return 0.0
    scale = max(np.abs(ref[finite]).max(), np.finfo(np.float64).tiny)
    return float(np.abs(ref[finite] - res[finite]).max() / scale)


def check_rule_numerics(lhs_fn: Callable, rhs_fn: Callable, args64: Sequence[Any], rtol: float) -> float:
    """Both sides in float64 (x64 enabled only inside this call); returns the normwise error."""
    with jax.enable_x64(True):
        args = [np.asarray(a, np.float64) for a in args64]
        lhs, rhs = np.asarray(lhs_fn(*args)), np.asarray(rhs_fn(*args))
    assert lhs.dtype == np.float64, lhs.dtype
    error = normwise_error(lhs, rhs)
    assert error <= rtol, f"normwise error {error:.3g} > {rtol:g}"
    return error


def bits_equal(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


# --- Whole pipeline ------------------------------------------------------------------------------

def optimized_matches(fn: Callable | dict, args: Sequence[Any], fp_mode: FpMode, *, seed: int = 0,
                      options: dict | None = None) -> dict[str, Any]:
    """Optimize `fn` (or a wire program) with every rule and check the optimized program itself,
    run op by op via `program_to_callable` (not only the pipeline's own validation), against the
    original. `real`: float64 inputs (captured in x64), normwise error <= RTOL["real"] (1e-5 for a
    given float32 program); `exact`: the inputs, fresh ones, and ones with signed zeros,
    infinities and nans mixed in, bit for bit. Returns the response."""
    real = fp_mode == "real"
    with jax.enable_x64(real):
        if isinstance(fn, dict):
            program = fn
            args = [np.asarray(a, spec["dtype"]) for a, spec in zip(args, program["inputs"])]
        else:
            args = [np.asarray(a, np.float64) if real and np.issubdtype(np.asarray(a).dtype, np.floating)
                    else np.asarray(a) for a in args]
            program = capture(fn, *args)
        response = optimize(program, options={"fp_mode": fp_mode, **(options or {})})
        assert response["validation"]["status"] in VALIDATED, response["report"]["notes"]
        optimized = response["program"]
        typecheck(optimized)
        run_original, run_optimized = program_to_callable(program), program_to_callable(optimized)
        fresh = random_args(seed + 1, [a.shape for a in args], np.float64)
        trials = [args, [f.astype(a.dtype) if np.issubdtype(a.dtype, np.floating) else a
                         for f, a in zip(fresh, args)]]
        if not real:
            trials.append(with_specials(seed, args))
        for inputs in trials:
            expected, got = run_original(*inputs), run_optimized(*inputs)
            assert len(expected) == len(got)
            for k, (e, g) in enumerate(zip(expected, got)):
                if real:
                    error = normwise_error(e, g)
                    rtol = RTOL["real"] if np.asarray(e).dtype == np.float64 else 1e-5
                    assert error <= rtol, f"output {k}: normwise error {error:.3g} > {rtol:g}"
                else:
                    assert bits_equal(e, g), f"output {k} differs bitwise:\n{np.asarray(e)}\n{np.asarray(g)}"
    return response


def live_eqns(program: dict[str, Any]) -> int:
    """Equations some output depends on."""
    live = {o for o in program["outputs"] if isinstance(o, str)}
    count = 0
    for eqn in reversed(program["eqns"]):
        if any(o["name"] in live for o in eqn["out"]):
            count += 1
            live |= {a for a in eqn["in"] if isinstance(a, str)}
    return count


# --- Per-rule cases ------------------------------------------------------------------------------

@dataclass(frozen=True)
class RuleCase:
    """One rule's two sides. `draw` yields (arg shapes, static params passed to lhs/rhs/context as
    keywords); `context` adds outputs a multi-pattern rule needs; `program` builds the goal's wire
    program by hand where tracing would not emit lhs's equations (JAX drops identity layouts)."""

    lhs: Callable
    rhs: Callable
    draw: st.SearchStrategy
    context: Callable | None = None
    program: Callable | None = None  # (arg shapes, static) -> wire program of (lhs, rhs, *context)

    def bind(self, static: dict) -> tuple[Callable, Callable, Callable | None]:
        part = lambda f: None if f is None else functools.partial(f, **static)
        return part(self.lhs), part(self.rhs), part(self.context)

    def goal(self, arg_shapes: Sequence, static: dict, args: Sequence[Any]) -> dict[str, Any]:
        if self.program is not None:
            return self.program(arg_shapes, static)
        lhs, rhs, context = self.bind(static)
        return goal_program(lhs, rhs, args, context)

    def lhs_program(self, arg_shapes: Sequence, static: dict, args: Sequence[Any]) -> dict[str, Any]:
        """The program a rule should rewrite in the pipeline: lhs plus its context outputs."""
        if self.program is not None:
            program = self.program(arg_shapes, static)
            return {**program, "outputs": [program["outputs"][0], *program["outputs"][2:]]}
        return capture(self.program_fn(static), *args)

    def rhs_size(self, arg_shapes: Sequence, static: dict, args: Sequence[Any]) -> int:
        """Equations rhs needs: extraction should find a program no bigger."""
        goal = self.goal(arg_shapes, static, args)
        return live_eqns({**goal, "outputs": [goal["outputs"][1], *goal["outputs"][2:]]})

    def program_fn(self, static: dict) -> Callable:
        """lhs plus its context outputs: the program a rule should rewrite in the pipeline."""
        lhs, _, context = self.bind(static)
        return lambda *a: (lhs(*a), *(context(*a) if context else ()))


def dims(lo: int = 1, hi: int = 9) -> st.SearchStrategy[int]:
    return st.integers(lo, hi)


def shapes(min_rank: int = 1, max_rank: int = 4) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(dims(), min_size=min_rank, max_size=max_rank).map(tuple)


def one_shape(min_rank: int = 1, max_rank: int = 4) -> st.SearchStrategy:
    """draw strategy for unary rules: ([shape], {})."""
    return shapes(min_rank, max_rank).map(lambda s: ([s], {}))


seeds = st.integers(0, 2**32 - 1)


# --- The per-rule checks every family's test file runs -------------------------------------------

def check_sound_and_proven(family: Family, name: str, case: RuleCase, data, seed: int) -> None:
    """Both sides agree in float64 within the rule's mode tolerance, and the rule alone proves them
    equal in the e-graph."""
    mode = rule_mode(family, name)
    arg_shapes, static = data.draw(case.draw)
    lhs, rhs, _ = case.bind(static)
    check_rule_numerics(lhs, rhs, random_args(seed, arg_shapes, np.float64), RTOL[mode])
    assert_rule_proves(name, family, case.goal(arg_shapes, static, random_args(seed, arg_shapes)), mode)


def check_exact_keeps_bits(name: str, case: RuleCase, data, seed: int) -> tuple[dict, int]:
    """An exact rule fires in exact mode and the result is bit-identical in float32; returns the
    response and the size of the rule's right-hand side."""
    arg_shapes, static = data.draw(case.draw)
    args = random_args(seed, arg_shapes)
    response = optimized_matches(case.lhs_program(arg_shapes, static, args), args, "exact", seed=seed)
    assert name in response["report"]["rewrites"]
    return response, case.rhs_size(arg_shapes, static, args)


def check_real_only(family: Family, name: str, case: RuleCase, data, seed: int) -> tuple[dict, int]:
    """A real-arithmetic rule proves nothing and never fires in exact mode, fires in real mode, and
    the real-mode result matches the original; returns the real response and the rhs size."""
    arg_shapes, static = data.draw(case.draw)
    args = random_args(seed, arg_shapes)
    assert not proves_equal(*case.bind(static)[:2], args, [family], "exact")
    exact = optimize(case.lhs_program(arg_shapes, static, args), options={"fp_mode": "exact"})
    assert name not in exact["report"]["rewrites"]
    real = optimized_matches(case.program_fn(static), args, "real", seed=seed)
    assert name in real["report"]["rewrites"]
    return real, case.rhs_size(arg_shapes, static, args)
