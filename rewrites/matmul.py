"""Matmul rules: associativity (the cost model picks the parenthesisation), batched matmuls,
transposes (moved through products and folded into dimension numbers), scales moved across a
matmul, and distributivity over a shared input."""
from __future__ import annotations

from egglog import Vec, eq, i64, rewrite, vars_

from rewrites.params import NO_PARAMS
from rewrites.registry import Family
from rewrites.shapes import result_dtype
from rewrites.terms import Term, dtype, ivec, shape

MATMUL = Family("matmul")

A, B, C, S = vars_("A B C S", Term)
sb, sc = vars_("sb sc", Vec[i64])
e1, e2, e3 = vars_("e1 e2 e3", i64)
NONE = i64(NO_PARAMS)


def mm(lhs: Term, rhs: Term, extra) -> Term:
    """A plain 2-D matmul: lhs[m, k] @ rhs[k, n]."""
    return Term.dot(lhs, rhs, ivec([1]), ivec([0]), ivec([]), ivec([]), extra)


def bmm(lhs: Term, rhs: Term, extra) -> Term:
    """A batched matmul: lhs[b, m, k] @ rhs[b, k, n]."""
    return Term.dot(lhs, rhs, ivec([2]), ivec([1]), ivec([0]), ivec([0]), extra)


def t2(x: Term) -> Term:
    return Term.transpose(x, ivec([1, 0]))


def add(lhs: Term, rhs: Term, extra) -> Term:
    return Term.binary("add", lhs, rhs, extra)


def mul(lhs: Term, rhs: Term, extra) -> Term:
    return Term.binary("mul", lhs, rhs, extra)


def rank(n: int, *terms: Term) -> list:
    """Guards: each term has rank n (contracting dims 1/0 also match higher ranks)."""
    return [eq(shape(t).length()).to(i64(n)) for t in terms]


def known(lhs: Term, rhs: Term, extra) -> Term:
    """Guard: a product of these operand types with these params occurs, so a new one has a known
    result type (a dot's preferred_element_type lives in the params table)."""
    return result_dtype("dot", extra, dtype(lhs), dtype(rhs))


# Real, not exact: reassociation changes the order of floating-point sums.
MATMUL.add("matmul-assoc-right", "real",  # (A@B)@C -> A@(B@C)
           rewrite(mm(mm(A, B, e2), C, e1)).to(mm(A, mm(B, C, e2), e1), *rank(2, A, B, C), known(B, C, e2)),
           throttled=True)
MATMUL.add("matmul-assoc-left", "real",  # A@(B@C) -> (A@B)@C
           rewrite(mm(A, mm(B, C, e2), e1)).to(mm(mm(A, B, e2), C, e1), *rank(2, A, B, C), known(A, B, e2)),
           throttled=True)
MATMUL.add("transpose-of-matmul", "real",  # (A@B)^T -> B^T @ A^T
           rewrite(t2(mm(A, B, e1))).to(mm(t2(B), t2(A), e1), *rank(2, A, B)))
MATMUL.add("batched-matmul-assoc", "real",  # (A@B)@C -> A@(B@C) and back, batched over a leading dim
           rewrite(bmm(bmm(A, B, e2), C, e1)).to(bmm(A, bmm(B, C, e2), e1), *rank(3, A, B, C), known(B, C, e2)),
           rewrite(bmm(A, bmm(B, C, e2), e1)).to(bmm(bmm(A, B, e2), C, e1), *rank(3, A, B, C), known(A, B, e2)))
# A^T @ B -> dot_general contracting A's dim 0 (no transpose materialized)
MATMUL.add("fold-transpose-lhs", "real",
           rewrite(mm(t2(A), B, e1)).to(Term.dot(A, B, ivec([0]), ivec([0]), ivec([]), ivec([]), e1), *rank(2, A)))
# A @ B^T -> dot_general contracting B's dim 1
MATMUL.add("fold-transpose-rhs", "real",
           rewrite(mm(A, t2(B), e1)).to(Term.dot(A, B, ivec([1]), ivec([1]), ivec([]), ivec([]), e1), *rank(2, B)))
# (x@W)*s -> x@(W*s) for a scalar s of W's dtype: the scale folds into a weight
MATMUL.add("scale-into-matmul", "real",
           rewrite(mul(mm(A, B, e1), S, e2)).to(mm(A, mul(B, S, e2), e1), *rank(2, B), *rank(0, S),
                                                eq(dtype(B)).to(dtype(S))))
# x@(W*s) -> (x@W)*s for a scalar s of the product's dtype
MATMUL.add("scale-out-of-matmul", "real",
           rewrite(mm(A, mul(B, S, e2), e1)).to(mul(mm(A, B, e1), S, e2), *rank(2, A, B), *rank(0, S),
                                                eq(dtype(mm(A, mul(B, S, e2), e1))).to(dtype(S)), known(A, B, e1)))
# (x@W) * broadcast(s[n], dims=(1,)) -> x@(W * broadcast(s)): per-column scales fold into W;
# guards: x is a matrix, so output dim 1 is W's column dim; the broadcast spans the product's
# columns (its rows may be 1: mul broadcasts size-1 dims) and the product is not itself broadcast
# by the mul; s has W's dtype
_scaled = mul(mm(A, B, e1), Term.broadcast(S, sc, ivec([1]), e3), e2)
MATMUL.add("column-scale-into-matmul", "real",
           rewrite(_scaled).to(mm(A, mul(B, Term.broadcast(S, sb, ivec([1]), e3), e2), e1), *rank(2, A, B),
                               *rank(1, S), eq(sb).to(shape(B)), eq(dtype(B)).to(dtype(S)),
                               eq(shape(mm(A, B, e1))).to(shape(_scaled)), eq(sc[i64(1)]).to(shape(_scaled)[i64(1)])))
# x@W1 + x@W2 -> x@(W1+W2); guard: W1, W2 of one shape and dtype
MATMUL.add("factor-matmul-add", "real",
           rewrite(add(mm(A, B, e1), mm(A, C, e1), e2)).to(mm(A, add(B, C, NONE), e1), *rank(2, B),
                                                           eq(shape(B)).to(shape(C)), eq(dtype(B)).to(dtype(C))))
# x@(W1+W2) -> x@W1 + x@W2
MATMUL.add("expand-matmul-add", "real",
           rewrite(mm(A, add(B, C, e2), e1)).to(add(mm(A, B, e1), mm(A, C, e1), NONE), *rank(2, A, B),
                                                eq(shape(B)).to(shape(C)), known(A, B, e1), known(A, C, e1)))
# x@W1 + h@W2 -> concat(x, h) @ concat(W1; W2): one sweep of the weight tiles, the partial sums
# added optically in one readout instead of a vector add (an RNN step, a gated unit). Guards:
# matrices of matching rows and columns (the add may broadcast a size-1 dim: then no concat fits),
# one dot params id, x and h of one dtype, W1 and W2 of one dtype.
MATMUL.add("accumulate-matmuls", "real",
           rewrite(add(mm(A, B, e1), mm(S, C, e1), e2))
           .to(mm(Term.concat(Vec[Term](A, S), 1), Term.concat(Vec[Term](B, C), 0), e1), *rank(2, A, B, S, C),
               eq(shape(A)[i64(0)]).to(shape(S)[i64(0)]), eq(shape(B)[i64(1)]).to(shape(C)[i64(1)]),
               eq(dtype(A)).to(dtype(S)), eq(dtype(B)).to(dtype(C))))
