"""Fusion rules: kernels are e-nodes equal to their unfused forms, and extraction decides between
recomputing a value in each consumer's kernel and materializing it, per profile."""
from __future__ import annotations

from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from costmodel.extract import drop_dominated, extract_greedy_dag
from costmodel.ilp import extract_ilp
from costmodel.kernel_cost import (KERNEL_OPS, NODE_EPSILON_S, NodeCoster, gemm_exclusive_groups, static_classes,
                                   tee_requirements)
from costmodel.profile import load_profile, with_overrides
from lowering.emit import emit_program
from lowering.kernels import build_kernel_program
from rewrites.egraph_view import view_egraph
from rewrites.ingest import ingest
from rewrites.schedule import FUSION_ONLY, Budget, saturate
from rule_harness import VALIDATED
from validation.validate import validate
from wire.capture import capture

PROFILE = load_profile("optu-v1")
RNG = np.random.default_rng(0)


def _arrays(*shapes):
    return [RNG.normal(size=s).astype(np.float32) for s in shapes]


PROGRAMS = {
    "gemm_epilogue": (
        lambda x, w, b, r: jax.nn.relu(x @ w + b) * 2.0 + r,
        _arrays((32, 64), (64, 48), (48,), (32, 48)),
    ),
    "softmax_chain": (lambda x, m: jax.nn.softmax(x * 0.125 + m, axis=-1), _arrays((8, 16, 16), (8, 16, 16))),
    "layer_norm": (
        lambda x, g: (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5) * g,
        _arrays((16, 64), (64,)),
    ),
    "exp_two_consumers": (lambda x, a, b: (jnp.exp(x) + a, jnp.exp(x) * b), _arrays((64, 64), (64, 64), (64, 64))),
    "gemm_two_consumers": (lambda x, w: (jnp.tanh(x @ w), (x @ w) * 3.0), _arrays((16, 32), (32, 16))),
}


def fused_egraph(program):
    loaded = ingest(program)
    report = saturate(loaded.egraph, FUSION_ONLY, Budget())
    return loaded, report, view_egraph(loaded.egraph)


def extract_kernels(program, profile, method="ilp"):
    """The fusion stage alone: kernels for `program` as written, chosen under `profile`."""
    loaded, _, view = fused_egraph(program)
    coster = NodeCoster(view, loaded.params, profile, static_classes(view, program))
    cost = {n.id: coster(n) for c in view.classes.values() for n in c.nodes}
    exclusive, requires = gemm_exclusive_groups(view), tee_requirements(view)
    candidates = drop_dominated(view, cost, exclusive, requires)
    if method == "ilp":
        extraction = extract_ilp(candidates, lambda n: cost[n.id], time_limit_s=20, exclusive=exclusive,
                                 requires=requires)
    else:
        extraction = extract_greedy_dag(candidates, lambda n: cost[n.id], exclusive, requires)
    emitted = emit_program(view, extraction.choice, loaded.params, program)
    return extraction, emitted, build_kernel_program(emitted.program, profile, groups=emitted.groups)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_kernel_node_computes_its_unfused_value_bit_for_bit(name):
    fn, args = PROGRAMS[name]
    program = capture(fn, *args)
    loaded, report, view = fused_egraph(program)
    kernels = [n for c in view.classes.values() for n in c.nodes if n.op in KERNEL_OPS]
    assert kernels and report.rules_fired  # the rules fired and made fused alternatives

    # Prefer fused nodes everywhere (tee_out only with its kernel): every kind of kernel is emitted.
    prefer = {"kernel": 0.5, "kernel_tee": 0.2, "tee_out": 0.1}
    extraction = extract_ilp(view, lambda n: prefer.get(n.op, 1.0), exclusive=gemm_exclusive_groups(view),
                             requires=tee_requirements(view))
    chosen = Counter(node.op for node in extraction.choice.values())
    assert chosen["kernel"] + chosen["kernel_tee"] > 0
    fused = emit_program(view, extraction.choice, loaded.params, program).program
    result = validate(program, fused, "exact")
    assert result["status"] in VALIDATED, result


def test_exp_feeding_two_consumers_is_recomputed_when_the_vector_unit_is_cheap_and_materialized_when_not():
    fn, args = PROGRAMS["exp_two_consumers"]
    program = capture(fn, *args)
    cheap = with_overrides(PROFILE, {"vector.op_weights.exp": 1})
    dear = with_overrides(PROFILE, {"vector.op_weights.exp": 4000, "vector.flops_per_s": 1e11})

    def exps(profile):
        _, emitted, kernels = extract_kernels(program, profile)
        return sum(e["op"] == "exp" for e in emitted.program["eqns"]), kernels

    recomputed, cheap_kernels = exps(cheap)
    materialized, dear_kernels = exps(dear)
    assert recomputed == 2  # each consumer's kernel computes exp(x) itself: no HBM round trip
    assert materialized == 1  # computed once, written, read by the other consumer
    written = {b["name"] for k in dear_kernels.kernels for b in k.buffers if b["role"] == "output"}
    exp_out = next(e["out"][0]["name"] for e in _emitted(program, dear).program["eqns"] if e["op"] == "exp")
    assert exp_out in written


def _emitted(program, profile):
    return extract_kernels(program, profile)[1]


@pytest.mark.parametrize("profile", [
    PROFILE,
    # GEMMs nearly free, memory very slow: recomputing x @ w in both consumers would look cheaper
    with_overrides(PROFILE, {"gemm.weight_load_s": 1e-12, "memory.hbm_bw_bytes_per_s": 1e6}),
])
def test_a_gemm_feeding_two_consumers_is_never_recomputed(profile):
    fn, args = PROGRAMS["gemm_two_consumers"]
    program = capture(fn, *args)
    for method in ("ilp", "greedy"):
        _, emitted, kernels = extract_kernels(program, profile, method)
        assert sum(e["op"] == "dot_general" for e in emitted.program["eqns"]) == 1
        assert validate(program, emitted.program, "exact")["status"] in VALIDATED
        assert sum(k.kind in ("optical_gemm", "fused") and "dot_general" in k.ops for k in kernels.kernels) == 1


def test_extraction_price_of_the_chosen_kernels_matches_the_kernel_program_estimate():
    fn, args = PROGRAMS["gemm_epilogue"]
    program = capture(fn, *args)
    extraction, emitted, kernels = extract_kernels(program, PROFILE)
    # equal up to the tie-breaking epsilon extraction adds per op
    assert abs(kernels.total.time_s - extraction.cost) <= len(emitted.program["eqns"]) * NODE_EPSILON_S * (1 + 1e-6)
    assert len(kernels.kernels) == 1  # dot, bias, relu, scale and residual in one kernel


def test_body_ops_alike_share_one_price_which_is_each_ones_own():
    """Pricing keeps one price per body op kind (op, attrs, shapes): every body op of every kernel
    node is priced as it would be alone, and alike ops in different classes share the entry."""
    program = capture(lambda x, y, z: (jnp.tanh(x) + jnp.tanh(y), jnp.tanh(z) * 2.0),
                      *_arrays((16, 64), (16, 64), (32, 64)))
    loaded, _, view = fused_egraph(program)
    coster = NodeCoster(view, loaded.params, PROFILE, static_classes(view, program))
    kernels = [n for c in view.classes.values() for n in c.nodes if n.op in KERNEL_OPS]
    assert kernels
    for node in kernels:
        coster(node)
    bodies = {b for node in kernels for b in node.body_ops}
    for body in bodies:
        assert coster.body_cost(body) == coster.op_cost(body, [o.eclass for o in body.operands])[1], body
    tanhs = {coster.body_cost(b).time_s for b in bodies if b.attrs[:1] == ("tanh",)}
    assert len(tanhs) == 2  # (16, 64) and (32, 64): two prices, one of them shared by tanh(x) and tanh(y)
    assert len(coster.op_costs) < len(bodies)
