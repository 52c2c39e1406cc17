"""Shared rule-writing helpers: typing newly created terms and small index vectors."""
from __future__ import annotations

from egglog import String, Vec, eq, i64, set_

from rewrites.terms import Term, dtype, shape

MAX_RANK = 6  # rank-generic rules are generated per rank up to this


def typed(term: Term, shape_vec: Vec[i64], dtype_name: String) -> list:
    """Actions giving a term that a rule creates its shape and dtype (the e-class invariant)."""
    return [set_(shape(term)).to(shape_vec), set_(dtype(term)).to(dtype_name)]


def ranked(shape_vec: Vec[i64], term: Term, n: int) -> list:
    """Guards binding `shape_vec` to the term's shape, of rank n."""
    return [eq(shape_vec).to(shape(term)), eq(shape_vec.length()).to(i64(n))]


def iota(n: int) -> Vec[i64]:
    return Vec[i64](*(i64(k) for k in range(n)))


def zeros(n: int) -> Vec[i64]:
    return Vec[i64](*(i64(0) for _ in range(n)))
