"""The shape and dtype analysis: a term a rule builds takes its shape and dtype from its operands by
JAX's own shape rules, so a rule states only its identity. Ingest types every term it loads from
the program's avals; these rules type the forms rules build (elementwise ops, literals, matmuls
on a matrix and batched ones, transposes, broadcasts, reshapes, conversions, static slices,
two-part concatenations, convolutions beside a typed one), and
agree with ingest wherever both apply (a disagreement is a union of two types: egglog panics)."""
from __future__ import annotations

from egglog import String, StringLike, Vec, eq, f64, function, i64, i64Like, ne, rule, ruleset, set_, var, vars_

from rewrites.analysis import MAX_RANK, ranked, typed
from rewrites.params import NO_PARAMS
from rewrites.terms import UNARY_OPS, Term, dtype, ivec, shape
from wire.primitives import names


@function
def result_dtype(op: StringLike, params: i64Like, lhs: StringLike, rhs: StringLike) -> String:
    """The result dtype of `op` with params `params` on operands of these dtypes, learned from the
    program's own equations (a dot's preferred_element_type, mul's out_dtype live in the params
    table, which egglog cannot read): a function of the four, as JAX's dtype rules are."""


@function
def first_part_shape(parts: Vec[Term]) -> Vec[i64]:
    """The shape of a two-part concatenation's first part: a step of its shape rule (a query that
    binds both parts of a container at once joins every pair of terms)."""


t, x, a, b, p, u, w1, w2 = vars_("t x a b p u w1 w2", Term)
op, d, nd, da, db = vars_("op d nd da db", String)
e, k, rd, od = vars_("e k rd od", i64)
value = var("value", f64)
parts = var("parts", Vec[Term])
sa, sb, perm, sizes, dims, lc, rc, lb, rb, lo, hi, st = vars_("sa sb perm sizes dims lc rc lb rb lo hi st", Vec[i64])
NONE = i64(NO_PARAMS)
# Ops whose result does not have the operands' dtype (abs of a complex, comparisons): typed by
# ingest, and a binary one by `result_dtype` too.
_OTHER_DTYPE_UNARY = UNARY_OPS - names(dtype_rule="operands")
_OTHER_DTYPE_BINARY = names(term="binary") - names(dtype_rule="operands")


def _not_in(variable, excluded) -> list:
    return [ne(variable).to(String(name)) for name in sorted(excluded)]


def _broadcast_dim(m, n):
    """Of two broadcast-compatible sizes (equal, or one of them 1), the result's: the larger, but
    0 where either is 0 ((0,) + (1,) is empty)."""
    return m.max(n) * m.min(n).min(i64(1))


def _dot(lhs_contract, rhs_contract, batch) -> Term:
    return Term.dot(a, b, ivec(lhs_contract), ivec(rhs_contract), ivec(batch), ivec(batch), e)


SHAPE_RULES = [
    # elementwise, one operand
    rule(eq(t).to(Term.unary(op, x, e)), eq(sa).to(shape(x)), eq(d).to(dtype(x)), *_not_in(op, _OTHER_DTYPE_UNARY))
    .then(*typed(t, sa, d)),
    rule(eq(t).to(Term.integer_pow(x, k)), eq(sa).to(shape(x)), eq(d).to(dtype(x))).then(*typed(t, sa, d)),
    rule(eq(t).to(Term.select(p, a, b)), eq(sa).to(shape(a)), eq(sa).to(shape(b)), eq(d).to(dtype(a)))
    .then(*typed(t, sa, d)),
    rule(eq(t).to(Term.flit(value, d))).then(*typed(t, Vec[i64](), d)),
    # elementwise, two operands: a rank-0 operand broadcasts, and a size-1 dim takes the other's size
    rule(eq(t).to(Term.binary(op, a, b, e)), *ranked(sa, a, 0), eq(sb).to(shape(b))).then(set_(shape(t)).to(sb)),
    rule(eq(t).to(Term.binary(op, a, b, e)), *ranked(sb, b, 0), eq(sa).to(shape(a))).then(set_(shape(t)).to(sa)),
    *(rule(eq(t).to(Term.binary(op, a, b, e)), *ranked(sa, a, n), *ranked(sb, b, n))
      .then(set_(shape(t)).to(Vec[i64](*(_broadcast_dim(sa[i64(i)], sb[i64(i)]) for i in range(n)))))
      for n in range(1, MAX_RANK + 1)),
    rule(eq(t).to(Term.binary(op, a, b, NONE)), eq(d).to(dtype(a)), eq(d).to(dtype(b)),
         *_not_in(op, _OTHER_DTYPE_BINARY))
    .then(set_(dtype(t)).to(d)),
    # index maps
    *(rule(eq(t).to(Term.transpose(x, perm)), eq(sa).to(shape(x)), eq(sa.length()).to(i64(n)), eq(d).to(dtype(x)))
      .then(*typed(t, Vec[i64](*(sa[perm[i64(i)]] for i in range(n))), d)) for n in range(1, MAX_RANK + 1)),
    rule(eq(t).to(Term.broadcast(x, sizes, dims, e)), eq(d).to(dtype(x))).then(*typed(t, sizes, d)),
    rule(eq(t).to(Term.reshape(x, sizes, e)), eq(d).to(dtype(x))).then(*typed(t, sizes, d)),
    rule(eq(t).to(Term.convert(x, nd, e)), eq(sa).to(shape(x))).then(*typed(t, sa, nd)),
    # a static slice: (limit - start) / stride elements per dim, rounded up; no strides is unit strides
    *(rule(eq(t).to(Term.slice(x, lo, hi, st)), eq(st.length()).to(i64(0)), eq(lo.length()).to(i64(n)),
           eq(d).to(dtype(x)))
      .then(*typed(t, Vec[i64](*(hi[i64(i)] - lo[i64(i)] for i in range(n))), d)) for n in range(1, MAX_RANK + 1)),
    *(rule(eq(t).to(Term.slice(x, lo, hi, st)), eq(st.length()).to(i64(n)), eq(lo.length()).to(i64(n)),
           eq(d).to(dtype(x)))
      .then(*typed(t, Vec[i64](*((hi[i64(i)] - lo[i64(i)] + st[i64(i)] - 1) / st[i64(i)] for i in range(n))), d))
      for n in range(1, MAX_RANK + 1)),
    # [..., k] @ [k, n] -> [..., n]; [b, m, k] @ [b, k, n] -> [b, m, n]
    *(rule(eq(t).to(_dot([n - 1], [0], [])), *ranked(sa, a, n), *ranked(sb, b, 2))
      .then(set_(shape(t)).to(Vec[i64](*(sa[i64(i)] for i in range(n - 1)), sb[1]))) for n in range(1, MAX_RANK + 1)),
    rule(eq(t).to(_dot([2], [1], [0])), *ranked(sa, a, 3), *ranked(sb, b, 3))
    .then(set_(shape(t)).to(Vec[i64](sa[0], sa[1], sb[2]))),
    # result dtypes that depend on params: learned from typed terms, given to new ones
    rule(eq(t).to(Term.dot(a, b, lc, rc, lb, rb, e)), eq(d).to(dtype(t)), eq(da).to(dtype(a)), eq(db).to(dtype(b)))
    .then(set_(result_dtype("dot", e, da, db)).to(d)),
    rule(eq(t).to(Term.dot(a, b, lc, rc, lb, rb, e)), eq(d).to(result_dtype("dot", e, dtype(a), dtype(b))))
    .then(set_(dtype(t)).to(d)),
    rule(eq(t).to(Term.binary(op, a, b, e)), eq(d).to(dtype(t)), eq(da).to(dtype(a)), eq(db).to(dtype(b)))
    .then(set_(result_dtype(op, e, da, db)).to(d)),
    rule(eq(t).to(Term.binary(op, a, b, e)), eq(d).to(result_dtype(op, e, dtype(a), dtype(b))))
    .then(set_(dtype(t)).to(d)),
    # two parts joined along `k`, in two steps (see `first_part_shape`)
    rule(eq(t).to(Term.concat(parts, k)), eq(parts.length()).to(i64(2)), eq(a).to(parts[i64(0)]),
         eq(sa).to(shape(a)), eq(d).to(dtype(a)))
    .then(set_(first_part_shape(parts)).to(sa), set_(dtype(t)).to(d)),
    rule(eq(t).to(Term.concat(parts, k)), eq(sa).to(first_part_shape(parts)), eq(b).to(parts[i64(1)]),
         eq(sb).to(shape(b)), eq(sa.length()).to(sb.length()))
    .then(set_(shape(t)).to(sa.set(k, sa[k] + sb[k]))),
    # a conv over the input and params of a typed one, with a kernel of the same dims but the output
    # features (rd), differs from it only in the output features (od), which number its kernel's
    rule(eq(t).to(Term.conv(x, w1, rd, od, e)), eq(u).to(Term.conv(x, w2, rd, od, e)), eq(sa).to(shape(u)),
         eq(d).to(dtype(u)), eq(sb).to(shape(w1)), eq(sb.remove(rd)).to(shape(w2).remove(rd)),
         eq(dtype(w1)).to(dtype(w2)))
    .then(*typed(t, sa.set(od, sb[rd]), d)),
]

SHAPES = ruleset(*SHAPE_RULES, name="shapes")
