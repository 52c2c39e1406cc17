"""Each attention as a kernel of its own: in a whole layer, where greedy GEMM chaining splits the
attention across kernels, the regrouping holds score product, softmax and mix in one group, keeps
every other equation, and orders the groups so each runs after what it reads; extraction starting
from it runs a long-context layer key-blocked."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from bench.models.large import bert_encoder
from costmodel.profile import load_profile
from lowering.attention_kernels import with_attention_kernels
from lowering.kernels import CONVENTIONAL, build_kernel_program
from service.optimizer.pipeline import optimize
from wire.capture import capture


def _layers(count, seq):
    fn, args, weights = bert_encoder(count, hidden=64, heads=2, seq=seq, batch=1)
    return capture(fn, *args, weight_argnums=weights)


def _valid_order(program, groups):
    grouped = {i for g in groups for i in g}
    computed = {s["name"] for s in [*program["inputs"], *program.get("consts", [])]}
    computed |= {o["name"] for i, e in enumerate(program["eqns"]) if i not in grouped for o in e["out"]}  # precomputed
    for group in groups:
        outs = {o["name"] for i in group for o in program["eqns"][i]["out"]}
        reads = {a for i in group for a in program["eqns"][i]["in"] if isinstance(a, str)}
        if not reads <= computed | outs:
            return False
        computed |= outs
    return True


def test_each_attention_of_a_stack_of_layers_becomes_one_group_in_a_valid_order():
    program = _layers(2, 16)
    kernels = build_kernel_program(program, load_profile("optu-v1"), CONVENTIONAL).kernels
    groups = with_attention_kernels(program, [k.eqns for k in kernels])
    assert groups is not None and _valid_order(program, groups)
    ops = [[program["eqns"][i]["op"] for i in g] for g in groups]
    attention = [o for o in ops if o.count("dot_general") == 2 and "exp" in o and "reduce_max" in o]
    assert len(attention) == 2  # one per layer, and nothing but the attention in each
    assert all(o[0] == "dot_general" and o[-1] == "dot_general" for o in [[op for op in a if op not in
                                                                           ("squeeze", "reshape")] for a in attention])
    covered = {i for g in groups for i in g}
    assert covered == {i for k in kernels for i in k.eqns}


def test_a_program_without_attention_is_left_as_it_is():
    program = capture(lambda x, w: jax.nn.softmax(x @ w, -1), jax.ShapeDtypeStruct((8, 16), jnp.float32),
                      jax.ShapeDtypeStruct((16, 16), jnp.float32))
    assert with_attention_kernels(program, [[0, 1, 2]]) is None


def test_a_whole_long_context_layer_runs_its_attention_blocked_in_the_baseline_and_key_blocked_optimized():
    """N = 8192: in the layer the greedy chain puts the score product with the projections, so only
    the regrouped grouping holds the attention whole; the baseline has it too (row-blocked: a
    conventional compiler that fuses GEMM chains fuses an attention whole), so its scores never
    spill (its FFN's gelu does: the model holds a fused elementwise chain's values whole), and the
    optimized program's key blocking gains over it only by fewer K and V loads."""
    fn, args, weights = bert_encoder(1, seq=8192, batch=1)
    response = optimize(capture(fn, *args, weight_argnums=weights), "optu-v1", {"validate": False})
    assert [k["kind"] for k in response["kernels"]].count("key_blocked") == 1
    [attention] = [k for k in response["baseline_kernels"] if k["kind"] == "row_blocked"]
    assert not any(b["level"] == "spill" for b in attention["buffers"])
    assert 1.0 < response["estimate"]["speedup_vs_baseline"] < 1.5


def test_exact_mode_searches_a_long_context_layer_with_its_attention_row_blocked():
    """Blocking query rows reorders no sum: exact mode starts from the same regrouped kernels as the
    baseline, so the search's own program is returned, never blocking keys."""
    fn, args, weights = bert_encoder(1, seq=8192, batch=1)
    response = optimize(capture(fn, *args, weight_argnums=weights), "optu-v1", {"validate": False, "fp_mode": "exact"})
    kinds = [k["kind"] for k in response["kernels"]]
    assert kinds.count("row_blocked") == 1 and "key_blocked" not in kinds
    assert response["report"]["fusion"]["chosen"] != "baseline"
    assert response["estimate"]["speedup_vs_baseline"] >= 1.0


@pytest.mark.parametrize("hardware", ["gpu-roofline", "cpu-host"])
def test_profiles_whose_kernels_hold_one_gemm_never_get_an_attention_kernel(hardware):
    """An attention kernel runs two GEMMs: on a profile whose kernels hold one it would claim a
    kernel its lowering does not run, and beat the lower bound (which holds one GEMM per kernel)."""
    def causal(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / 8.0
        s = jnp.where(jnp.arange(128)[:, None] >= jnp.arange(128)[None, :], s, -jnp.inf)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, -1), v)

    spec = jax.ShapeDtypeStruct((1, 12, 128, 64), jnp.float32)
    response = optimize(capture(causal, spec, spec, spec), hardware, {"validate": False})
    assert all(k["ops"].count("dot_general") <= 1 for k in response["kernels"])
    assert response["estimate"]["optimized"]["time_s"] >= response["estimate"]["lower_bound"]["time_s"]
