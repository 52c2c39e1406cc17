"""The lower bound is one: no kernel grouping of a program is estimated under it, whatever the
profile; it counts per-call work only, prices memory as the estimate does, counts only what is
read, and takes a cond at its cheapest branch."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from jax import lax

from bench.models.generated import FAMILIES
from costmodel.profile import load_profile
from lowering.kernels import CONVENTIONAL, NAIVE, SIBLINGS, VERTICAL, build_kernel_program
from lowering.lower_bound import lower_bound
from wire.capture import capture

PROFILES = ["optu-v1", "gpu-roofline", "cpu-host"]
POLICIES = [NAIVE, VERTICAL, SIBLINGS, CONVENTIONAL]
EXAMPLES = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _cheapest(program: dict, profile) -> float:
    return min(build_kernel_program(program, profile, policy).total.time_s for policy in POLICIES)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.__name__)
def test_no_grouping_of_a_generated_program_is_estimated_under_its_bound(family, profile):
    hardware = load_profile(profile)

    @EXAMPLES
    @given(family())
    def check(program):
        bound = lower_bound([program], hardware)
        assert 0 < bound.time_s <= _cheapest(program, hardware)

    check()


@pytest.mark.parametrize("profile", PROFILES)
def test_weight_only_gemms_are_in_the_bound_only_where_they_run_per_call(profile):
    """Where the profile precomputes weight-only work it runs once, ahead of the calls; where it
    does not (a plain jax.jit on cpu-host) it runs every call."""
    hardware = load_profile(profile)
    w = np.ones((1024, 1024), np.float32)
    program = capture(lambda x, w1, w2: x + jnp.sum(w1 @ w2), np.ones(8, np.float32), w, w, weight_argnums=(1, 2))
    bound = lower_bound([program], hardware)
    assert bound.time_s <= build_kernel_program(program, hardware).total.time_s
    per_call_product = bound.flops > 2e9  # the product's 2 * 1024^3, beside the add's few
    assert per_call_product == (not hardware.kernel.precompute_weights)


@pytest.mark.parametrize("elements", [64 * 1024, 1024 * 1024, 4 * 1024 * 1024])
def test_memory_is_priced_at_the_speed_the_estimate_uses(elements):
    """cpu-host moves a kernel's first bytes at cache speed: a lone negation's bound is its estimate."""
    hardware = load_profile("cpu-host")
    program = capture(lambda x: -x, np.ones(elements, np.float32))
    estimate = build_kernel_program(program, hardware).total.time_s
    assert estimate * 0.999 <= lower_bound([program], hardware).time_s <= estimate


def test_inputs_that_nothing_reads_are_not_counted():
    hardware = load_profile("optu-v1")
    big = np.ones((4096, 4096), np.float32)
    used_only = capture(lambda x: x * 2, np.ones(16, np.float32))
    with_unread = capture(lambda x, unused: x * 2, np.ones(16, np.float32), big)
    assert lower_bound([with_unread], hardware).time_s == lower_bound([used_only], hardware).time_s


def test_a_cond_is_bounded_by_its_cheapest_branch():
    hardware = load_profile("optu-v1")
    x, w = np.ones((256, 256), np.float32), np.ones((256, 256), np.float32)
    program = capture(lambda p, x, w: lax.cond(p > 0, lambda v: v @ w @ w @ w, lambda v: v + 1.0, x),
                      np.float32(1), x, w)
    assert lower_bound([program], hardware).flops < 2 * 256 ** 3  # under one of the dear branch's GEMMs


def test_the_bound_names_the_resource_that_binds():
    hardware = load_profile("optu-v1")
    wide = capture(lambda x: -x, np.ones(1 << 24, np.float32))
    gemms = capture(lambda x, w: x @ w @ w, np.ones((4096, 4096), np.float32), np.ones((4096, 4096), np.float32))
    tiny = capture(lambda x: -x, np.ones(4, np.float32))
    assert lower_bound([wide], hardware).bound == "memory"
    assert lower_bound([gemms], hardware).bound in ("optical", "weight_load")
    assert lower_bound([tiny], hardware).bound == "launch"


def test_the_bound_over_several_programs_is_at_or_below_each():
    hardware = load_profile("gpu-roofline")
    x, w = np.ones((64, 512), np.float32), np.ones((512, 512), np.float32)
    twice = capture(lambda x, w: (x @ w) + (x @ w), x, w)
    once = capture(lambda x, w: 2.0 * (x @ w), x, w)
    bound = lower_bound([twice, once], hardware).time_s
    assert bound <= min(_cheapest(twice, hardware), _cheapest(once, hardware))
    assert bound <= lower_bound([twice], hardware).time_s


def test_where_attention_may_be_one_fused_kernel_the_launch_floor_lets_its_two_products_share_one():
    """gpu-roofline's kernels hold one GEMM; with attention returned as one Pallas kernel, each
    attention's score product and mix may share a kernel: one launch fewer per attention, no more."""
    import jax

    def two_attentions(q, k, v):
        once = jax.nn.softmax(q @ k.swapaxes(-1, -2), -1) @ v
        return jax.nn.softmax(once @ k.swapaxes(-1, -2), -1) @ v

    spec = jax.ShapeDtypeStruct((2, 64, 16), jnp.float32)
    program, gpu = capture(two_attentions, spec, spec, spec), load_profile("gpu-roofline")
    apart, paired = (lower_bound([program], gpu, attention_kernels=fused) for fused in (False, True))
    launch = gpu.kernel.launch_overhead_s
    assert apart.bound == paired.bound == "launch"
    assert apart.time_s - paired.time_s == pytest.approx(2 * launch, rel=1e-6)
    optu = load_profile("optu-v1")  # its kernels hold GEMM chains already: nothing changes
    assert lower_bound([program], optu, attention_kernels=True).time_s == lower_bound([program], optu).time_s
