"""Work over a concatenation, part by part: elementwise ops, selects and products whose free axis
is the joined one compute each part separately (the other operands sliced alike). Each output
element is computed by the same ops either way, so these rules are exact; a product's accumulation
order may change with its width, so splitting one is real. They carry a split that
the program makes (keys joined to a cache, stacked inputs) through to where a consumer can use it,
such as the online softmax's split over key parts."""
from __future__ import annotations

from egglog import String, Vec, eq, i64, ne, rewrite, rule, union, var, vars_

from rewrites.analysis import MAX_RANK, iota, typed, zeros
from rewrites.registry import Family
from rewrites.terms import UNARY_OPS, Term, dtype, shape
from wire.primitives import names

CONCAT_SPLIT = Family("concat-split")

x, y, c, w, p, outer, a = vars_("x y c w p outer a", Term)
parts = var("parts", Vec[Term])
op, d = vars_("op d", String)
e, dim = vars_("e dim", i64)
sx, sw, so, dims = vars_("sx sw so dims", Vec[i64])
two_parts = [eq(parts.length()).to(i64(2)), eq(x).to(parts[i64(0)]), eq(y).to(parts[i64(1)])]
# Unary ops whose result dtype is not their operand's are typed by ingest only: a part's would be untyped.
_TYPED_UNARY = [ne(op).to(String(name)) for name in sorted(UNARY_OPS - names(dtype_rule="operands"))]


def _join(first: Term, second: Term, axis) -> Term:
    return Term.concat(Vec[Term](first, second), axis)


# op(concat(x, y)) -> concat(op(x), op(y))
CONCAT_SPLIT.add("unary-of-concat", "exact",
                 rewrite(Term.unary(op, Term.concat(parts, dim), e))
                 .to(_join(Term.unary(op, x, e), Term.unary(op, y, e), dim), *two_parts, *_TYPED_UNARY))
# op(concat(x, y), c) -> concat(op(x, c), op(y, c)) for a rank-0 c, and the same with c first
CONCAT_SPLIT.add("binary-of-concat", "exact",
                 rewrite(Term.binary(op, Term.concat(parts, dim), c, e))
                 .to(_join(Term.binary(op, x, c, e), Term.binary(op, y, c, e), dim), *two_parts,
                     eq(shape(c).length()).to(i64(0))),
                 rewrite(Term.binary(op, c, Term.concat(parts, dim), e))
                 .to(_join(Term.binary(op, c, x, e), Term.binary(op, c, y, e), dim), *two_parts,
                     eq(shape(c).length()).to(i64(0))))

# The joined axis is a variable (`dim`); the rank is enumerated, since the offset vector needs it.
for n in range(1, MAX_RANK + 1):
    both = Term.concat(parts, dim)
    # The other operand's blocks that line up with x and y (unit strides).
    offset = zeros(n).set(dim, sx[dim])
    first, second = Term.slice(w, zeros(n), sx, Vec[i64]()), Term.slice(w, offset, sw, Vec[i64]())
    first_p, second_p = Term.slice(p, zeros(n), sx, Vec[i64]()), Term.slice(p, offset, sw, Vec[i64]())
    aligned = [*two_parts, eq(sx).to(shape(x)), eq(sx.length()).to(i64(n)), eq(sw).to(shape(w)),
               eq(sw).to(shape(both))]
    # op(concat(x, y), w) -> concat(op(x, w[:|x|]), op(y, w[|x|:])) for a w of the concat's shape
    CONCAT_SPLIT.add("binary-of-concat", "exact",
                     rewrite(Term.binary(op, both, w, e))
                     .to(_join(Term.binary(op, x, first, e), Term.binary(op, y, second, e), dim), *aligned),
                     rewrite(Term.binary(op, w, both, e))
                     .to(_join(Term.binary(op, first, x, e), Term.binary(op, second, y, e), dim), *aligned))
    # select(p, w, concat(x, y)) -> concat(select(p[:|x|], w[:|x|], x), ...) (jnp.where(mask, s, fill)),
    # and with the concat as the false case; p has the concat's shape
    CONCAT_SPLIT.add("select-of-concat", "exact",
                     rewrite(Term.select(p, w, both))
                     .to(_join(Term.select(first_p, first, x), Term.select(second_p, second, y), dim),
                         *aligned, eq(shape(p)).to(sw)),
                     rewrite(Term.select(p, both, w))
                     .to(_join(Term.select(first_p, x, first), Term.select(second_p, y, second), dim),
                         *aligned, eq(shape(p)).to(sw)))

# Views that keep the joined axis whole carry the split through (GQA's jnp.repeat of K and V is a
# broadcast to a new axis, then a reshape merging it with the heads).
# broadcast(concat(x, y), s, dims) -> concat(broadcast(x, s with |x| at dims[a]), ...) along dims[a]:
# the joined axis is an operand axis, so it maps to one result axis of its full size
CONCAT_SPLIT.add("broadcast-of-concat", "exact",
                 rewrite(Term.broadcast(Term.concat(parts, dim), so, dims, e))
                 .to(_join(Term.broadcast(x, so.set(dims[dim], sx[dim]), dims, e),
                           Term.broadcast(y, so.set(dims[dim], sw[dim]), dims, e), dims[dim]),
                     *two_parts, eq(sx).to(shape(x)), eq(sw).to(shape(y))))
for n in range(1, MAX_RANK + 1):
    for axis in range(n):
        both = Term.concat(parts, i64(axis))
        sized = [*two_parts, eq(sx).to(shape(x)), eq(sx.length()).to(i64(n)), eq(sw).to(shape(y))]
        # reshape(concat(x, y)) -> concat(reshape(x), reshape(y)) when it only merges or splits the
        # axes before the joined one (one more or one fewer of them): in row-major order each leading
        # index still holds the same run of joined-axis rows
        for rank in (n - 1, n + 1):
            joined = rank - (n - axis)  # the joined axis's place in the result
            if not 1 <= rank <= MAX_RANK or joined < 0 or (joined == 0) != (axis == 0):
                continue
            trailing = [eq(so[i64(joined + k)]).to(sx[i64(axis + k)]) for k in range(1, n - axis)]
            trailing.append(eq(so[i64(joined)]).to(sx[i64(axis)] + sw[i64(axis)]))
            CONCAT_SPLIT.add("reshape-of-concat", "exact",
                             rewrite(Term.reshape(both, so, e))
                             .to(_join(Term.reshape(x, so.set(i64(joined), sx[i64(axis)]), e),
                                       Term.reshape(y, so.set(i64(joined), sw[i64(axis)]), e), i64(joined)),
                                 *sized, eq(so.length()).to(i64(rank)), *trailing))

# Batched products only (scores over heads): an unbatched x @ concat(W1, W2) is what the same-input
# merge builds, and splitting it back only re-derives the classes it came from, at a cost to every
# iteration of a merged recurrent model.
for batch in range(1, MAX_RANK - 1):
    for free in (batch, batch + 1):  # the rhs's one free axis, beside its one contracted axis
        # a @ concat(x, y) along the rhs's free axis -> concat(a @ x, a @ y) along the result's last
        # axis. Batch axes lead both operands; the lhs has one free axis, the rhs one contracted and one free.
        out_rank_last = i64(batch + 1)  # the lhs has one free axis (the queries) before its contracted one
        batched, contracted = iota(batch), Vec[i64](i64(2 * batch + 1 - free))
        lc = Vec[i64](i64(batch + 1))
        # the constant axes sit in the pattern, not in guards: matched there, a product that is not
        # one costs nothing (as guards, every product in the e-graph was joined with them)
        product = Term.dot(a, Term.concat(parts, i64(free)), lc, contracted, batched, batched, e)
        left, right = (Term.dot(a, part, lc, contracted, batched, batched, e) for part in (x, y))
        CONCAT_SPLIT.add(
            "dot-of-concat", "real",  # a wider product may accumulate in another order
            rule(eq(outer).to(product), *two_parts, eq(sx).to(shape(x)), eq(sx.length()).to(i64(batch + 2)),
                 eq(sw).to(shape(y)), eq(so).to(shape(outer)), eq(d).to(dtype(outer)))
            .then(union(outer).with_(_join(left, right, out_rank_last)),
                  *typed(left, so.set(out_rank_last, sx[i64(free)]), d),
                  *typed(right, so.set(out_rank_last, sw[i64(free)]), d)))
