"""Layout rules: transpose, reshape, broadcast, squeeze, slice and convert composition and
cancellation, and reductions through layout changes."""
from __future__ import annotations

import functools
import operator

from egglog import String, Vec, eq, f64, i64, rewrite, var, vars_

from rewrites.analysis import MAX_RANK, iota, zeros
from rewrites.params import NO_PARAMS
from rewrites.registry import Family
from rewrites.terms import Term, dtype, shape

LAYOUT = Family("layout")

x, y, inner = vars_("x y inner", Term)
p, q, s, a, b, dims, st, st2, s2 = vars_("p q s a b dims st st2 s2", Vec[i64])
e, e2, dim = vars_("e e2 dim", i64)
d = var("d", String)
NONE = i64(NO_PARAMS)
parts = var("parts", Vec[Term])
# Containers cannot be matched structurally in a query: bind a two-part concat's parts by index.
two_parts = [eq(parts.length()).to(i64(2)), eq(x).to(parts[i64(0)]), eq(y).to(parts[i64(1)])]

for n in range(1, MAX_RANK + 1):
    composed = Vec[i64](*(p[q[i64(k)]] for k in range(n)))
    # transpose(transpose(x, p), q) -> transpose(x, p∘q); guard: both perms have rank n
    LAYOUT.add("transpose-transpose", "exact",
               rewrite(Term.transpose(Term.transpose(x, p), q))
               .to(Term.transpose(x, composed), eq(q.length()).to(i64(n))))
    # transpose(x, identity) -> x
    LAYOUT.add("transpose-identity", "exact", rewrite(Term.transpose(x, iota(n))).to(x))
    # broadcast_in_dim(x, shape(x), identity) -> x
    LAYOUT.add("broadcast-identity", "exact",
               rewrite(Term.broadcast(x, s, iota(n), e)).to(x, eq(shape(x)).to(s)))
    # slice(x, 0, shape(x), unit strides) -> x
    LAYOUT.add("slice-identity", "exact",
               rewrite(Term.slice(x, zeros(n), s, st)).to(x, eq(shape(x)).to(s), eq(st.length()).to(i64(0))))

# reshape(reshape(x, a), b) -> reshape(x, b); only plain reshapes are first-class (see ingest)
LAYOUT.add("reshape-reshape", "exact",
           rewrite(Term.reshape(Term.reshape(x, a, e), b, e2)).to(Term.reshape(x, b, e2)))
# reshape(x, shape(x)) -> x
LAYOUT.add("reshape-identity", "exact",
           rewrite(Term.reshape(x, s, e)).to(x, eq(shape(x)).to(s)))
# squeeze(expand_dims(x, d), d) -> x
LAYOUT.add("squeeze-expand-dims", "exact", rewrite(Term.squeeze(Term.expand_dims(x, dims), dims)).to(x))

# squeeze(x) -> reshape(x, shape): one canonical form, so reshape-reshape composes them
LAYOUT.add("squeeze-to-reshape", "exact",
           rewrite(Term.squeeze(x, dims)).to(Term.reshape(x, s, NONE), eq(s).to(shape(Term.squeeze(x, dims)))))
# convert_element_type(x, dtype(x)) -> x
LAYOUT.add("convert-identity", "exact",
           rewrite(Term.convert(x, d, e)).to(x, eq(d).to(dtype(x))))

for n in range(0, MAX_RANK + 1):
    # broadcast(broadcast(x, s1, d1), s2, d2) -> broadcast(x, s2, d2∘d1); guard: rank(x) = n
    LAYOUT.add("broadcast-broadcast", "exact",
               rewrite(Term.broadcast(Term.broadcast(x, s, a, e), s2, b, e2))
               .to(Term.broadcast(x, s2, Vec[i64](*(b[a[i64(k)]] for k in range(n))), e2), eq(a.length()).to(i64(n))))

for n in range(1, MAX_RANK + 1):
    # slice(slice(x, s1, l1), s2, l2) -> slice(x, s1 + s2, s1 + l2); guard: unit strides, rank n
    LAYOUT.add("slice-slice", "exact",
               rewrite(Term.slice(Term.slice(x, a, b, st), s, s2, st2))
               .to(Term.slice(x, Vec[i64](*(a[i64(k)] + s[i64(k)] for k in range(n))),
                              Vec[i64](*(a[i64(k)] + s2[i64(k)] for k in range(n))), Vec[i64]()),
                   eq(a.length()).to(i64(n)), eq(st.length()).to(i64(0)), eq(st2.length()).to(i64(0))))
    # slice(concat(x, y), 0, shape(x)) -> x: the first part back (unit strides)
    LAYOUT.add("slice-of-concat", "exact",
               rewrite(Term.slice(Term.concat(parts, dim), zeros(n), s, st))
               .to(x, *two_parts, eq(s).to(shape(x)), eq(st.length()).to(i64(0))))
    for axis in range(n):
        # slice(concat(x, y), (0.., |x|_axis, ..0), shape(concat)) -> y: the second part back
        both = Term.concat(parts, i64(axis))
        LAYOUT.add("slice-of-concat", "exact",
                   rewrite(Term.slice(both, a, s, st))
                   .to(y, *two_parts, eq(s).to(shape(both)), eq(b).to(shape(x)), eq(s.length()).to(i64(n)),
                       eq(st.length()).to(i64(0)),
                       eq(a).to(Vec[i64](*(b[i64(axis)] if k == axis else i64(0) for k in range(n))))))
    # full reduction of a transpose -> full reduction of x. Real: a sum reorders its terms, and
    # with nan inputs which nan a max/min propagates (its sign bit) depends on the order.
    for reducer in ("reduce_sum", "reduce_max", "reduce_min"):
        LAYOUT.add(f"{reducer.replace('_', '-')}-of-transpose", "real",
                   rewrite(Term.reduce(reducer, Term.transpose(x, p), iota(n), e))
                   .to(Term.reduce(reducer, x, iota(n), e), eq(p.length()).to(i64(n))))
    # reduce_sum(broadcast(scalar x), all axes) -> x * size; real: a sum of copies vs one product
    size = f64.from_i64(functools.reduce(operator.mul, (s[i64(k)] for k in range(n))))
    LAYOUT.add("reduce-sum-of-broadcast", "real",
               rewrite(Term.reduce("reduce_sum", Term.broadcast(x, s, Vec[i64](), e2), iota(n), e))
               .to(Term.binary("mul", x, Term.flit(size, d), NONE), eq(s.length()).to(i64(n)), eq(d).to(dtype(x)),
                   eq(d).to(String("float32"))))
# copy(x) -> x, stop_gradient(x) -> x: identities of the forward computation (gradients are
# already equations of the program by the time it reaches the optimizer)
LAYOUT.add("copy-identity", "exact", rewrite(Term.unary("copy", x, e)).to(x),
           rewrite(Term.unary("stop_gradient", x, e)).to(x))
# concat(concat(xs), y) -> concat(xs..., y): a stack built by pairwise merges becomes one copy
# instead of a chain of copies (each its own kernel)
pair = var("pair", Vec[Term])
LAYOUT.add("concat-flatten", "exact",
           rewrite(Term.concat(pair, dim))
           .to(Term.concat(parts.push(y), dim), eq(pair.length()).to(i64(2)), eq(inner).to(pair[i64(0)]),
               eq(y).to(pair[i64(1)]), eq(inner).to(Term.concat(parts, dim))))
