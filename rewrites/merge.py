"""Multi-pattern merges (TASO/TENSAT style): two matmuls sharing their input become one matmul on
concatenated weights; two sharing their weight become one on stacked inputs (the RNN case).

Ordering guard: ingest numbers the matmuls that share an operand (terms.slot_lo); a merge joins a
range with the next single candidate, so each group of n grows left to right in n - 1 rounds
through O(n^2) merged matmuls instead of re-merging pairs in both orders.
"""
from __future__ import annotations

from egglog import String, Vec, eq, i64, rule, set_, union, var, vars_

from rewrites.analysis import ranked, zeros
from rewrites.registry import Family
from rewrites.terms import Term, dtype, ivec, shape, slot_hi, slot_lo

MERGE = Family("merge")

x, w, a1, a2, d1, d2 = vars_("x w a1 a2 d1 d2", Term)
sx, s1, s2, sw = vars_("sx s1 s2 sw", Vec[i64])
lo1, hi1, next_slot = vars_("lo1 hi1 next_slot", i64)
e = var("e", i64)
da = var("da", String)


def _adjacent(group: str) -> list:
    """d2 is the single candidate right after d1's range."""
    return [eq(lo1).to(slot_lo(group, d1)), eq(hi1).to(slot_hi(group, d1)),
            eq(next_slot).to(slot_lo(group, d2)), eq(next_slot).to(slot_hi(group, d2)), eq(next_slot).to(hi1 + 1)]


def _covers(group: str, merged: Term) -> list:
    return [set_(slot_lo(group, merged)).to(lo1), set_(slot_hi(group, merged)).to(next_slot)]


def _same_input(n: int) -> None:
    def mm(rhs: Term) -> Term:
        return Term.dot(x, rhs, ivec([n - 1]), ivec([0]), ivec([]), ivec([]), e)

    lead = [sx[i64(k)] for k in range(n - 1)]
    n1, n2 = s1[1], s2[1]
    merged = mm(Term.concat(Vec[Term](a1, a2), 1))
    # x@W1, x@W2 -> column slices of x@concat(W1, W2); W1, W2 matrices of one dtype
    MERGE.add("same-input-matmul-merge", "real",
              rule(eq(d1).to(mm(a1)), eq(d2).to(mm(a2)), *_adjacent("input"), *ranked(sx, x, n),
                   *ranked(s1, a1, 2), *ranked(s2, a2, 2), eq(da).to(dtype(a1)), eq(da).to(dtype(a2)))
              .then(*_covers("input", merged),
                    union(d1).with_(Term.slice(merged, zeros(n), Vec[i64](*lead, n1), ivec([]))),
                    union(d2).with_(Term.slice(merged, Vec[i64](*(i64(0) for _ in lead), n1),
                                               Vec[i64](*lead, n1 + n2), ivec([])))))


for _n in (2, 3):
    _same_input(_n)


def _mw(lhs: Term) -> Term:
    return Term.dot(lhs, w, ivec([1]), ivec([0]), ivec([]), ivec([]), e)


stacked = Term.concat(Vec[Term](a1, a2), 0)
# x1@W, x2@W -> row slices of concat(x1, x2)@W; x1, x2, W matrices, x1 and x2 of one dtype
MERGE.add("same-weight-matmul-merge", "real",
          rule(eq(d1).to(_mw(a1)), eq(d2).to(_mw(a2)), *_adjacent("weight"), *ranked(s1, a1, 2),
               *ranked(s2, a2, 2), *ranked(sw, w, 2), eq(da).to(dtype(a1)), eq(da).to(dtype(a2)))
          .then(*_covers("weight", _mw(stacked)),
                union(d1).with_(Term.slice(_mw(stacked), zeros(2), Vec[i64](s1[0], sw[1]), ivec([]))),
                union(d2).with_(Term.slice(_mw(stacked), Vec[i64](s1[0], i64(0)),
                                           Vec[i64](s1[0] + s2[0], sw[1]), ivec([])))))


# conv(x, K1), conv(x, K2) -> feature slices of conv(x, concat(K1, K2)): one pass over x for both
# kernel sets; same params (one extra id), ungrouped (ingest numbers only those), one dtype, and
# kernels alike but in their output features (a 3x3 and a 5x5 kernel share unpadded params)
for _rd in range(4):
    for _od in range(4):
        def _conv(kernel: Term) -> Term:
            return Term.conv(x, kernel, _rd, _od, e)
        both = _conv(Term.concat(Vec[Term](a1, a2), _rd))
        o1, o2 = vars_("o1 o2", Vec[i64])
        features = Vec[i64](*(o1[i64(k)] + o2[i64(k)] if k == _od else o1[i64(k)] for k in range(4)))
        MERGE.add("same-input-conv-merge", "real",
                  rule(eq(d1).to(_conv(a1)), eq(d2).to(_conv(a2)), *_adjacent("input"), *ranked(s1, a1, 4),
                       eq(s1.remove(i64(_rd))).to(shape(a2).remove(i64(_rd))), eq(o1).to(shape(d1)),
                       eq(o2).to(shape(d2)), eq(da).to(dtype(a1)), eq(da).to(dtype(a2)))
                  .then(*_covers("input", both), union(d1).with_(Term.slice(both, zeros(4), o1, ivec([]))),
                        union(d2).with_(Term.slice(both, Vec[i64](*(o1[i64(k)] if k == _od else i64(0)
                                                                     for k in range(4))), features, ivec([])))))
