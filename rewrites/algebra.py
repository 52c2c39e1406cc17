"""Algebraic identities of elementwise arithmetic: units, involutions, inverse functions."""
from __future__ import annotations

from egglog import String, i64, relation, rewrite, rule, var, vars_

from rewrites.registry import Family
from rewrites.terms import Term, float_bits

ALGEBRA = Family("algebra")

x = var("x", Term)
d = var("d", String)
e, e2 = vars_("e e2", i64)


def lit(value: float) -> Term:
    return Term.lit(i64(float_bits(value)), d)


# x > 0 everywhere: the guard that makes exp(log x) = x true.
positive = relation("positive", Term)


ALGEBRA.add("mul-one", "exact",
            rewrite(Term.binary("mul", x, lit(1.0), e)).to(x),  # x*1 -> x
            rewrite(Term.binary("mul", lit(1.0), x, e)).to(x))  # 1*x -> x
ALGEBRA.add("div-one", "exact", rewrite(Term.binary("div", x, lit(1.0), e)).to(x))  # x/1 -> x
ALGEBRA.add("sub-zero", "exact", rewrite(Term.binary("sub", x, lit(0.0), e)).to(x))  # x-0 -> x
# Real, not exact: -0.0 + 0.0 is +0.0, so x+0 -> x flips the sign of a negative zero.
ALGEBRA.add("add-zero", "real",
            rewrite(Term.binary("add", x, lit(0.0), e)).to(x),  # x+0 -> x
            rewrite(Term.binary("add", lit(0.0), x, e)).to(x))  # 0+x -> x
ALGEBRA.add("neg-neg", "exact", rewrite(Term.unary("neg", Term.unary("neg", x, e), e2)).to(x))  # --x -> x
ALGEBRA.add("pow-one", "exact", rewrite(Term.integer_pow(x, 1)).to(x))  # x**1 -> x
# Real: exp may overflow to inf for large x, where log(inf) is inf, not x.
ALGEBRA.add("log-exp", "real", rewrite(Term.unary("log", Term.unary("exp", x, e), e2)).to(x))  # log(exp x) -> x
# An analysis, not a rewrite: exp(x) > 0.
ALGEBRA.add("positive-exp", "exact", rule(Term.unary("exp", x, e)).then(positive(Term.unary("exp", x, e))))
# Guarded: for x <= 0, log(x) is nan or -inf and exp(log x) is not x.
ALGEBRA.add("exp-log", "real",
            rewrite(Term.unary("exp", Term.unary("log", x, e), e2)).to(x, positive(x)))  # exp(log x) -> x
