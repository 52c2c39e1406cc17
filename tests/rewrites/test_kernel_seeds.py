"""Seeded kernels: the conventional greedy fusion's kernels as e-nodes, found again by the warm
start, bit-identical to their unfused form and priced as the kernel program prices them."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from bench.models.zoo import WEIGHT_ARGNUMS, ZOO
from costmodel.extract import drop_dominated
from costmodel.ilp import extract_ilp
from costmodel.kernel_cost import (KERNEL_OPS, NODE_EPSILON_S, NodeCoster, gemm_exclusive_groups, static_classes,
                                   tee_requirements)
from costmodel.profile import load_profile, with_overrides
from costmodel.warm_start import seeded_extraction
from lowering.emit import emit_program
from lowering.kernels import CONVENTIONAL, VERTICAL, build_kernel_program
from rewrites.egraph_view import view_egraph
from rewrites.ingest import ingest
from rewrites.kernel_seeds import MAX_SEEDED_RUN, seed_kernels
from rewrites.schedule import FUSION_ONLY, Budget, saturate
from rule_harness import VALIDATED
from service.optimizer.pipeline import optimize
from validation.validate import validate
from wire.capture import capture

pytestmark = pytest.mark.slow  # whole programs through the pipeline

PROFILE = load_profile("optu-v1")
RNG = np.random.default_rng(1)


def _arrays(*shapes):
    return [RNG.normal(size=s).astype(np.float32) for s in shapes]


PROGRAMS = {
    **{name: ZOO[name]() for name in ("transformer_layer", "mlp_train_step", "rnn_unrolled")},
    # a KV-cache append: the concatenation sits inside the greedy kernel
    "cache_append": (lambda cache, x, w: jnp.concatenate([cache, jnp.tanh(x @ w) * 0.5], axis=0) + 1.0,
                     _arrays((12, 32), (4, 16), (16, 32))),
    # cumsum has no body form: it splits the greedy kernel into two seeds around it
    "split_by_opaque": (lambda x: jnp.cumsum(jnp.tanh(jnp.exp(x)), axis=-1) * 2.0 + x,
                        _arrays((16, 32))),
}


def seeded(program, profile=PROFILE):
    """The fusion e-graph of `program` with its greedy kernels seeded, and the seeded extraction."""
    greedy = build_kernel_program(program, profile, VERTICAL)
    loaded = ingest(program)
    saturate(loaded.egraph, FUSION_ONLY, Budget())
    seeds = seed_kernels(loaded, [(k.eqns, set(k.outputs)) for k in greedy.kernels])
    view = view_egraph(loaded.egraph)
    coster = NodeCoster(view, loaded.params, profile, static_classes(view, program))
    cost = {n.id: coster(n) for c in view.classes.values() for n in c.nodes}
    exclusive, requires = gemm_exclusive_groups(view), tee_requirements(view)
    warm = seeded_extraction(view, seeds, cost, exclusive, requires)
    return greedy, seeds, loaded, view, cost, (exclusive, requires), warm


@pytest.mark.parametrize("name", sorted(set(PROGRAMS) - {"split_by_opaque"}))
def test_the_seeded_kernels_are_found_again_and_compute_the_program_bit_for_bit(name):
    fn, args = PROGRAMS[name]
    program = capture(fn, *args)
    greedy, seeds, loaded, view, cost, _, warm = seeded(program)
    assert seeds and warm is not None
    used = [n for n in warm.choice.values() if n.op in KERNEL_OPS]
    assert len(used) == len(seeds)  # every seed found (a repeated equation hash-conses away)
    emitted = emit_program(view, warm.choice, loaded.params, program)
    assert validate(program, emitted.program, "exact")["status"] in VALIDATED
    lowered = build_kernel_program(emitted.program, PROFILE, groups=emitted.groups)
    # the seeded program is the greedy one (less a repeated equation, computed once), and extraction
    # prices it as the kernel program does, up to the tie-breaking epsilon it adds per op and node
    assert greedy.total.time_s * 0.999 <= lowered.total.time_s <= greedy.total.time_s * (1 + 1e-9)
    ties = (len(emitted.program["eqns"]) + len(warm.choice)) * NODE_EPSILON_S
    assert abs(warm.cost - lowered.total.time_s) <= ties


def test_an_op_with_no_body_splits_the_kernel_into_seeds_around_it():
    fn, args = PROGRAMS["split_by_opaque"]
    program = capture(fn, *args)
    greedy, seeds, loaded, view, _, _, warm = seeded(program)
    cumsum = next(i for i, e in enumerate(program["eqns"]) if e["op"] == "cumsum")
    fused = next(k for k in greedy.kernels if cumsum in k.eqns)
    assert len(fused.eqns) >= 5  # greedy keeps exp, tanh, cumsum, mul, add together
    assert len(seeds) == 2 and all(cumsum not in s.ops for s in seeds)
    before, after = sorted(seeds, key=lambda s: s.root)
    assert max(before.ops) < cumsum < min(after.ops)
    emitted = emit_program(view, warm.choice, loaded.params, program)
    assert validate(program, emitted.program, "exact")["status"] in VALIDATED
    assert len(build_kernel_program(emitted.program, PROFILE, groups=emitted.groups).kernels) == 3


def test_a_kernel_longer_than_a_body_may_be_deep_is_seeded_as_several():
    """A 300-op elementwise chain is one kernel to greedy fusion; its body as one term would be 300
    levels deep (reading it back recursed past Python's limit: a RecursionError, not an answer)."""
    def chain(x):
        for _ in range(100):
            x = jnp.sin(x) * 1.01 + 0.1
        return x
    program = capture(chain, np.ones((4, 16), np.float32))
    greedy, seeds, loaded, view, _, _, warm = seeded(program)
    assert len(greedy.kernels) == 1 and len(greedy.kernels[0].eqns) == 300
    assert sorted(len(s.ops) for s in seeds) == [44, MAX_SEEDED_RUN, MAX_SEEDED_RUN]
    emitted = emit_program(view, warm.choice, loaded.params, program)
    assert validate(program, emitted.program, "exact")["status"] in VALIDATED
    response = optimize(program)
    assert response["validation"]["status"] in VALIDATED


@pytest.mark.parametrize("name", ["transformer_layer", "rnn_unrolled"])
def test_extraction_started_from_the_seeds_is_never_worse_than_them(name):
    fn, args = PROGRAMS[name]
    program = capture(fn, *args)
    greedy, _, loaded, view, cost, (exclusive, requires), warm = seeded(program)
    keep = frozenset(n.id for n in warm.choice.values())
    candidates = drop_dominated(view, cost, exclusive, requires, keep)
    best = extract_ilp(candidates, lambda n: cost[n.id], warm_start=warm, time_limit_s=20,
                       exclusive=exclusive, requires=requires)
    assert best.cost <= warm.cost
    emitted = emit_program(view, best.choice, loaded.params, program)
    assert validate(program, emitted.program, "exact")["status"] in VALIDATED
    assert build_kernel_program(emitted.program, PROFILE, groups=emitted.groups).total.time_s \
        <= greedy.total.time_s * (1 + 1e-9)


def test_the_seeded_baseline_keeps_the_e_graphs_kernels_at_or_below_it_on_the_mlp_training_step():
    fn, args = ZOO["mlp_train_step"]()
    response = optimize(capture(fn, *args, weight_argnums=WEIGHT_ARGNUMS["mlp_train_step"]))
    fusion = response["report"]["fusion"]
    assert fusion["chosen"] == "egraph" and fusion["egraph_s"] <= fusion["baseline_s"]
    assert response["validation"]["status"] in VALIDATED


def test_a_long_gemm_chain_seeds_without_unfolding_its_shared_values():
    # h is read twice per step: sent to egglog as a tree, a 16-GEMM kernel body would have 2^16 leaves
    def fn(h, w):
        for _ in range(24):
            h = jnp.tanh(h @ w) + h
        return h

    program = capture(fn, *_arrays((8, 16), (16, 16)))
    chains = build_kernel_program(program, PROFILE, CONVENTIONAL)
    assert [k.ops.count("dot_general") for k in chains.kernels] == [16, 8]
    loaded = ingest(program)
    seeds = seed_kernels(loaded, [(k.eqns, set(k.outputs)) for k in chains.kernels])
    view = view_egraph(loaded.egraph)
    coster = NodeCoster(view, loaded.params, PROFILE, static_classes(view, program))
    cost = {n.id: coster(n) for c in view.classes.values() for n in c.nodes}
    warm = seeded_extraction(view, seeds, cost, gemm_exclusive_groups(view), tee_requirements(view))
    emitted = emit_program(view, warm.choice, loaded.params, program)
    assert validate(program, emitted.program, "exact")["status"] in VALIDATED
    lowered = build_kernel_program(emitted.program, PROFILE, groups=emitted.groups)
    assert len(lowered.kernels) == 2 and lowered.total.time_s <= chains.total.time_s * (1 + 1e-9)


@pytest.mark.parametrize("max_gemms", [1, 16])
def test_the_unrolled_rnn_runs_its_steps_in_one_kernel_only_where_the_profile_allows(max_gemms):
    fn, args = ZOO["rnn_unrolled"]()
    profile = with_overrides(PROFILE, {"kernel.max_gemms": max_gemms})
    response = optimize(capture(fn, *args, weight_argnums=WEIGHT_ARGNUMS["rnn_unrolled"]), profile)
    gemms = [k["ops"].count("dot_general") for k in response["kernels"]]
    assert response["validation"]["status"] in VALIDATED
    assert max(gemms) == min(max_gemms, sum(gemms))  # 9 GEMMs: the merged input projection and 8 steps
    assert (len(response["kernels"]) == 1) == (max_gemms > 1)
