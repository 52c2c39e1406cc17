"""Fusion: fused kernels as e-nodes equal to their unfused forms, so extraction chooses kernel
boundaries together with the algebra.

`Term.kernel(body)` computes its class's value in one kernel; the body's leaves (`Body.arg`) read
materialized values. For every op the rules add the kernel whose body is that op over the kernels
of any subset of its operands (absorbed: computed inside, never written) and reads of the others.
A value absorbed by two kernels is computed in both (recompute); read by them it is written once
and read twice (materialize); a kernel that absorbs it may also write it for the other readers
(`kernel_tee`/`tee_out`: multi-output fusion). Extraction prices each honestly and picks per profile.

Layout-only ops (reshape, broadcast, squeeze, expand_dims) are views: never kernels of their own,
a kernel reads through them at the size of their source (costmodel/kernel_cost.py), and they pass
a producer kernel on to their consumers (their bodies grow, they start none).

Guards: a body holds at most MAX_BODY_OPS compute ops (the alternatives per class grow
exponentially with it: 4 gives ~15x a transformer layer's plain nodes, 6 gives ~80x) and at most
one GEMM. GEMMs start kernels and take epilogues; they do not absorb producers, whose work would
repeat per weight tile. (GEMMs run back to back in one kernel, each reading the last from SRAM,
come from a seeded policy, rewrites/kernel_seeds.py, bounded by the profile's `kernel.max_gemms`.)
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Callable

from egglog import String, Vec, eq, i64, rule, set_, union, var, vars_

from rewrites.registry import Family
from rewrites.terms import Body, Term, body_gemms, body_ops

FUSION = Family("fusion")
MAX_BODY_OPS = 6

t = var("t", Term)
X = list(vars_("x0 x1 x2", Term))
B = list(vars_("b0 b1 b2", Body))
N = list(vars_("n0 n1 n2", i64))
G = list(vars_("g0 g1 g2", i64))
op, dt = vars_("op dt", String)
e, e2, k = vars_("e e2 k", i64)
v1, v2, v3, v4 = vars_("v1 v2 v3 v4", Vec[i64])


@dataclass(frozen=True)
class FusableOp:
    """A term constructor and its Body mirror over operands; `absorbs`: operand positions whose
    producer kernel may be computed inside this kernel (the rest are always read)."""

    name: str
    term: Callable[[list], Term]
    body: Callable[[list], Body]
    arity: int
    absorbs: tuple[int, ...]
    gemms: int = 0
    view: bool = False  # layout-only: no kernel of its own, counts no op


FUSABLE = [
    FusableOp("unary", lambda x: Term.unary(op, x[0], e), lambda b: Body.unary(op, b[0], e, t), 1, (0,)),
    FusableOp("binary", lambda x: Term.binary(op, x[0], x[1], e), lambda b: Body.binary(op, b[0], b[1], e, t),
              2, (0, 1)),
    FusableOp("select", lambda x: Term.select(*x), lambda b: Body.select(b[0], b[1], b[2], t), 3, (0, 1, 2)),
    FusableOp("dot", lambda x: Term.dot(x[0], x[1], v1, v2, v3, v4, e),
              lambda b: Body.dot(b[0], b[1], v1, v2, v3, v4, e, t), 2, (), gemms=1),
    FusableOp("conv", lambda x: Term.conv(x[0], x[1], k, e2, e), lambda b: Body.conv(b[0], b[1], k, e2, e, t),
              2, (), gemms=1),
    FusableOp("transpose", lambda x: Term.transpose(x[0], v1), lambda b: Body.transpose(b[0], v1, t), 1, (0,)),
    FusableOp("reshape", lambda x: Term.reshape(x[0], v1, e), lambda b: Body.reshape(b[0], v1, e, t), 1, (0,),
              view=True),
    FusableOp("broadcast", lambda x: Term.broadcast(x[0], v1, v2, e),
              lambda b: Body.broadcast(b[0], v1, v2, e, t), 1, (0,), view=True),
    FusableOp("reduce", lambda x: Term.reduce(op, x[0], v1, e), lambda b: Body.reduce(op, b[0], v1, e, t), 1, (0,)),
    FusableOp("convert", lambda x: Term.convert(x[0], dt, e), lambda b: Body.convert(b[0], dt, e, t), 1, (0,)),
    FusableOp("squeeze", lambda x: Term.squeeze(x[0], v1), lambda b: Body.squeeze(b[0], v1, t), 1, (0,),
              view=True),
    FusableOp("expand_dims", lambda x: Term.expand_dims(x[0], v1), lambda b: Body.expand_dims(b[0], v1, t),
              1, (0,), view=True),
    FusableOp("integer_pow", lambda x: Term.integer_pow(x[0], k), lambda b: Body.integer_pow(b[0], k, t), 1, (0,)),
    FusableOp("softmax", lambda x: Term.softmax(x[0]), lambda b: Body.softmax(b[0], t), 1, (0,)),
    FusableOp("gelu", lambda x: Term.gelu(x[0], k), lambda b: Body.gelu(b[0], k, t), 1, (0,)),
    FusableOp("layer_norm", lambda x: Term.layer_norm(x[0], x[1]), lambda b: Body.layer_norm(b[0], b[1], t),
              2, (0,)),
]


def _fuse_rule(spec: FusableOp, absorbed: tuple[int, ...]):
    """t = op(x...) with the kernels of `absorbed` operands inlined -> t = kernel(op(bodies...))."""
    operands = [B[i] if i in absorbed else Body.arg(X[i]) for i in range(spec.arity)]
    body = spec.body(operands)
    facts = [eq(t).to(spec.term(list(X[:spec.arity])))]
    ops, gemms = i64(0 if spec.view else 1), i64(spec.gemms)
    for i in absorbed:
        facts += [eq(X[i]).to(Term.kernel(B[i])), eq(N[i]).to(body_ops(B[i])), eq(G[i]).to(body_gemms(B[i]))]
        ops, gemms = ops + N[i], gemms + G[i]
    if absorbed:
        facts += [ops <= i64(MAX_BODY_OPS), gemms <= i64(1)]
    # ... and for each inlined operand x_i, the variant that also writes it: t = kernel_tee(body, b_i),
    # x_i = tee_out(body, b_i) (multi-output fusion)
    tees = [a for i in absorbed for a in (union(t).with_(Term.kernel_tee(body, Vec[Body](B[i]))),
                                          union(X[i]).with_(Term.tee_out(body, Vec[Body](B[i]), i64(0))))]
    return rule(*facts).then(union(t).with_(Term.kernel(body)), set_(body_ops(body)).to(ops),
                             set_(body_gemms(body)).to(gemms), *tees)


for _spec in FUSABLE:
    for _size in range(1 if _spec.view else 0, len(_spec.absorbs) + 1):
        for _absorbed in combinations(_spec.absorbs, _size):
            # op(x...) -> kernel(op(inlined or read operands)); the empty subset seeds a kernel per op
            FUSION.add(f"fuse-{_spec.name}", "exact", _fuse_rule(_spec, _absorbed))
