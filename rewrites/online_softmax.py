"""Online softmax: softmax(S) @ V over keys split into parts, stated in terms of each part's max,
sum of exponentials and weighted output. It is the identity a key-blocked attention kernel applies
once per block (and a split decode step once per split); it holds for whatever computed S (a
scale, a bias or mask added, a `where`, a softcap), so it names no model. Real mode only: it
reorders the float sums of the softmax's denominator and of the product."""
from __future__ import annotations

from egglog import String, Vec, eq, i64, rule, union, vars_

from rewrites.analysis import MAX_RANK, iota, typed
from rewrites.params import NO_PARAMS
from rewrites.registry import Family
from rewrites.terms import Term, dtype, shape

ONLINE_SOFTMAX = Family("online-softmax")

outer, s1, s2, v1, v2, scores, values = vars_("outer s1 s2 v1 v2 scores values", Term)
parts, vparts = vars_("parts vparts", Vec[Term])
lc, rc, lb, rb, sa, sb, so = vars_("lc rc lb rb sa sb so", Vec[i64])
e, vk = vars_("e vk", i64)
d, ds = vars_("d ds", String)
NONE = i64(NO_PARAMS)


def _row_max(s: Term, rank: int) -> Term:
    return Term.reduce("reduce_max", s, Vec[i64](i64(rank - 1)), NONE)


def _spread(row: Term, sizes: Vec[i64], rank: int) -> Term:
    """A per-row value [..., q] broadcast along the last axis of a rank-`rank` array of `sizes`."""
    return Term.broadcast(row, sizes, iota(rank - 1), NONE)


for rank in range(2, MAX_RANK + 1):
    last = Vec[i64](i64(rank - 1))
    # The two parts' shared max m, their exponentials p_i = exp(s_i - m), their sums and outputs.
    m = Term.binary("max", _row_max(s1, rank), _row_max(s2, rank), NONE)
    p1 = Term.unary("exp", Term.binary("sub", s1, _spread(m, sa, rank), NONE), NONE)
    p2 = Term.unary("exp", Term.binary("sub", s2, _spread(m, sb, rank), NONE), NONE)
    o1, o2 = Term.dot(p1, v1, lc, rc, lb, rb, e), Term.dot(p2, v2, lc, rc, lb, rb, e)
    num = Term.binary("add", o1, o2, NONE)
    sums = [Term.reduce("reduce_sum", p, last, NONE) for p in (p1, p2)]
    row_sum = Term.binary("add", *sums, NONE)
    rows = sa.remove(i64(rank - 1))  # [batch..., q]
    # softmax(concat(s1, s2)) @ concat(v1; v2) -> (p1 @ v1 + p2 @ v2) / (sum p1 + sum p2), m shared.
    # Guards: the keys are the scores' last axis and V's contracted one, split alike; the batch
    # axes lead both, so the output is [batch..., q, d] and a row value spreads along its last axis.
    ONLINE_SOFTMAX.add(
        "softmax-dot-of-concat", "real",
        rule(eq(outer).to(Term.dot(Term.softmax(scores), values, lc, rc, lb, rb, e)),
             eq(scores).to(Term.concat(parts, i64(rank - 1))), eq(parts.length()).to(i64(2)),
             eq(s1).to(parts[i64(0)]), eq(s2).to(parts[i64(1)]),
             eq(values).to(Term.concat(vparts, vk)), eq(vparts.length()).to(i64(2)),
             eq(v1).to(vparts[i64(0)]), eq(v2).to(vparts[i64(1)]),
             eq(lc).to(last), eq(rc.length()).to(i64(1)), eq(vk).to(rc[i64(0)]), eq(lb).to(iota(rank - 2)),
             eq(sa).to(shape(s1)), eq(sa.length()).to(i64(rank)), eq(sb).to(shape(s2)),
             eq(sa[i64(rank - 1)]).to(shape(v1)[vk]),
             eq(so).to(shape(outer)), eq(so.length()).to(i64(rank)), eq(d).to(dtype(outer)), eq(ds).to(dtype(s1)))
        .then(union(outer).with_(Term.binary("div", num, _spread(row_sum, so, rank), NONE)),
              *(a for row in (_row_max(s1, rank), _row_max(s2, rank), m, *sums, row_sum) for a in typed(row, rows, ds)),
              *typed(o1, so, d), *typed(o2, so, d)))
