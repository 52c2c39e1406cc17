"""Algebraic identities of elementwise arithmetic: units, involutions, inverses, commutativity,
associativity, distributivity, constant folding and strength reduction."""
from __future__ import annotations

from egglog import String, eq, f64, i64, ne, relation, rewrite, rule, set_, union, var, vars_

from rewrites.params import NO_PARAMS
from rewrites.registry import Family
from rewrites.terms import Term, dtype, float_bits, literal_value, shape
from wire.primitives import PRIMITIVES

ALGEBRA = Family("algebra")

x = var("x", Term)
a, b, c = vars_("a b c", Term)
d, dt = vars_("d dt", String)
e, e2 = vars_("e e2", i64)
va, vb = vars_("va vb", f64)
NONE = i64(NO_PARAMS)
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def binary(op: str, lhs: Term, rhs: Term, extra=NONE) -> Term:
    return Term.binary(op, lhs, rhs, extra)


def neg(x: Term) -> Term:
    return Term.unary("neg", x, NONE)


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


# --- Commutativity and associativity: throttled by back_off, or they enumerate every bracketing.
ALGEBRA.add("add-comm", "exact", rewrite(binary("add", a, b, e)).to(binary("add", b, a, e)), throttled=True)
ALGEBRA.add("mul-comm", "exact", rewrite(binary("mul", a, b, e)).to(binary("mul", b, a, e)), throttled=True)
for _op in ("add", "mul"):
    # (a+b)+c -> a+(b+c); guard: b and c of one shape (no implicit broadcast)
    ALGEBRA.add(f"{_op}-assoc", "real", rewrite(binary(_op, binary(_op, a, b, e), c, e))
                .to(binary(_op, a, binary(_op, b, c, e), e), eq(shape(b)).to(shape(c))), throttled=True)

# --- Distributivity, both ways: throttled by back_off too, as each undoes the other and, with
# commutativity, they multiply a sum of products' forms (a decode step's grew 2.5M e-nodes in a pass).
# a*b + a*c -> a*(b+c); guard: b, c of one shape
ALGEBRA.add("factor-mul-add", "real", rewrite(binary("add", binary("mul", a, b, e), binary("mul", a, c, e2)))
            .to(binary("mul", a, binary("add", b, c)), eq(shape(b)).to(shape(c))), throttled=True)
# a*(b+c) -> a*b + a*c; guard: all of one shape
ALGEBRA.add("expand-mul-add", "real", rewrite(binary("mul", a, binary("add", b, c, e2), e))
            .to(binary("add", binary("mul", a, b, e), binary("mul", a, c, e)), eq(shape(a)).to(shape(b)),
                eq(shape(a)).to(shape(c))), throttled=True)

# --- Scalar constant folding in egglog's f64, for the binary primitives it has the arithmetic of.
# Where IEEE fixes the primitive's result (the table's fp_exact), the double result rounded once to
# float32 or float64 is the correctly rounded result (a double has more than 2p+2 bits for p = 24):
# the fold is exact. Any other fold (pow) is an identity of real numbers only.
# Analyses: a computed literal knows its value, and an ingested nonzero literal is the same class
# as the computed literal of its value (egglog's f64 equates -0.0 and 0.0, so zeros stay apart).
ALGEBRA.add("literal-value-of-folded", "exact", rule(eq(a).to(Term.flit(va, d))).then(set_(literal_value(a)).to(va)))
ALGEBRA.add("literal-as-value", "exact",
            rule(eq(a).to(Term.lit(e, d)), eq(va).to(literal_value(a)), ne(va).to(f64(0.0)))
            .then(union(a).with_(Term.flit(va, d))))
# op -> (its f64 arithmetic, the operands it is defined for: no division by zero, pow of a positive base)
_F64_ARITHMETIC = {"add": (va + vb, []), "sub": (va - vb, []), "mul": (va * vb, []),
                   "div": (va / vb, [ne(vb).to(f64(0.0))]), "pow": (va ** vb, [va > f64(0.0)])}
for _op, (_fold, _domain) in _F64_ARITHMETIC.items():
    for _dtype in ("float32", "float64"):
        # lit(a) op lit(b) -> lit(a op b); guard: a nonzero result (the sign of a zero is lost)
        ALGEBRA.add(f"fold-{_op}", "exact" if PRIMITIVES[_op].fp_exact else "real",
                    rewrite(binary(_op, a, b, e)).to(Term.flit(_fold, d), eq(va).to(literal_value(a)),
                                                     eq(vb).to(literal_value(b)), eq(d).to(dtype(a)),
                                                     eq(d).to(String(_dtype)), ne(_fold).to(f64(0.0)), *_domain))
for _dtype in FLOAT_DTYPES:
    # x / c -> x * (1/c); guards: c != 0 and 1/c != 0 (zeros lose their sign as f64 values),
    # and a float dtype (integer division truncates). Real: 1/c is rounded.
    ALGEBRA.add("div-by-constant", "real", rewrite(binary("div", x, b, e))
                .to(binary("mul", x, Term.flit(f64(1.0) / vb, d)), eq(vb).to(literal_value(b)), ne(vb).to(f64(0.0)),
                    ne(f64(1.0) / vb).to(f64(0.0)), eq(d).to(dtype(b)), eq(d).to(String(_dtype))))

# --- Signs, powers, roots, selects.
# (-a)*b -> -(a*b); real: equal values, but the sign of a nan result may differ
ALGEBRA.add("neg-mul", "real", rewrite(binary("mul", neg(a), b, e)).to(neg(binary("mul", a, b, e))))
# a - b -> a + (-b): IEEE subtraction is defined that way
ALGEBRA.add("sub-to-add-neg", "exact", rewrite(binary("sub", a, b, e)).to(binary("add", a, neg(b))))
ALGEBRA.add("pow-two", "exact", rewrite(Term.integer_pow(x, 2)).to(binary("mul", x, x)))  # x**2 -> x*x
ALGEBRA.add("square-to-mul", "exact", rewrite(Term.unary("square", x, e)).to(binary("mul", x, x)))  # x² -> x*x
# rsqrt(x) -> 1/sqrt(x); real: two roundings instead of one
ALGEBRA.add("rsqrt-to-div-sqrt", "real", rewrite(Term.unary("rsqrt", x, e))
            .to(binary("div", Term.flit(f64(1.0), dt), Term.unary("sqrt", x, e)), eq(dt).to(dtype(x))))
# sqrt(x*x) -> abs(x); real: x*x may overflow
ALGEBRA.add("sqrt-of-square", "real",
            rewrite(Term.unary("sqrt", binary("mul", x, x, e2), e)).to(Term.unary("abs", x, NONE)))
ALGEBRA.add("select-same", "exact", rewrite(Term.select(a, x, x)).to(x))  # select(p, x, x) -> x
