"""egglog expressions and actions built as declarations directly.

Calling an egglog-python function infers its type variables, converts literals and merges
declaration tables on every call (~0.16 ms); loading a program into an e-graph makes thousands of
calls. A `Direct` builder resolves one function's signature once and then builds the same
expression, or the same `set_(...).to(...)` / `union(...).with_(...)` action, as plain
declarations (~10 us); a `Vec` argument may be given as a list of its items. Only for functions
whose signature has no type variables (the term language's constructors and analyses).
"""
from __future__ import annotations

from typing import Any

from egglog.declarations import CallDecl, InitRef, JustTypeRef, LitDecl, SetDecl, TypedExprDecl, UnionDecl
from egglog.egraph import Action
from egglog.runtime import RuntimeExpr

# Python values egglog-python converts to each builtin literal type
_LITERALS = {"i64": int, "f64": float, "String": str, "Bool": bool}


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
