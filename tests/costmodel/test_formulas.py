"""Tests for costmodel.formulas: hand-computed cases on a tiny profile, and monotonicity properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.formulas import (
    Estimate,
    conv_cost,
    dtype_bytes,
    gemm_cost,
    kernel_estimate,
    loop_cost,
    memory_time,
    sum_estimates,
    vector_cost,
)
from costmodel.profile import (
    HardwareProfile,
    load_profile,
    profile_from_dict,
    with_overrides,
)

# R=4 outputs x C=8 inputs per tile, 2 cores at 1 GHz; T_w = 1 us, half hidden.
TINY = profile_from_dict(
    {
        "name": "tiny",
        "description": "hand-checkable test target",
        "gemm": {
            "rows": 4,
            "cols": 8,
            "cores": 2,
            "clock_hz": 1e9,
            "weight_load_s": 1e-6,
            "weight_load_overlap": 0.5,
            "dac_bits": 8,
            "adc_bits": 8,
            "dac_energy_j": 1e-12,
            "adc_energy_j": 2e-12,
            "weight_cell_energy_j": 1e-11,
            "laser_power_w": 1e-3,
        },
        "vector": {
            "flops_per_s": 1e12,
            "energy_per_flop_j": 1e-12,
            "op_weights": {"add": 1, "exp": 8, "default": 1},
        },
        "memory": {
            "sram_bytes": 1e6,
            "sram_bw_bytes_per_s": 1e12,
            "sram_energy_per_byte_j": 1e-12,
            "hbm_bw_bytes_per_s": 1e11,
            "hbm_energy_per_byte_j": 1e-11,
        },
        "kernel": {"launch_overhead_s": 1e-8},
    },
    source="tiny",
)
# Only the ADC term left, so a K split's extra readout is the whole energy.
ADC_ONLY = with_overrides(
    TINY, {"gemm.dac_energy_j": 0, "gemm.weight_cell_energy_j": 0, "gemm.laser_power_w": 0}
)


def test_gemm_needing_3x4_tiles_matches_hand_computation():
    # k=20 over C=8 -> 3 K splits; n=16 over R=4 -> 4 N blocks; 12 tiles.
    cost = gemm_cost(TINY, m=100, k=20, n=16)
    assert (cost.tiles, cost.k_splits, cost.weight_loads) == (12, 3, 12)
    assert cost.passes == 12 * 100
    # 12 tiles * (1 us * 0.5 + 100 rows / 1 GHz) / 2 cores = 12 * 0.6 us / 2
    assert cost.time_s == pytest.approx(3.6e-6)
    assert cost.flops == 2 * 100 * 20 * 16
    weights = 12 * 4 * 8 * 1e-11  # 3.84 nJ: every cell of every tile programmed
    dac = 100 * 20 * 4 * 1e-12  # 8.0 nJ: each input row encoded once per N block
    adc = 100 * 16 * 3 * 2e-12  # 9.6 nJ: each output read out once per K split
    laser = 1e-3 * 3.6e-6  # 3.6 nJ
    assert cost.energy_j == pytest.approx(weights + dac + adc + laser)
    assert cost.energy_j == pytest.approx(25.04e-9)
    assert cost.bound == "weight_load"  # 0.5 us of loading vs 0.1 us of streaming per tile


def test_gemm_with_many_rows_is_optical_bound():
    cost = gemm_cost(TINY, m=1000, k=8, n=4)  # 1 us streaming vs 0.5 us loading
    assert cost.bound == "optical"
    assert cost.time_s == pytest.approx(1 * (0.5e-6 + 1e-6) / 2)


def test_k_split_costs_extra_adc_conversions():
    one_split = gemm_cost(ADC_ONLY, m=10, k=8, n=4)
    two_splits = gemm_cost(ADC_ONLY, m=10, k=16, n=4)
    assert (one_split.k_splits, two_splits.k_splits) == (1, 2)
    # ADC conversions = m * n * k_splits: 10*4*1 = 40 and 10*4*2 = 80, at 2 pJ each.
    assert one_split.energy_j == pytest.approx(40 * 2e-12)
    assert two_splits.energy_j == pytest.approx(80 * 2e-12)


def test_batch_multiplies_weight_loads_time_and_energy():
    single = gemm_cost(TINY, m=100, k=20, n=16)
    batched = gemm_cost(TINY, m=100, k=20, n=16, batch=3)
    assert batched.weight_loads == 3 * single.weight_loads
    assert batched.time_s == pytest.approx(3 * single.time_s)
    assert batched.energy_j == pytest.approx(3 * single.energy_j)
    assert batched.flops == 3 * single.flops


def test_merging_rows_under_one_weight_beats_two_separate_gemms():
    # The same-weight merge the rewrites look for: one load streamed over 2m rows.
    merged = gemm_cost(TINY, m=200, k=20, n=16)
    separate = gemm_cost(TINY, m=100, k=20, n=16)
    assert merged.time_s < 2 * separate.time_s
    assert merged.energy_j < 2 * separate.energy_j


def test_empty_gemm_costs_nothing():
    cost = gemm_cost(TINY, m=0, k=20, n=16)
    assert (cost.time_s, cost.energy_j, cost.flops, cost.weight_loads) == (0.0, 0.0, 0.0, 0)


def test_negative_dimension_is_an_error():
    with pytest.raises(ValueError, match="k must be >= 0"):
        gemm_cost(TINY, m=1, k=-1, n=1)


def test_tiling_report_lists_the_tiling_fields():
    tiling = gemm_cost(TINY, m=100, k=20, n=16).tiling()
    assert tiling == {"tiles": 12, "k_splits": 3, "weight_loads": 12, "passes": 1200}


def test_vector_cost_weights_ops_and_takes_the_slower_of_alu_and_sram():
    time_s, energy_j, flops = vector_cost(TINY, {"exp": 1000, "add": 1000}, sram_bytes=8000)
    assert flops == 8 * 1000 + 1000
    assert time_s == pytest.approx(9000 / 1e12)  # ALU 9 ns > SRAM 8 ns
    assert energy_j == pytest.approx(9000 * 1e-12 + 8000 * 1e-12)
    sram_time, _, _ = vector_cost(TINY, {"add": 10}, sram_bytes=8000)
    assert sram_time == pytest.approx(8000 / 1e12)


def test_vector_cost_charges_the_default_weight_for_unlisted_ops():
    _, _, flops = vector_cost(TINY, {"cumsum": 5}, sram_bytes=0)
    assert flops == 5


def test_vector_cost_rejects_negative_counts():
    with pytest.raises(ValueError, match="'add'"):
        vector_cost(TINY, {"add": -1}, sram_bytes=0)


def test_elementwise_chain_is_hbm_bound():
    # exp(x) + y over 1000 float32 elements: read x, y once and write the result, all in one kernel.
    hbm_bytes = 3 * 1000 * dtype_bytes("float32")
    time_s, energy_j, flops = vector_cost(TINY, {"exp": 1000, "add": 1000}, sram_bytes=hbm_bytes)
    est = kernel_estimate(TINY, time_s, energy_j, flops, hbm_bytes, "vector")
    assert est.bound == "memory"
    assert est.time_s == pytest.approx(12000 / 1e11 + 1e-8)  # 120 ns of HBM + 10 ns launch
    assert est.energy_j == pytest.approx(9000 * 1e-12 + 12000 * 1e-12 + 12000 * 1e-11)
    assert est.hbm_bytes == 12000 and est.flops == 9000


def test_tiny_kernel_is_launch_bound():
    slow_launch = with_overrides(TINY, {"kernel.launch_overhead_s": 1e-6})
    time_s, energy_j, flops = vector_cost(slow_launch, {"add": 16}, sram_bytes=128)
    est = kernel_estimate(slow_launch, time_s, energy_j, flops, hbm_bytes=128, compute_bound="vector")
    assert est.bound == "launch"
    assert est.time_s == pytest.approx(1e-6 + 128 / 1e11)


def test_compute_bound_kernel_reports_its_compute_bound():
    cost = gemm_cost(TINY, m=100, k=20, n=16)
    est = kernel_estimate(
        TINY, cost.time_s, cost.energy_j, cost.flops, hbm_bytes=100, compute_bound=cost.bound
    )
    assert est.bound == "weight_load"
    assert est.time_s == pytest.approx(cost.time_s + 1e-8)


def test_kernel_estimate_rejects_unknown_bound_and_negative_inputs():
    with pytest.raises(ValueError, match="compute_bound"):
        kernel_estimate(TINY, 1.0, 1.0, 1.0, 1.0, "gpu")
    with pytest.raises(ValueError, match=">= 0"):
        kernel_estimate(TINY, 1.0, 1.0, 1.0, -1.0, "vector")


def test_sum_estimates_adds_totals_and_takes_the_slowest_parts_bound():
    parts = [Estimate(1e-6, 1e-3, 100, 10, "memory"), Estimate(3e-6, 2e-3, 50, 1000, "optical")]
    total = sum_estimates(parts)
    assert total.time_s == pytest.approx(4e-6)
    assert total.energy_j == pytest.approx(3e-3)
    assert (total.hbm_bytes, total.flops, total.bound) == (150, 1010, "optical")
    assert total.to_dict() == {
        "time_s": total.time_s,
        "energy_j": total.energy_j,
        "hbm_bytes": 150,
        "flops": 1010,
        "bound": "optical",
    }


def test_sum_of_no_estimates_is_zero():
    assert sum_estimates([]) == Estimate(0.0, 0.0, 0.0, 0.0, "launch")


def test_estimate_rejects_unknown_bound():
    with pytest.raises(ValueError, match="bound"):
        Estimate(1.0, 1.0, 0, 0, "fast")


@pytest.mark.parametrize(
    ("dtype", "size"),
    [
        ("float32", 4),
        ("bfloat16", 2),
        ("float16", 2),
        ("float64", 8),
        ("int8", 1),
        ("bool", 1),
        ("int32", 4),
        ("uint8", 1),
        ("complex64", 8),
        ("float8_e4m3fn", 1),
    ],
)
def test_dtype_bytes(dtype, size):
    assert dtype_bytes(dtype) == size


def test_every_wire_dtype_has_a_size():
    # a program may use any dtype the wire format accepts; pricing it must never fail
    from wire.format import dtype_names

    assert {name: dtype_bytes(name) >= 1 for name in dtype_names()} == dict.fromkeys(dtype_names(), True)


def test_unknown_dtype_is_an_error():
    with pytest.raises(ValueError, match="float128"):
        dtype_bytes("float128")


dims = st.integers(min_value=1, max_value=5000)
profiles = st.sampled_from([TINY, load_profile("optu-v1"), load_profile("gpu-roofline")])


def _assert_not_cheaper(p: HardwareProfile, small: tuple[int, int, int], big: tuple[int, int, int]):
    a, b = gemm_cost(p, *small), gemm_cost(p, *big)
    assert b.time_s >= a.time_s
    assert b.energy_j >= a.energy_j
    assert b.flops >= a.flops


@settings(max_examples=200, deadline=None)
@given(p=profiles, m=dims, k=dims, n=dims, extra=st.integers(min_value=0, max_value=5000))
def test_gemm_cost_is_monotone_in_m_k_and_n(p, m, k, n, extra):
    _assert_not_cheaper(p, (m, k, n), (m + extra, k, n))
    _assert_not_cheaper(p, (m, k, n), (m, k + extra, n))
    _assert_not_cheaper(p, (m, k, n), (m, k, n + extra))


# Optional terms (zero or absent in TINY): a cache in front of HBM, per-buffer and per-GEMM costs,
# a convolution gather rate and setup, loop iterations.
EXTRAS = with_overrides(TINY, {
    "memory.cache_bytes": 1000, "memory.cache_bw_bytes_per_s": 1e12,
    "kernel.input_overhead_s": 1e-9, "kernel.output_overhead_s": 2e-9, "kernel.loop_iteration_s": 1e-7,
    "gemm.call_overhead_s": 5e-8, "gemm.conv_overhead_s": 1e-6, "gemm.conv_positions_per_s": 1e6})


def test_memory_time_moves_the_cached_part_at_cache_speed_and_the_rest_at_hbm_speed():
    assert memory_time(EXTRAS, 3000) == pytest.approx(1000 / 1e12 + 2000 / 1e11)
    assert memory_time(EXTRAS, 500) == pytest.approx(500 / 1e12)
    assert memory_time(TINY, 3000) == pytest.approx(3000 / 1e11)  # no cache: all at HBM speed


def test_kernel_estimate_reads_cached_traffic_at_cache_speed():
    est = kernel_estimate(EXTRAS, 0.0, 0.0, 0.0, 1000, "vector")
    assert est.time_s == pytest.approx(1000 / 1e12 + 1e-8)


def test_buffers_beyond_one_input_and_one_output_cost_their_overheads():
    est = kernel_estimate(EXTRAS, 0.0, 0.0, 0.0, 0, "vector", inputs=3, outputs=2)
    assert est.time_s == pytest.approx(1e-8 + 2 * 1e-9 + 1 * 2e-9)
    assert kernel_estimate(EXTRAS, 0.0, 0.0, 0.0, 0, "vector").time_s == pytest.approx(1e-8)
    assert kernel_estimate(EXTRAS, 0.0, 0.0, 0.0, 0, "vector", inputs=0, outputs=0).time_s == pytest.approx(1e-8)
    assert kernel_estimate(TINY, 0.0, 0.0, 0.0, 0, "vector", inputs=5, outputs=5).time_s == pytest.approx(1e-8)


def test_gemm_call_overhead_is_paid_once_per_gemm_and_not_by_an_empty_one():
    plain, extra = gemm_cost(TINY, 100, 8, 4), gemm_cost(EXTRAS, 100, 8, 4)
    assert extra.time_s == pytest.approx(plain.time_s + 5e-8)
    assert gemm_cost(EXTRAS, 0, 8, 4).time_s == 0.0


def test_conv_without_gather_terms_costs_the_cheaper_orientation_of_its_gemm():
    # m=100 rows under one 4x8 tile: 1 x (0.5 us + 100 ns) / 2 cores = 0.3 us; the other way round
    # needs 25 tiles, 25 x (0.5 us + 4 ns) / 2 = 6.3 us.
    assert conv_cost(TINY, 100, 8, 4).time_s == pytest.approx(0.3e-6)
    assert conv_cost(TINY, 100, 8, 4).time_s == gemm_cost(TINY, 100, 8, 4).time_s


def test_conv_with_few_features_is_bound_by_its_patch_gather():
    # 100 positions at 1e6 per second: 100 us against a 0.3 us GEMM; plus the 1 us conv setup.
    c = conv_cost(EXTRAS, 100, 8, 4)
    assert c.time_s == pytest.approx(100e-6 + 1e-6)
    # the laser stays on for the whole conv, not only the GEMM's 0.3 us
    assert c.energy_j == pytest.approx(conv_cost(TINY, 100, 8, 4).energy_j
                                       + TINY.gemm.laser_power_w * (c.time_s - 0.3e-6))


def test_conv_with_many_features_is_bound_by_its_gemm():
    fast_gather = with_overrides(EXTRAS, {"gemm.conv_positions_per_s": 1e12})
    assert conv_cost(fast_gather, 100, 8, 4).time_s == pytest.approx(0.3e-6 + 1e-6)


def test_loop_costs_its_body_and_the_iteration_overhead_per_trip():
    assert loop_cost(EXTRAS, 1e-6, 8) == pytest.approx(8 * (1e-6 + 1e-7))
    assert loop_cost(TINY, 1e-6, 8) == pytest.approx(8e-6)
    assert loop_cost(EXTRAS, 1e-6, 0) == 0.0
    with pytest.raises(ValueError):
        loop_cost(EXTRAS, 1e-6, -1)
