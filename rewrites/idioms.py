"""Idioms: softmax, GELU (tanh and erf forms), layer norm and attention recognized as single named
ops, with their decompositions kept in the same e-class as equal alternatives. The patterns are
the decompositions JAX 0.10 emits (jax.nn.softmax, jax.nn.gelu) and the usual layer norm."""
from __future__ import annotations

from egglog import String, Vec, eq, f64, i64, rewrite, rule, union, var, vars_

from rewrites.analysis import iota
from rewrites.registry import Family
from rewrites.terms import Term, float_bits, literal_value, shape

IDIOMS = Family("idioms")

x, sm, q, kt, v, scale, eps, n_lit, outer = vars_("x sm q kt v scale eps n_lit outer", Term)
s, s1, s2 = vars_("s s1 s2", Vec[i64])
e1, e2, e3, e4, e5, e6, e7, e8, e9, e10 = vars_("e1 e2 e3 e4 e5 e6 e7 e8 e9 e10", i64)
d = var("d", String)


def lit(value: float) -> Term:
    return Term.lit(i64(float_bits(value)), d)


def last_axis(rank: int):
    return Vec[i64](i64(rank - 1))


for rank in range(1, 5):
    keep = iota(rank - 1)
    row_max = Term.broadcast(
        Term.binary("max", lit(float("-inf")), Term.reduce("reduce_max", x, last_axis(rank), e1), e2), s1, keep, e3
    )
    numerator = Term.unary("exp", Term.binary("sub", x, row_max, e4), e5)
    # exp(x - max) / sum(exp(x - max)) -> softmax(x), as jax.nn.softmax emits it (last axis). No
    # rank guard needed: broadcasting the rank-1 row max with dims iota(rank - 1) types only when
    # x has rank `rank`. Guards must not look up functions of x: egglog 13.2 then binds x from
    # that table without joining its other occurrences (two softmaxes of equal shape were merged;
    # tests/rewrites/test_twins.py).
    IDIOMS.add("softmax-idiom", "exact",
               rewrite(Term.binary("div", numerator, Term.broadcast(
                   Term.reduce("reduce_sum", numerator, last_axis(rank), e6), s2, keep, e7), e8))
               .to(Term.softmax(x)))

    centered = Term.binary("sub", x, Term.binary("div", Term.broadcast(
        Term.reduce("reduce_sum", x, last_axis(rank), e1), s1, keep, e2), n_lit, e3), e4)
    variance = Term.binary("div", Term.broadcast(Term.reduce("reduce_sum", Term.integer_pow(centered, 2),
                                                             last_axis(rank), e5), s1, keep, e6), n_lit, e7)
    # (x - mean) * rsqrt(var + eps) -> layer_norm(x, eps); guard: n is the size of the last axis
    # (read from the shape of `outer`, which is x's: see the softmax note on lookups of x)
    IDIOMS.add("layer-norm-idiom", "exact",
               rule(eq(outer).to(Term.binary("mul", centered, Term.unary("rsqrt", Term.binary("add", variance, eps, e8),
                                                                         e9), e10)),
                    eq(s).to(shape(outer)), eq(s.length()).to(i64(rank)),
                    eq(literal_value(n_lit)).to(f64.from_i64(s[i64(rank - 1)])))
               .then(union(outer).with_(Term.layer_norm(x, eps))))

# x * (0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))) -> gelu(x, approximate), jax.nn.gelu's form
inner = Term.binary("mul", lit(0.7978845834732056), Term.binary(
    "add", x, Term.binary("mul", lit(0.044714998453855515), Term.integer_pow(x, 3), e1), e2), e3)
IDIOMS.add("gelu-tanh-idiom", "exact",
           rewrite(Term.binary("mul", x, Term.binary("mul", lit(0.5), Term.binary(
               "add", lit(1.0), Term.unary("tanh", inner, e4), e5), e6), e7))
           .to(Term.gelu(x, 1)))
# (0.5 x) * erfc(-x / sqrt 2) -> gelu(x, exact), jax.nn.gelu(approximate=False)'s form
IDIOMS.add("gelu-erf-idiom", "exact",
           rewrite(Term.binary("mul", Term.binary("mul", lit(0.5), x, e1), Term.unary(
               "erfc", Term.binary("mul", Term.unary("neg", x, e2), lit(0.7071067690849304), e3), e4), e5))
           .to(Term.gelu(x, 0)))


def _bmm(a: Term, b: Term, extra) -> Term:
    """[batch, heads, m, k] @ [batch, heads, k, n]."""
    return Term.dot(a, b, Vec[i64](i64(3)), Vec[i64](i64(2)), iota(2), iota(2), extra)


# softmax(q @ kt / scale) @ v -> attention(q, kt, v, scale)
IDIOMS.add("attention-idiom", "exact",
           rule(eq(outer).to(_bmm(sm, v, e1)), eq(sm).to(Term.softmax(Term.binary("div", _bmm(q, kt, e2), scale, e3))),
                eq(s).to(shape(q)), eq(s.length()).to(i64(4)), eq(s1).to(shape(scale)), eq(s1.length()).to(i64(0)))
           .then(union(outer).with_(Term.attention(q, kt, v, scale))))
