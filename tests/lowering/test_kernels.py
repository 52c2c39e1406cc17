"""Kernel grouping and estimates: naive is one kernel per equation; the conventional policies fuse
vertically and horizontally and run GEMMs back to back where the profile allows, and the fair
baseline is the cheapest of them."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from costmodel.profile import load_profile, with_overrides
from lowering.baseline import baseline_kernels
from lowering.kernels import CONVENTIONAL, NAIVE, SIBLINGS, VERTICAL, FusionPolicy, build_kernel_program
from wire.capture import capture

PROFILE = load_profile("optu-v1")


def _mlp():
    rng = np.random.default_rng(0)
    x, w, b = (rng.normal(size=s).astype(np.float32) for s in [(32, 64), (64, 64), (64,)])
    return capture(lambda x, w, b: jax.nn.relu(x @ w + b) * 2.0, x, w, b)


def test_naive_is_one_kernel_per_equation_and_baseline_fuses_the_epilogue():
    program = _mlp()
    naive = build_kernel_program(program, PROFILE, NAIVE)
    fused = build_kernel_program(program, PROFILE, VERTICAL)
    assert len(naive.kernels) == len(program["eqns"])
    assert len(fused.kernels) == 1 and fused.kernels[0].kind == "fused"
    assert fused.kernels[0].ops[0] == "dot_general"
    assert fused.total.time_s < naive.total.time_s
    assert fused.total.hbm_bytes < naive.total.hbm_bytes


def test_fused_kernel_reads_inputs_and_writes_outputs_once():
    program = _mlp()
    kernel = build_kernel_program(program, PROFILE).kernels[0]
    assert kernel.inputs == ["in0", "in1", "in2"]
    assert kernel.outputs == program["outputs"]
    assert kernel.estimate.hbm_bytes == 4 * (32 * 64 + 64 * 64 + 64 + 32 * 64)
    assert kernel.tiling == {"tiles": 1, "k_splits": 1, "weight_loads": 1, "passes": 32}


def test_weight_only_work_is_precomputed_not_per_call():
    w = np.ones((64, 64), np.float32)
    program = capture(lambda x, w: x @ (w.T * 2.0), np.ones((8, 64), np.float32), w, weight_argnums=(1,))
    kernels = build_kernel_program(program, PROFILE)
    assert [k.ops for k in kernels.kernels] == [["dot_general"]]
    assert sorted(op for k in kernels.precompute for op in k.ops) == ["mul", "transpose"]


def test_elementwise_chain_is_memory_bound_when_hbm_is_slow():
    slow_hbm = with_overrides(PROFILE, {"memory.hbm_bw_bytes_per_s": 1e9})
    x = np.ones((1024, 1024), np.float32)
    kernel = build_kernel_program(capture(lambda x: jnp.exp(x) + 1.0, x), slow_hbm).kernels[0]
    assert kernel.estimate.bound == "memory"
    assert kernel.estimate.time_s >= 2 * x.nbytes / 1e9


def test_weight_only_work_runs_per_call_where_the_profile_does_not_precompute_weights():
    w = np.ones((64, 64), np.float32)
    program = capture(lambda x, w: x @ (w.T * 2.0), np.ones((8, 64), np.float32), w, weight_argnums=(1,))
    plain_jit = with_overrides(PROFILE, {"kernel.precompute_weights": False})
    kernels = build_kernel_program(program, plain_jit)
    assert kernels.precompute == []
    assert sorted(op for k in kernels.kernels for op in k.ops) == ["dot_general", "mul", "transpose"]
    assert kernels.total.time_s > build_kernel_program(program, PROFILE).total.time_s


def test_intermediates_beyond_sram_spill_out_and_back():
    x = np.ones((256, 256), np.float32)
    program = capture(lambda x: jnp.tanh(jnp.exp(x) + 1.0), x)
    roomy = build_kernel_program(program, PROFILE).kernels[0]
    tight = build_kernel_program(program, with_overrides(PROFILE, {"memory.sram_bytes": 1024})).kernels[0]
    assert [b["level"] for b in roomy.buffers if b["role"] == "intermediate"] == ["sram", "sram"]
    assert [b["level"] for b in tight.buffers if b["role"] == "intermediate"] == ["spill", "spill"]
    spilled = 2 * (2 * x.nbytes - 1024)  # both intermediates, out and back, beyond what fits
    assert tight.estimate.hbm_bytes == roomy.estimate.hbm_bytes + spilled


def test_a_kernel_reading_an_input_through_slices_reads_only_the_slices():
    x = np.ones((8, 64), np.float32)
    program = capture(lambda x: jnp.tanh(x[:, :16]) * 2.0, x)
    (kernel,) = build_kernel_program(program, PROFILE).kernels  # the slice is folded in, not a copy kernel
    assert kernel.inputs == ["in0"] and "slice" in kernel.ops
    assert kernel.estimate.hbm_bytes == 2 * 8 * 16 * 4  # a quarter of x read, the result written


def test_sibling_policy_runs_an_op_that_reads_no_per_call_value_in_the_last_kernel():
    # x * 2 depends only on an input: vertical fusion opens a kernel for it, the sibling policy does not
    x, w = np.ones((8, 16), np.float32), np.ones((16, 16), np.float32)
    program = capture(lambda x, w: (jnp.tanh(x @ w), x * 2.0), x, w)
    greedy = build_kernel_program(program, PROFILE, VERTICAL)
    siblings = build_kernel_program(program, PROFILE, SIBLINGS)
    assert len(greedy.kernels) == 2 and len(siblings.kernels) == 1
    assert siblings.total.time_s < greedy.total.time_s


def test_sibling_policy_runs_gemms_sharing_an_operand_in_one_kernel_once_its_producer_is_full():
    # Two GEMMs a kernel: h's kernel takes h @ v1; h @ v2 opens the next; h @ v3 reads h like that
    # kernel does (a sibling), so it joins it instead of opening a third and reading h again.
    x, w, *vs = (np.ones((16, 16), np.float32) for _ in range(5))

    def fn(x, w, *vs):
        h = jnp.tanh(x @ w)
        return [h @ v for v in vs]

    program = capture(fn, x, w, *vs)
    profile = with_overrides(PROFILE, {"kernel.max_gemms": 2})
    chains_only = build_kernel_program(program, profile, FusionPolicy("chains", gemm_chains=True))
    conventional = build_kernel_program(program, profile, CONVENTIONAL)
    assert [k.ops.count("dot_general") for k in chains_only.kernels] == [2, 1, 1]
    assert [k.ops.count("dot_general") for k in conventional.kernels] == [2, 2]
    assert conventional.total.hbm_bytes < chains_only.total.hbm_bytes
    assert conventional.total.time_s < chains_only.total.time_s


def test_the_conventional_policy_is_the_default_grouping():
    program = _three_layer_mlp()
    assert CONVENTIONAL.siblings and CONVENTIONAL.gemm_chains and CONVENTIONAL.vertical
    assert build_kernel_program(program, PROFILE).total == build_kernel_program(program, PROFILE, CONVENTIONAL).total


def test_the_fair_baseline_takes_vertical_fusion_where_sibling_fusion_blocks_it():
    """exp(x) joins the GEMM kernel opened before it as a sibling, so the GEMM that reads it cannot
    (one GEMM per kernel, as on gpu-roofline, whose numbers these are, with its kernels as chosen
    rather than as XLA groups them) and exp(x) goes out to memory and back; vertical fusion alone
    keeps it on chip. The baseline is the cheaper of the two."""
    gpu = with_overrides(load_profile("gpu-roofline"), {"kernel.fusion": "chosen"})
    big = np.ones((512, 512), np.float32)
    program = capture(lambda y, w, x, w3: (y @ w, jnp.exp(x) @ w3), big, big, big, big, weight_argnums=(1, 3))
    vertical = build_kernel_program(program, gpu, VERTICAL).total.time_s
    conventional = build_kernel_program(program, gpu, CONVENTIONAL).total.time_s
    assert vertical < conventional
    assert baseline_kernels(program, gpu).total.time_s == vertical


def _three_layer_mlp():
    x, *ws = (np.ones(s, np.float32) for s in [(16, 32), (32, 32), (32, 32), (32, 8)])
    return capture(lambda x, a, b, c: jnp.tanh(jnp.tanh(x @ a) @ b) @ c, x, *ws)


def test_gemm_chains_run_gemms_back_to_back_up_to_the_profiles_max_gemms():
    program = _three_layer_mlp()
    baseline = build_kernel_program(program, PROFILE, SIBLINGS)  # one GEMM per kernel, epilogues fused
    assert len(baseline.kernels) == 3
    two = build_kernel_program(program, with_overrides(PROFILE, {"kernel.max_gemms": 2}))
    three = build_kernel_program(program, with_overrides(PROFILE, {"kernel.max_gemms": 3}))
    assert [k.ops.count("dot_general") for k in two.kernels] == [2, 1]
    (chain,) = three.kernels
    assert chain.ops.count("dot_general") == 3 and chain.inputs == ["in0", "in1", "in2", "in3"]
    assert [b["level"] for b in chain.buffers if b["role"] == "intermediate"] == ["sram"] * 4
    # the tiling is summed over the GEMMs the kernel runs
    assert chain.tiling["weight_loads"] == sum(k.tiling["weight_loads"] for k in baseline.kernels)
    # the same GEMM work with fewer launches and no intermediates through HBM
    assert three.total.time_s < two.total.time_s < baseline.total.time_s
    assert three.total.hbm_bytes < two.total.hbm_bytes < baseline.total.hbm_bytes
    assert build_kernel_program(program, with_overrides(PROFILE, {"kernel.max_gemms": 1})).total == baseline.total
