"""`optu calibrate`: a tiny-budget run measures plausible rates and writes a profile that loads."""
from __future__ import annotations

import tomllib

from costmodel.calibrate import TILE, calibrate, write_cpu_host_profile
from costmodel.profile import PROFILES_DIR, load_profile


def test_tiny_calibration_writes_a_loadable_plausible_profile(tmp_path):
    shipped = (PROFILES_DIR / "cpu-host.toml").read_bytes()
    measured = calibrate(seconds_budget=1.0)
    path = write_cpu_host_profile(measured, tmp_path / "cpu-host.toml")
    profile = load_profile(str(path))
    assert (PROFILES_DIR / "cpu-host.toml").read_bytes() == shipped  # tests never overwrite it
    assert profile.name == "cpu-host"
    g = profile.gemm
    matmul_rate = 2 * g.rows * g.cols * g.clock_hz * g.cores
    assert 1e8 <= matmul_rate <= 1e13
    assert g.rows == g.cols == TILE and g.weight_load_s == 0
    assert 1e7 <= profile.vector.flops_per_s <= 1e13
    assert 1e8 <= profile.memory.hbm_bw_bytes_per_s <= 1e12
    assert 1e8 <= profile.memory.sram_bw_bytes_per_s <= 1e13
    assert 1e-7 <= profile.kernel.launch_overhead_s <= 1e-2
    assert all(w >= 1 for w in profile.vector.op_weights.values())
    assert profile.vector.weight("exp") > profile.vector.weight("add")  # a transcendental costs more


def test_every_number_in_the_written_profile_is_commented(tmp_path):
    path = write_cpu_host_profile(calibrate(seconds_budget=0.5), tmp_path / "p.toml")
    text = path.read_text()
    tomllib.loads(text)
    assignments = [line for line in text.splitlines() if "=" in line and not line.startswith("#")
                   and not line.startswith(("name", "description"))]
    assert assignments and all("#" in line for line in assignments)
    assert sum("measured by optu calibrate on" in line for line in assignments) >= 6


def test_the_shipped_cpu_host_profile_is_calibrated():
    assert "measured by optu calibrate" in (PROFILES_DIR / "cpu-host.toml").read_text()
    assert load_profile("cpu-host").gemm.cores == 1
