"""Matmul rules: associativity (the cost model picks the parenthesisation), batched matmuls,
transposes (moved through products and folded into dimension numbers), scales moved across a
matmul, and distributivity over a shared input."""
from __future__ import annotations

from egglog import String, Vec, eq, i64, rule, union, vars_

from rewrites.analysis import typed
from rewrites.params import NO_PARAMS
from rewrites.registry import Family
from rewrites.terms import Term, dtype, ivec, shape

MATMUL = Family("matmul")

A, B, C, S, outer = vars_("A B C S outer", Term)
sa, sb, sc, sd, ss = vars_("sa sb sc sd ss", Vec[i64])
e1, e2, e3 = vars_("e1 e2 e3", i64)
dt, db = vars_("dt db", String)
NONE = i64(NO_PARAMS)


def mm(lhs: Term, rhs: Term, extra) -> Term:
    """A plain 2-D matmul: lhs[m, k] @ rhs[k, n]."""
    return Term.dot(lhs, rhs, ivec([1]), ivec([0]), ivec([]), ivec([]), extra)


def t2(x: Term) -> Term:
    return Term.transpose(x, ivec([1, 0]))




def rank(n: int, *pairs) -> list:
    """Guards: each (term, shape var) has rank n (contracting dims 1/0 also match higher ranks)."""
    return [fact for t, s in pairs for fact in (eq(s).to(shape(t)), eq(s.length()).to(i64(n)))]


# Real, not exact: reassociation changes the order of floating-point sums.
# (A@B)@C -> A@(B@C)
MATMUL.add("matmul-assoc-right", "real",
           rule(eq(outer).to(mm(mm(A, B, e2), C, e1)), *rank(2, (A, sa), (B, sb), (C, sc)),
                eq(dt).to(dtype(outer)))
           .then(union(outer).with_(mm(A, mm(B, C, e2), e1)),
                 *typed(mm(B, C, e2), Vec[i64](sb[0], sc[1]), dt)), throttled=True)
# A@(B@C) -> (A@B)@C
MATMUL.add("matmul-assoc-left", "real",
           rule(eq(outer).to(mm(A, mm(B, C, e2), e1)), *rank(2, (A, sa), (B, sb), (C, sc)),
                eq(dt).to(dtype(outer)))
           .then(union(outer).with_(mm(mm(A, B, e2), C, e1)),
                 *typed(mm(A, B, e2), Vec[i64](sa[0], sb[1]), dt)), throttled=True)
# (A@B)^T -> B^T @ A^T
MATMUL.add("transpose-of-matmul", "real",
           rule(eq(outer).to(t2(mm(A, B, e1))), *rank(2, (A, sa), (B, sb)),
                eq(dt).to(dtype(A)), eq(db).to(dtype(B)))
           .then(union(outer).with_(mm(t2(B), t2(A), e1)),
                 *typed(t2(B), Vec[i64](sb[1], sb[0]), db),
                 *typed(t2(A), Vec[i64](sa[1], sa[0]), dt)))


def bmm(lhs: Term, rhs: Term, extra) -> Term:
    """A batched matmul: lhs[b, m, k] @ rhs[b, k, n]."""
    return Term.dot(lhs, rhs, ivec([2]), ivec([1]), ivec([0]), ivec([0]), extra)


# (A@B)@C -> A@(B@C) and back, batched over a leading dim
MATMUL.add("batched-matmul-assoc", "real",
           rule(eq(outer).to(bmm(bmm(A, B, e2), C, e1)), *rank(3, (A, sa), (B, sb), (C, sc)), eq(dt).to(dtype(outer)))
           .then(union(outer).with_(bmm(A, bmm(B, C, e2), e1)),
                 *typed(bmm(B, C, e2), Vec[i64](sb[0], sb[1], sc[2]), dt)),
           rule(eq(outer).to(bmm(A, bmm(B, C, e2), e1)), *rank(3, (A, sa), (B, sb), (C, sc)), eq(dt).to(dtype(outer)))
           .then(union(outer).with_(bmm(bmm(A, B, e2), C, e1)),
                 *typed(bmm(A, B, e2), Vec[i64](sa[0], sa[1], sb[2]), dt)))
# A^T @ B -> dot_general contracting A's dim 0 (no transpose materialized)
MATMUL.add("fold-transpose-lhs", "real",
           rule(eq(outer).to(mm(t2(A), B, e1)), *rank(2, (A, sa)))
           .then(union(outer).with_(Term.dot(A, B, ivec([0]), ivec([0]), ivec([]), ivec([]), e1))))
# A @ B^T -> dot_general contracting B's dim 1
MATMUL.add("fold-transpose-rhs", "real",
           rule(eq(outer).to(mm(A, t2(B), e1)), *rank(2, (B, sb)))
           .then(union(outer).with_(Term.dot(A, B, ivec([1]), ivec([1]), ivec([]), ivec([]), e1))))
# (x@W)*s -> x@(W*s) for a scalar s of W's dtype: the scale folds into a weight
MATMUL.add("scale-into-matmul", "real",
           rule(eq(outer).to(Term.binary("mul", mm(A, B, e1), S, e2)), *rank(2, (B, sb)), *rank(0, (S, ss)),
                eq(db).to(dtype(B)), eq(db).to(dtype(S)))
           .then(union(outer).with_(mm(A, Term.binary("mul", B, S, e2), e1)),
                 *typed(Term.binary("mul", B, S, e2), sb, db)))
# x@(W*s) -> (x@W)*s for a scalar s of the product's dtype
MATMUL.add("scale-out-of-matmul", "real",
           rule(eq(outer).to(mm(A, Term.binary("mul", B, S, e2), e1)), *rank(2, (A, sa), (B, sb)), *rank(0, (S, ss)),
                eq(dt).to(dtype(outer)), eq(dt).to(dtype(S)))
           .then(union(outer).with_(Term.binary("mul", mm(A, B, e1), S, e2)),
                 *typed(mm(A, B, e1), Vec[i64](sa[0], sb[1]), dt)))
# (x@W) * broadcast(s[n], dims=(1,)) -> x@(W * broadcast(s)): per-column scales fold into W;
# guards: x is a matrix, so output dim 1 is W's column dim; the broadcast spans the product's
# columns (its rows may be 1: mul broadcasts size-1 dims) and the product is not itself broadcast
# by the mul; s has W's dtype
MATMUL.add("column-scale-into-matmul", "real",
           rule(eq(outer).to(Term.binary("mul", mm(A, B, e1), Term.broadcast(S, sc, ivec([1]), e3), e2)),
                *rank(2, (A, sa), (B, sb)), *rank(1, (S, ss)), eq(db).to(dtype(B)), eq(db).to(dtype(S)),
                eq(sd).to(shape(mm(A, B, e1))), eq(sd).to(shape(outer)), eq(sc[i64(1)]).to(sd[i64(1)]))
           .then(union(outer).with_(mm(A, Term.binary("mul", B, Term.broadcast(S, sb, ivec([1]), e3), e2), e1)),
                 *typed(Term.broadcast(S, sb, ivec([1]), e3), sb, db),
                 *typed(Term.binary("mul", B, Term.broadcast(S, sb, ivec([1]), e3), e2), sb, db)))
# x@W1 + x@W2 -> x@(W1+W2); guard: W1, W2 of one shape and dtype
MATMUL.add("factor-matmul-add", "real",
           rule(eq(outer).to(Term.binary("add", mm(A, B, e1), mm(A, C, e1), e2)), *rank(2, (B, sb)),
                eq(sb).to(shape(C)), eq(db).to(dtype(B)), eq(db).to(dtype(C)))
           .then(union(outer).with_(mm(A, Term.binary("add", B, C, NONE), e1)),
                 *typed(Term.binary("add", B, C, NONE), sb, db)))
# x@(W1+W2) -> x@W1 + x@W2
MATMUL.add("expand-matmul-add", "real",
           rule(eq(outer).to(mm(A, Term.binary("add", B, C, e2), e1)), *rank(2, (A, sa), (B, sb)),
                eq(sb).to(shape(C)), eq(dt).to(dtype(outer)))
           .then(union(outer).with_(Term.binary("add", mm(A, B, e1), mm(A, C, e1), NONE)),
                 *typed(mm(A, B, e1), Vec[i64](sa[0], sb[1]), dt), *typed(mm(A, C, e1), Vec[i64](sa[0], sb[1]), dt)))
# x@W1 + h@W2 -> concat(x, h) @ concat(W1; W2): one sweep of the weight tiles, the partial sums
# added optically in one readout instead of a vector add (an RNN step, a gated unit). Guards:
# matrices of matching rows and columns (the add may broadcast a size-1 dim: then no concat fits),
# one dot params id, x and h of one dtype, W1 and W2 of one dtype.
MATMUL.add("accumulate-matmuls", "real",
           rule(eq(outer).to(Term.binary("add", mm(A, B, e1), mm(S, C, e1), e2)),
                *rank(2, (A, sa), (B, sb), (S, ss), (C, sc)), eq(sa[0]).to(ss[0]), eq(sb[1]).to(sc[1]),
                eq(dt).to(dtype(A)), eq(dt).to(dtype(S)), eq(db).to(dtype(B)), eq(db).to(dtype(C)))
           .then(union(outer).with_(mm(Term.concat(Vec[Term](A, S), 1), Term.concat(Vec[Term](B, C), 0), e1)),
                 *typed(Term.concat(Vec[Term](A, S), 1), Vec[i64](sa[0], sa[1] + ss[1]), dt),
                 *typed(Term.concat(Vec[Term](B, C), 0), Vec[i64](sb[0] + sc[0], sb[1]), db)))
