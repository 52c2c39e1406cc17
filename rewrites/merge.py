"""Multi-pattern merges (TASO/TENSAT style): two matmuls sharing their input become one."""
from __future__ import annotations

from egglog import String, Vec, eq, i64, rule, set_, union, var, vars_

from rewrites.analysis import typed, zeros
from rewrites.registry import Family
from rewrites.terms import Term, dtype, ivec, shape, span_hi, span_lo

MERGE = Family("merge")


x, w1, w2, d1, d2 = vars_("x w1 w2 d1 d2", Term)
sx, s1, s2 = vars_("sx s1 s2", Vec[i64])
lo1, hi1, lo2, hi2 = vars_("lo1 hi1 lo2 hi2", i64)
e = var("e", i64)
dt, dw = vars_("dt dw", String)

# The ordering guard needs a total order on weights: program inputs are ordered by index (seeded
# by ingest) and a merged weight spans the indices of its parts, so each pair merges once.


def _rank(n: int) -> None:
    def mm(w: Term) -> Term:
        return Term.dot(x, w, ivec([n - 1]), ivec([0]), ivec([]), ivec([]), e)

    lead = [sx[i64(k)] for k in range(n - 1)]
    n1, n2 = s1[1], s2[1]
    merged_w = Term.concat(Vec[Term](w1, w2), 1)
    merged = mm(merged_w)
    # x@W1, x@W2 -> slices of x@concat(W1, W2); guard: hi(W1) < lo(W2) orders the pair
    MERGE.add("same-input-matmul-merge", "real",
              rule(eq(d1).to(mm(w1)), eq(d2).to(mm(w2)),
                   eq(sx).to(shape(x)), eq(sx.length()).to(i64(n)),
                   eq(s1).to(shape(w1)), eq(s2).to(shape(w2)),
                   eq(s1.length()).to(i64(2)), eq(s2.length()).to(i64(2)),  # matrices: concat on dim 1
                   eq(hi1).to(span_hi(w1)), eq(lo2).to(span_lo(w2)), hi1 < lo2,
                   eq(lo1).to(span_lo(w1)), eq(hi2).to(span_hi(w2)),
                   eq(dt).to(dtype(d1)), eq(dw).to(dtype(w1)))
              .then(*typed(merged_w, Vec[i64](s1[0], n1 + n2), dw),
                    set_(span_lo(merged_w)).to(lo1), set_(span_hi(merged_w)).to(hi2),
                    *typed(merged, Vec[i64](*lead, n1 + n2), dt),
                    union(d1).with_(Term.slice(merged, zeros(n), Vec[i64](*lead, n1), ivec([]))),
                    union(d2).with_(Term.slice(merged, Vec[i64](*(i64(0) for _ in lead), n1),
                                               Vec[i64](*lead, n1 + n2), ivec([])))))


for _n in (2, 3):
    _rank(_n)
