"""Matmul rules: associativity (the cost model picks the parenthesisation) and transposes."""
from __future__ import annotations

from egglog import String, Vec, eq, i64, rule, union, vars_

from rewrites.analysis import typed
from rewrites.registry import Family
from rewrites.terms import Term, dtype, ivec, shape

MATMUL = Family("matmul")

A, B, C, outer = vars_("A B C outer", Term)
sa, sb, sc = vars_("sa sb sc", Vec[i64])
e1, e2 = vars_("e1 e2", i64)
dt, db = vars_("dt db", String)


def mm(lhs: Term, rhs: Term, extra) -> Term:
    """A plain 2-D matmul: lhs[m, k] @ rhs[k, n]."""
    return Term.dot(lhs, rhs, ivec([1]), ivec([0]), ivec([]), ivec([]), extra)


def t2(x: Term) -> Term:
    return Term.transpose(x, ivec([1, 0]))




def rank2(*pairs) -> list:
    """Guards: each (term, shape var) is a matrix; contracting dims 1/0 also match higher ranks."""
    return [fact for t, s in pairs for fact in (eq(s).to(shape(t)), eq(s.length()).to(i64(2)))]


# Real, not exact: reassociation changes the order of floating-point sums.
# (A@B)@C -> A@(B@C)
MATMUL.add("matmul-assoc-right", "real",
           rule(eq(outer).to(mm(mm(A, B, e2), C, e1)), *rank2((A, sa), (B, sb), (C, sc)),
                eq(dt).to(dtype(outer)))
           .then(union(outer).with_(mm(A, mm(B, C, e2), e1)),
                 *typed(mm(B, C, e2), Vec[i64](sb[0], sc[1]), dt)))
# A@(B@C) -> (A@B)@C
MATMUL.add("matmul-assoc-left", "real",
           rule(eq(outer).to(mm(A, mm(B, C, e2), e1)), *rank2((A, sa), (B, sb), (C, sc)),
                eq(dt).to(dtype(outer)))
           .then(union(outer).with_(mm(mm(A, B, e2), C, e1)),
                 *typed(mm(A, B, e2), Vec[i64](sa[0], sb[1]), dt)))
# (A@B)^T -> B^T @ A^T
MATMUL.add("transpose-of-matmul", "real",
           rule(eq(outer).to(t2(mm(A, B, e1))), *rank2((A, sa), (B, sb)),
                eq(dt).to(dtype(A)), eq(db).to(dtype(B)))
           .then(union(outer).with_(mm(t2(B), t2(A), e1)),
                 *typed(t2(B), Vec[i64](sb[1], sb[0]), db),
                 *typed(t2(A), Vec[i64](sa[1], sa[0]), dt)))
