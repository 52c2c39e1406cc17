"""The one module that touches egglog-python's internals (its declarations, its e-graph's state and
tables, its commands): everything else uses egglog's public API and the functions here, so an
egglog upgrade is read here alone (tests/rewrites/test_egglog_internals.py holds the rest to it).

Expressions and actions built as declarations directly: calling an egglog-python function infers
its type variables, converts literals and merges declaration tables on every call (~0.16 ms);
loading a program into an e-graph makes thousands of calls. A `Direct` builder resolves one
function's signature once and then builds the same expression, or the same `set_(...).to(...)` /
`union(...).with_(...)` action, as plain declarations (~10 us); a `Vec` argument may be given as
a list of its items. Only for functions whose signature has no type variables (the term
language's constructors and analyses). `register` then hands such lets, sets and unions to an
e-graph as egglog commands built here.

Rulesets run as egglog commands converted once per process: egglog-python's `EGraph.run` checks
on every call, rule by rule, that the ruleset's rules are registered (hashing each rule's whole
declaration) and turns the report's per-rule matches back into declarations (hashing them again):
about 0.2 s of a 1-layer encoder's search, over some fifty runs. Our rulesets do not change once
built, so a ruleset is registered in an e-graph once, run by a command converted once, and its
matches are reported per rule declaration by identity.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from egglog import EGraph, Ruleset, back_off, bindings, let, run
from egglog.declarations import (CallDecl, InitRef, JustTypeRef, LetDecl, LetRefDecl, LitDecl, SetDecl, TypedExprDecl,
                                 UnionDecl)
from egglog.egraph import Action, to_runtime_expr
from egglog.runtime import RuntimeExpr

# Python values egglog-python converts to each builtin literal type, and egglog's literal of each
_LITERALS = {"i64": int, "f64": float, "String": str, "Bool": bool}
_EGG_LITERALS = {int: bindings.Int, float: bindings.Float, str: bindings.String, bool: bindings.Bool}
_NO_SPAN = bindings.RustSpan("", 0, 0)  # egglog-python's own commands carry this span too


def _typed(tp: JustTypeRef, value: Any) -> TypedExprDecl:
    if isinstance(value, RuntimeExpr):
        typed = value.__egg_typed_expr__
        if typed.tp != tp:  # egglog-python's call raises here too: an encoder falls back on it
            raise TypeError(f"expected a {tp}, got a {typed.tp}")
        return typed
    if isinstance(value, (list, tuple)):  # a Vec argument, given as its items
        element, = tp.args
        return TypedExprDecl(tp, CallDecl(InitRef(tp.ident), tuple(_typed(element, v) for v in value), tp.args))
    return TypedExprDecl(tp, LitDecl(_LITERALS[tp.ident.name](value)))


class Direct:
    """Calls of one egglog function (`Term.dot`, `shape`, ...), built as declarations."""

    def __init__(self, function: Any):
        self.decls, self.ref = function.__egg_decls__, function.__egg_ref__
        signature = self.decls.get_callable_decl(self.ref).signature
        self.arg_types = [tp.to_just() for tp in signature.arg_types]
        self.tp = signature.semantic_return_type.to_just()

    def typed(self, *args: Any) -> TypedExprDecl:
        if len(args) != len(self.arg_types):
            raise TypeError(f"{self.ref} takes {len(self.arg_types)} arguments, not {len(args)}")
        return TypedExprDecl(self.tp, CallDecl(self.ref, tuple(map(_typed, self.arg_types, args))))

    def __call__(self, *args: Any) -> RuntimeExpr:
        return RuntimeExpr.__from_values__(self.decls, self.typed(*args))

    def set(self, *args: Any, to: Any) -> Action:
        """`set_(function(*args)).to(to)`."""
        return Action(self.decls, SetDecl(self.tp, self.typed(*args).expr, _typed(self.tp, to).expr))


def direct_union(lhs: RuntimeExpr, rhs: RuntimeExpr) -> Action:
    """`union(lhs).with_(rhs)` for two expressions of one type."""
    typed = lhs.__egg_typed_expr__
    return Action(lhs.__egg_decls__, UnionDecl(typed.tp, typed.expr, rhs.__egg_typed_expr__.expr))


class DirectConstructors:
    """A term class's constructors as `Direct` builders, by attribute (`TERMS.dot(...)`)."""

    def __init__(self, cls: Any):
        self.cls, self.built = cls, {}

    def __getattr__(self, name: str) -> Direct:
        if name not in self.built:
            self.built[name] = Direct(getattr(self.cls, name))
        return self.built[name]


def register(egraph: EGraph, actions: Sequence[Action]) -> None:
    """`egraph.register(*actions)` for lets, sets and unions, converted to egglog's commands here.
    egglog-python's conversion costs ~120 us an action: it hashes every typed declaration, operand
    by operand, for its caches, and walks each expression for shared subterms to bind. Here a
    subterm shared within the call is converted once, and each type is declared once."""
    for decls in {id(a.__egg_decls__): a.__egg_decls__ for a in actions}.values():
        egraph._add_decls(decls)
    converter = _Converter(egraph._state)
    egraph._state._run_program(*(bindings.ActionCommand(converter.action(a.action)) for a in actions))


class _Converter:
    """Declarations -> egglog's commands for one e-graph's state (an object, not closures: a
    recursive closure is a reference cycle, and one holding an e-graph's state keeps the e-graph
    alive until a collection, on whichever thread runs it)."""

    def __init__(self, state: Any):
        self.state = state
        self.converted: dict[int, Any] = {}  # id of a declaration (alive in the actions) -> its egglog expression
        self.declared: set[int] = set()

    def action(self, action: Any) -> Any:
        if type(action) is LetDecl:
            return bindings.Let(_NO_SPAN, _let_name(action.name), self.operand(action.typed_expr))
        if type(action) is SetDecl:
            return bindings.Set(_NO_SPAN, *self.call(action.call), self.expr(action.rhs))
        if type(action) is UnionDecl:
            return bindings.Union(_NO_SPAN, self.expr(action.lhs), self.expr(action.rhs))
        raise TypeError(f"cannot register a {type(action).__name__} directly")

    def operand(self, typed: TypedExprDecl) -> Any:
        if id(typed.tp) not in self.declared:
            self.declared.add(id(typed.tp))
            self.state.type_ref_to_egg(typed.tp)  # a sort is declared on first use (a Vec[i64] literal's)
        return self.expr(typed.expr)

    def call(self, decl: CallDecl) -> tuple[str, list]:
        name, reverse = self.state.callable_ref_to_egg(decl.callable)  # declares the function on first use
        args = [self.operand(a) for a in decl.args]
        return name, args[::-1] if reverse else args

    def expr(self, decl: Any) -> Any:
        if id(decl) not in self.converted:
            kind = type(decl)
            if kind is LetRefDecl:
                self.converted[id(decl)] = bindings.Var(_NO_SPAN, _let_name(decl.name))
            elif kind is LitDecl:
                self.converted[id(decl)] = bindings.Lit(_NO_SPAN, _EGG_LITERALS[type(decl.value)](decl.value))
            elif kind is CallDecl:
                self.converted[id(decl)] = bindings.Call(_NO_SPAN, *self.call(decl))
            else:
                raise TypeError(f"cannot register a {kind.__name__} directly")
        return self.converted[id(decl)]


def _let_name(name: str) -> str:
    return name if name.startswith("$") else f"${name}"  # egglog's global lets, as egglog-python names them


def deferred_let(name: str, term: Any) -> tuple[Action, Any]:
    """(the `let` action, a reference to its name), as `EGraph.let` returns but without running it:
    registered together, many lets cost one call into egglog instead of one each (a third of
    ingest time)."""
    expr = to_runtime_expr(term)
    typed = TypedExprDecl(expr.__egg_typed_expr__.tp, LetRefDecl(name))
    return let(name, term), RuntimeExpr.__from_values__(expr.__egg_decls__, typed)


def rule_id(rule: Any) -> int:
    """The identity egglog reports a rule's matches by: its declaration's (a declaration's hash
    walks all of it)."""
    return id(rule.decl)


def ruleset_name(ruleset: Ruleset) -> str:
    return ruleset.__egg_ident__.name


def egraph_tables(egraph: EGraph) -> tuple[Any, dict[str, Any], dict[str, str]]:
    """(egglog's e-graph, which decodes values; its frozen functions by egglog's name, each with
    its rows of values; egglog's function names -> egglog-python's, "Term.dot", "shape")."""
    raw = egraph._egraph
    return raw, raw.freeze().functions, egraph._state.op_mapping()


_COMMANDS: dict[tuple, object] = {}  # (ruleset, how it runs) -> egglog's command: the same in every e-graph


@dataclass(frozen=True)
class RunResult:
    updated: bool
    matches: dict[int, int]  # id of a rule's declaration -> its matches in this run (rules that matched)


def ensure_registered(egraph: EGraph, ruleset: Ruleset) -> None:
    """Add `ruleset`'s rules to `egraph` unless they are there (rulesets are never extended)."""
    if ruleset.__egg_ident__ not in egraph._state.rulesets:
        egraph._add_decls(ruleset)
        egraph._state.ruleset_to_egg(ruleset.__egg_ident__)


def run_ruleset(egraph: EGraph, ruleset: Ruleset, match_limit: int | None = None,
                saturate: bool = False) -> RunResult:
    """One run of `ruleset` (under `back_off(match_limit)` when given), or runs until it changes
    nothing (`saturate`)."""
    ensure_registered(egraph, ruleset)
    key = (ruleset.__egg_ident__, match_limit, saturate)
    if key not in _COMMANDS:
        schedule = run(ruleset, scheduler=back_off(match_limit=match_limit)) if match_limit is not None \
            else run(ruleset)
        schedule = schedule.saturate() if saturate else schedule
        egraph._add_decls(schedule)
        _COMMANDS[key] = egraph._state.run_schedule_to_egg(schedule.schedule)
    state = egraph._state
    (output,) = state._run_program(_COMMANDS[key])
    rules, matches = state.rule_name_to_command_decl, {}
    for name, n in output.report.num_matches_per_rule.items():
        if n:
            matches[id(rules[name])] = matches.get(id(rules[name]), 0) + n
    return RunResult(output.report.updated, matches)
