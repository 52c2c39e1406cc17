"""`optu calibrate`: a tiny-budget run measures plausible rates and writes a profile that loads;
the rates derive from probe times as slopes (checked on made-up times), and timing interleaves."""
from __future__ import annotations

import itertools

import pytest

from costmodel import calibrate as cal
from costmodel.calibrate import TILE, Probe, calibrate, compiled_kernels, derive, time_probes
from costmodel.cpu_host_profile import MachineTooLoaded, write_cpu_host_profile
from costmodel.profile import PROFILES_DIR, load_profile
from costmodel.provenance import assumed, unlabelled


@pytest.fixture(scope="module")
def measured():
    return calibrate(seconds_budget=1.0)


# A one-second measurement on a loaded test machine shares the cores as it must; the check on its
# share is tested on its own below.
@pytest.mark.slow  # times real probes on this machine
def test_tiny_calibration_writes_a_loadable_plausible_profile(measured, tmp_path):
    shipped = (PROFILES_DIR / "cpu-host.toml").read_bytes()
    path = write_cpu_host_profile(measured, tmp_path / "cpu-host.toml", min_cpu_share=None)
    profile = load_profile(str(path))
    assert (PROFILES_DIR / "cpu-host.toml").read_bytes() == shipped  # tests never overwrite it
    assert profile.name == "cpu-host"
    g = profile.gemm
    matmul_rate = 2 * g.rows * g.cols * g.clock_hz * g.cores
    assert 1e8 <= matmul_rate <= 1e13
    assert g.rows == g.cols == TILE and 0 <= g.weight_load_s < 1e-5  # packing a 16x16 tile: nanoseconds
    assert 1e7 <= profile.vector.flops_per_s <= 1e13
    assert 1e8 <= profile.memory.hbm_bw_bytes_per_s <= 1e12
    assert 1e8 <= profile.memory.sram_bw_bytes_per_s <= 1e13
    assert 1e-7 <= profile.kernel.launch_overhead_s <= 1e-2
    assert all(w >= 1 for w in profile.vector.op_weights.values())
    assert profile.vector.weight("exp") > profile.vector.weight("add")  # a transcendental costs more


@pytest.mark.slow  # times real probes on this machine
def test_calibration_writes_the_optional_terms(measured, tmp_path):
    profile = load_profile(str(write_cpu_host_profile(measured, tmp_path / "p.toml", min_cpu_share=None)))
    assert profile.memory.cache_bytes > 0 and profile.memory.cache_bw_bytes_per_s > 0
    assert profile.gemm.conv_positions_per_s > 0
    assert profile.gemm.call_overhead_s < 1e-3 and profile.gemm.conv_overhead_s < 1e-3
    k = profile.kernel
    assert 0 <= k.loop_iteration_s < 1e-3 and 0 <= k.input_overhead_s < 1e-3 and 0 <= k.output_overhead_s < 1e-3
    assert 0 < k.launch_overhead_s < k.dispatch_overhead_s < 1e-3  # a kernel inside a call costs less than the call
    assert measured["xla_flags"] == cal.MEASUREMENT_XLA_FLAGS


@pytest.mark.slow  # times real probes on this machine
def test_every_number_in_the_written_profile_is_labelled(measured, tmp_path):
    profile = load_profile(str(write_cpu_host_profile(measured, tmp_path / "p.toml", min_cpu_share=None)))
    assert unlabelled(profile) == []
    measured_by = [name for name, basis in profile.provenance.items()
                   if basis.source and basis.source.startswith("measured by optu calibrate on")]
    assert len(measured_by) >= 12 and "gemm.clock_hz" in measured_by and "kernel.launch_overhead_s" in measured_by
    assert {"gemm.dac_energy_j", "min_speedup"} <= set(assumed(profile))  # not measurable: said so


def test_the_shipped_cpu_host_profile_is_calibrated():
    sources = [b.source or "" for b in load_profile("cpu-host").provenance.values()]
    assert sum(s.startswith("measured by optu calibrate") for s in sources) >= 12
    assert load_profile("cpu-host").gemm.cores == 1


def _grid_gemm_s(m: int, k: int, n: int) -> float:
    return 1e-6 + 2 * m * k * n / 1e11


def _made_up_times() -> dict[str, float]:
    """Probe times of a machine with known rates: 1e11 flop/s GEMMs, 1e10 flop/s vector unit, etc."""
    call = 5e-6
    t = {"call": call}
    t.update({f"kernels{n}": call + (2 * n - 1) * 3e-7 for n in cal.KERNEL_CHAIN})  # 2 kernels a step, 1 in all
    clock, tiles, rows = 1e11 / (2 * TILE * TILE), (cal.GEMM_WIDTH // TILE) ** 2, cal.GEMM_ROWS[0]
    # 2e-8 s to pack a tile, 1e-6 s per GEMM, a kernel each
    t.update({f"gemm_rows{m}": call + tiles * (2e-8 + m / clock) + 1e-6 for m in cal.GEMM_ROWS})
    t.update({f"gemm_chain{n}": call + n * (2e-8 + rows / clock + 1e-6 + 3e-7) for n in cal.GEMM_CHAIN})
    t.update({f"gemm{m}x{k}x{n}": call + _grid_gemm_s(m, k, n) for m, k, n in itertools.product(*cal.GEMM_GRID)})
    per_step = {"fma": 2 / 1e10, **{op: 10 / 1e10 for op in cal.TRANSCENDENTALS}}  # weight 10 each
    t.update({f"{op}{n}": call + n * cal.VECTOR_ELEMENTS * s for op, s in per_step.items() for n in cal.CHAINS})
    t["row_scale"] = call + cal.REDUCE_ELEMENTS / 1e10
    t["row_sum"] = t["row_scale"] + cal.REDUCE_ELEMENTS / 1e10  # one more op per element: weight 2
    t.update({f"add{n}": call + 12 * n / 5e10 for n in cal.L2_ELEMENTS})
    t.update({f"add{n}": call + 12 * n / 2e10 for n in cal.LLC_ELEMENTS})
    t[f"add{cal.DRAM_ELEMENTS}"] = call + 12 * cal.DRAM_ELEMENTS / 4e9
    t.update({f"conv{s}x{f}": call + 2 * s * s / 1e7 for s in cal.CONV_SIZES for f in cal.CONV_FEATURES})
    t["conv_tiny"] = call + 2e-6
    t.update({f"scan{n}": call + n * (5e-8 + 4 * 32 * 2 / 1e10) for n in cal.LOOP_TRIPS})
    t.update({f"inputs{n}": call + n * 3e-7 for n in cal.BUFFERS})
    t.update({f"outputs{n}": call + n * 1e-6 for n in cal.BUFFERS})
    return t


KERNELS = {**{f"kernels{n}": 2 * n for n in cal.KERNEL_CHAIN}, **{f"gemm_chain{n}": n for n in cal.GEMM_CHAIN}}


def test_derive_recovers_the_rates_behind_the_probe_times():
    d = derive(_made_up_times(), KERNELS)
    assert d["matmul"]["flops_per_s"] == pytest.approx(1e11)
    assert d["matmul"]["tile_load_s"] == pytest.approx(2e-8)
    assert d["matmul"]["call_overhead_s"] == pytest.approx(1e-6)
    table = {(m, k, n): seconds for m, k, n, seconds in d["matmul"]["shape_times_s"]}  # each less the call
    assert table == pytest.approx({shape: _grid_gemm_s(*shape) for shape in itertools.product(*cal.GEMM_GRID)})
    assert d["vector"]["flops_per_s"] == pytest.approx(1e10)
    weights = d["vector"]["op_weights"]
    assert weights["exp"] == pytest.approx(10 - 1)  # less the helper negation in each exp step
    assert weights["tanh"] == pytest.approx(10) and weights["reduce"] == pytest.approx(2)
    assert d["vector"]["sram_bw_bytes_per_s"] == pytest.approx(5e10)
    assert d["memory"]["cache_bw_bytes_per_s"] == pytest.approx(2e10)
    assert d["memory"]["hbm_bw_bytes_per_s"] == pytest.approx(4e9)
    assert d["conv"]["positions_per_s"] == pytest.approx(1e7)
    assert d["conv"]["overhead_s"] == pytest.approx(2e-6)
    assert d["loop"]["iteration_s"] == pytest.approx(5e-8)
    assert d["overhead"] == pytest.approx({"launch_overhead_s": 3e-7, "dispatch_overhead_s": 5e-6 - 3e-7,
                                           "inputs_s": 3e-7, "outputs_s": 1e-6})


class _FakeProbe:
    def __init__(self, times: list[float], log: list[str], name: str):
        self.times, self.log, self.name, self.best = iter(times), log, name, float("inf")

    def run(self, budget_s: float) -> float:
        self.log.append(self.name)
        self.best = min(self.best, next(self.times))
        return self.best


def test_time_probes_interleaves_passes_and_keeps_each_probes_best():
    log: list[str] = []
    probes = {"a": _FakeProbe([3.0, 1.0, 2.0], log, "a"), "b": _FakeProbe([5.0, 6.0, 4.0], log, "b")}
    assert time_probes(probes, 1.0, passes=3) == {"a": 1.0, "b": 4.0}
    assert sorted(log[:2]) == sorted(log[2:4]) == sorted(log[4:]) == ["a", "b"]  # every pass runs both


def test_compiled_kernels_counts_what_xla_runs_apart():
    """A lone add is one kernel; each further dependent row sum adds a kernel or more (its result is
    read by the next step, so XLA cannot fuse the steps into one loop)."""
    x = cal._uniform(16)
    one, nine = (compiled_kernels(Probe(cal._chain(lambda v: v - v.sum() * 0.01, n), (x,))) for n in (1, 9))
    assert compiled_kernels(Probe(lambda v: v + 1.0, (x,))) == 1
    assert nine - one >= 8


def _measured_with_share(share: float) -> dict:
    return {"date": "2026-12-07", "jax": "0", "cpus": 2, "xla_flags": cal.MEASUREMENT_XLA_FLAGS, "llc_bytes": 1 << 25,
            "cpu_share": share, "spread": 1.1, **derive(_made_up_times(), KERNELS)}


def test_a_machine_too_loaded_to_measure_keeps_the_previous_profile(tmp_path):
    path = tmp_path / "cpu-host.toml"
    write_cpu_host_profile(_measured_with_share(1.2), path)  # XLA's helper threads may add to the process's time
    before = path.read_bytes()
    with pytest.raises(MachineTooLoaded, match=r"too loaded to measure: .* ran for 54% of the timing's wall time"):
        write_cpu_host_profile(_measured_with_share(0.54), path)
    assert path.read_bytes() == before
    profile = load_profile(str(path))
    assert profile.kernel.dispatch_overhead_s == pytest.approx(5e-6 - 3e-7)
    assert profile.kernel.launch_overhead_s == pytest.approx(3e-7)
