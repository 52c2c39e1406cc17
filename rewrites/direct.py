"""egglog expressions and actions built as declarations directly.

Calling an egglog-python function infers its type variables, converts literals and merges
declaration tables on every call (~0.16 ms); loading a program into an e-graph makes thousands of
calls. A `Direct` builder resolves one function's signature once and then builds the same
expression, or the same `set_(...).to(...)` / `union(...).with_(...)` action, as plain
declarations (~10 us); a `Vec` argument may be given as a list of its items. Only for functions
whose signature has no type variables (the term language's constructors and analyses).
`register` then hands such lets, sets and unions to an e-graph as egglog commands built here.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from egglog import EGraph, bindings
from egglog.declarations import (CallDecl, InitRef, JustTypeRef, LetDecl, LetRefDecl, LitDecl, SetDecl, TypedExprDecl,
                                 UnionDecl)
from egglog.egraph import Action
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
