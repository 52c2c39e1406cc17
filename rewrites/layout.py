"""Layout rules: transpose, reshape, broadcast, squeeze and slice composition and cancellation."""
from __future__ import annotations

from egglog import Vec, eq, i64, rewrite, rule, union, vars_

from rewrites.analysis import MAX_RANK, iota, zeros
from rewrites.registry import Family
from rewrites.terms import Term, shape

LAYOUT = Family("layout")

x, outer = vars_("x outer", Term)
p, q, s, a, b, dims, st = vars_("p q s a b dims st", Vec[i64])
e, e2 = vars_("e e2", i64)

for n in range(1, MAX_RANK + 1):
    composed = Vec[i64](*(p[q[i64(k)]] for k in range(n)))
    # transpose(transpose(x, p), q) -> transpose(x, p∘q); guard: both perms have rank n
    LAYOUT.add("transpose-transpose", "exact",
               rule(eq(outer).to(Term.transpose(Term.transpose(x, p), q)), eq(q.length()).to(i64(n)))
               .then(union(outer).with_(Term.transpose(x, composed))))
    # transpose(x, identity) -> x
    LAYOUT.add("transpose-identity", "exact", rewrite(Term.transpose(x, iota(n))).to(x))
    # broadcast_in_dim(x, shape(x), identity) -> x
    LAYOUT.add("broadcast-identity", "exact",
               rule(eq(outer).to(Term.broadcast(x, s, iota(n), e)), eq(shape(x)).to(s))
               .then(union(outer).with_(x)))
    # slice(x, 0, shape(x), unit strides) -> x
    LAYOUT.add("slice-identity", "exact",
               rule(eq(outer).to(Term.slice(x, zeros(n), s, st)), eq(shape(x)).to(s),
                    eq(st.length()).to(i64(0)))
               .then(union(outer).with_(x)))

# reshape(reshape(x, a), b) -> reshape(x, b); only plain reshapes are first-class (see ingest)
LAYOUT.add("reshape-reshape", "exact",
           rewrite(Term.reshape(Term.reshape(x, a, e), b, e2)).to(Term.reshape(x, b, e2)))
# reshape(x, shape(x)) -> x
LAYOUT.add("reshape-identity", "exact",
           rule(eq(outer).to(Term.reshape(x, s, e)), eq(shape(x)).to(s)).then(union(outer).with_(x)))
# squeeze(expand_dims(x, d), d) -> x
LAYOUT.add("squeeze-expand-dims", "exact", rewrite(Term.squeeze(Term.expand_dims(x, dims), dims)).to(x))
