"""gpu-roofline against the figures measured on an NVIDIA H200: each number the measurements cover
reproduces its figure through the cost model, GEMMs priced by the type their operands run as."""
import json

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from costmodel.op_cost import gemm_operand_class, op_cost
from costmodel.profile import PROFILES_DIR, load_profile, with_overrides
from lowering.as_run import kernels_as_run
from lowering.kernels import build_kernel_program
from lowering.lower_bound import lower_bound
from wire.capture import capture

pytestmark = pytest.mark.unit

MEASURED = json.loads((PROFILES_DIR / "measured" / "h200.json").read_text())
FIGURES = MEASURED["figures"]
GPU = load_profile("gpu-roofline")
N = 8192
DOT = {"dimension_numbers": [[[1], [0]], [[], []]]}
HIGHEST = [{"enum": "Precision", "value": "HIGHEST"}] * 2  # the wire's form of precision=HIGHEST


def _tflops(profile, dtype: str, precision) -> float:
    square = ((N, N), dtype)
    cost = op_cost(profile, "dot_general", {**DOT, "precision": precision}, [square, square], square)
    return 2 * N ** 3 / cost.time_s / 1e12


def _call_s(fn, *specs) -> float:
    """The estimated time of one call of `fn` as jax.jit runs it: its kernels as XLA groups them,
    and its dispatch."""
    return kernels_as_run(capture(fn, *specs), GPU).total.time_s


SQUARE = {"bfloat16": jax.ShapeDtypeStruct((N, N), jnp.bfloat16), "float32": jax.ShapeDtypeStruct((N, N), jnp.float32)}
GIB = jax.ShapeDtypeStruct((1 << 28,), jnp.float32)  # the measurements' 1 GiB arrays


@pytest.mark.parametrize("figure, dtype, precision", [
    ("matmul_bf16_tflops", "bfloat16", None),
    ("matmul_f32_default_tflops", "float32", None),
    ("matmul_f32_highest_tflops", "float32", lax.Precision.HIGHEST),
])
def test_an_8192_cubed_product_takes_the_time_measured_for_its_operand_type(figure, dtype, precision):
    measured_s = 2 * N ** 3 / (FIGURES[figure] * 1e12)
    estimated_s = _call_s(lambda a, b: jnp.matmul(a, b, precision=precision), SQUARE[dtype], SQUARE[dtype])
    assert estimated_s == pytest.approx(measured_s, rel=1e-3)
    wire_precision = None if precision is None else [{"enum": "Precision", "value": precision.name}] * 2
    assert GPU.provenance[f"gemm.precision_rates.{gemm_operand_class(dtype, wire_precision)}"].source.count(figure) == 1


def test_a_streaming_add_over_1_gib_takes_the_time_measured():
    measured_s = 3 * 4 * (1 << 28) / (FIGURES["stream_add_gbps"] * 1e9)  # two reads and a write, as counted
    kernels = build_kernel_program(capture(lambda x, y: x + y, GIB, GIB), GPU)
    assert len(kernels.kernels) == 1 and kernels.kernels[0].estimate.bound == "memory"
    assert kernels.total.time_s == pytest.approx(measured_s, rel=1e-3)
    assert "stream_add_gbps" in GPU.provenance["memory.hbm_bw_bytes_per_s"].source


def test_a_sum_over_1_gib_the_profile_was_not_fitted_to_comes_out_within_five_percent():
    """What the fitted bandwidth and dispatch predict for a reduction, unfitted (1.6% off)."""
    measured_s = 4 * (1 << 28) / (FIGURES["reduce_sum_gbps"] * 1e9)
    assert _call_s(jnp.sum, GIB) == pytest.approx(measured_s, rel=0.05)


def test_a_fused_elementwise_chain_over_1_gib_streams_as_xla_runs_it():
    """exp(x) * 0.5 is one loop nest: its 1 GiB exp(x) streams through registers, so the call is
    a read and a write of 1 GiB (unfitted: measured 0.71 ms; priced as a spill from the L2 before,
    1.24 ms). A grouping of our own holding the intermediate whole spills it."""
    measured_s = (1 << 28) / (FIGURES["exp_gelem_per_s"] * 1e9)
    assert _call_s(lambda x: jnp.exp(x) * 0.5, GIB) == pytest.approx(measured_s, rel=0.05)
    held = build_kernel_program(capture(lambda x: jnp.exp(x) * 0.5, GIB), GPU).kernels[0]
    assert [b["level"] for b in held.buffers if b["role"] == "intermediate"] == ["spill"]


def test_each_kernel_launch_costs_what_one_more_unfusable_kernel_measured():
    assert GPU.kernel.launch_overhead_s * 1e6 == pytest.approx(FIGURES["per_kernel_us"], rel=1e-3)
    assert "per_kernel_us" in GPU.provenance["kernel.launch_overhead_s"].source


def test_float32_at_highest_precision_is_priced_slower_than_at_default_and_bf16_faster():
    """What a user's precision= changes on a GPU, seen through a whole program's estimate."""
    spec, half = jax.ShapeDtypeStruct((2048, 2048), jnp.float32), jax.ShapeDtypeStruct((2048, 2048), jnp.bfloat16)
    time = {name: build_kernel_program(capture(fn, *specs), GPU).total.time_s for name, fn, specs in [
        ("bf16", lambda x, w: jnp.dot(x, w), (half, half)),
        ("default", lambda x, w: jnp.dot(x, w), (spec, spec)),
        ("highest", lambda x, w: jnp.dot(x, w, precision=lax.Precision.HIGHEST), (spec, spec)),
    ]}
    assert time["bf16"] < time["default"] < time["highest"]
    assert time["highest"] - time["default"] > 5 * (time["default"] - time["bf16"])


@pytest.mark.parametrize("precision, expected", [
    (None, "float32"),
    (HIGHEST, "float32_highest"),
    ([{"enum": "Precision", "value": "DEFAULT"}, {"enum": "Precision", "value": "HIGHEST"}], "float32_highest"),
    ((lax.Precision.HIGHEST, lax.Precision.HIGHEST), "float32_highest"),
    (lax.Precision.HIGH, "float32"),
])
def test_the_operand_class_reads_precision_in_each_of_its_forms(precision, expected):
    assert gemm_operand_class("float32", precision) == expected
    assert gemm_operand_class("bfloat16", precision) == "bfloat16"  # HIGHEST changes nothing in bf16


def test_a_profile_without_rates_prices_every_type_at_its_clock():
    optu = load_profile("optu-v1")
    assert optu.gemm.precision_rates == {}
    assert _tflops(optu, "bfloat16", None) == _tflops(optu, "float32", HIGHEST)
    assert _tflops(GPU, "bfloat16", None) > _tflops(GPU, "float32", None) > 5 * _tflops(GPU, "float32", HIGHEST)


def test_an_unlisted_type_falls_back_to_its_dtype_then_the_default():
    assert GPU.gemm.rate("float16") == GPU.gemm.precision_rates["default"]
    only_float32 = with_overrides(load_profile("optu-v1"), {"gemm.precision_rates.float32": 0.5})
    assert only_float32.gemm.rate("float32_highest") == 0.5  # HIGHEST unlisted: float32's rate
    assert only_float32.gemm.rate("bfloat16") == 1.0
    assert only_float32.provenance["gemm.precision_rates.float32"].assumed


def test_a_call_of_one_tiny_kernel_costs_what_a_jitted_call_from_python_measured():
    """The dispatch is paid once per call, on top of the kernels, in the estimates and the bound."""
    spec = jax.ShapeDtypeStruct((8,), jnp.float32)
    program = capture(lambda s: s + 1.0, spec)
    one = build_kernel_program(program, GPU)
    assert len(one.kernels) == 1
    assert one.total.time_s * 1e6 == pytest.approx(FIGURES["dispatch_one_kernel_us"], rel=1e-2)
    assert lower_bound([program], GPU).time_s == pytest.approx(one.total.time_s, rel=1e-2)
    assert "dispatch_one_kernel_us" in GPU.provenance["kernel.dispatch_overhead_s"].source
    sixty_four = build_kernel_program(capture(lambda s: jnp.sort(jnp.sort(s) + 1.0) + 1.0, spec), GPU)
    assert sixty_four.total.time_s - one.total.time_s == pytest.approx(
        (len(sixty_four.kernels) - 1) * FIGURES["per_kernel_us"] * 1e-6, rel=0.2)
