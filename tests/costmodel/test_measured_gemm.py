"""A profile with measured GEMM shapes prices a product from them: interpolated between measured
shapes (log size, log time), in proportion past the largest, as the smallest below it; a table that
is not a full grid is refused naming its field; profiles without one keep the tile model."""
from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from scipy.interpolate import RegularGridInterpolator

from costmodel.formulas import gemm_cost, tiled_gemm_cost
from costmodel.measured_gemm import measured_gemm_s
from costmodel.profile import ProfileError, load_profile, profile_from_dict

AXES = ((8, 64, 512), (16, 256), (16, 256))


def _seconds(m: int, k: int, n: int) -> float:  # a made-up machine: 2 us a call, 1e11 flop/s
    return 2e-6 + 2 * m * k * n / 1e11


TABLE = tuple((m, k, n, _seconds(m, k, n)) for m, k, n in itertools.product(*AXES))


def _with_table(table) -> dict:
    data = load_profile("cpu-host").model_dump(mode="json")
    data["gemm"]["shape_times_s"] = [list(row) for row in table]
    return data


def test_a_measured_shape_is_priced_at_its_time_and_between_shapes_between_their_times():
    assert measured_gemm_s(TABLE, 64, 256, 16) == pytest.approx(_seconds(64, 256, 16))
    between = measured_gemm_s(TABLE, 128, 100, 64)
    corners = [_seconds(m, k, n) for m in (64, 512) for k in (16, 256) for n in (16, 256)]
    assert min(corners) < between < max(corners)
    assert measured_gemm_s(TABLE, 100, 100, 100) < measured_gemm_s(TABLE, 200, 100, 100)  # more rows, more time


def test_between_shapes_the_time_is_scipys_multilinear_interpolation_in_log_space():
    """Against the reference implementation, on a table whose log times are not linear in log size."""
    table = tuple((m, k, n, _seconds(m, k, n) * (1.7 if (m, k) == (64, 256) else 1.0)) for m, k, n in
                  itertools.product(*AXES))
    log_s = np.empty([len(a) for a in AXES])
    for m, k, n, s in table:
        log_s[AXES[0].index(m), AXES[1].index(k), AXES[2].index(n)] = math.log(s)
    reference = RegularGridInterpolator([np.log(a) for a in AXES], log_s)
    rng = random.Random(0)
    for _ in range(200):
        m, k, n = (rng.randint(axis[0], axis[-1]) for axis in AXES)
        expected = math.exp(reference([math.log(m), math.log(k), math.log(n)])[0])
        assert measured_gemm_s(table, m, k, n) == pytest.approx(expected, rel=1e-12)


def test_past_the_largest_shape_time_grows_in_proportion_and_below_the_smallest_it_stays():
    largest = _seconds(512, 256, 256)
    assert measured_gemm_s(TABLE, 2048, 256, 1024) == pytest.approx(4 * 4 * largest)
    assert measured_gemm_s(TABLE, 1, 4, 4) == pytest.approx(_seconds(8, 16, 16))


def test_a_profile_prices_matmuls_from_its_table_and_convolutions_by_its_tiles():
    profile = profile_from_dict(_with_table(TABLE))
    assert gemm_cost(profile, 64, 256, 16).time_s == pytest.approx(_seconds(64, 256, 16))
    assert gemm_cost(profile, 64, 256, 16, batch=3).time_s == pytest.approx(3 * _seconds(64, 256, 16))
    assert gemm_cost(profile, 64, 256, 16).tiling() == tiled_gemm_cost(profile, 64, 256, 16).tiling()
    plain = profile.model_copy(update={"gemm": profile.gemm.model_copy(update={"shape_times_s": ()})})
    assert gemm_cost(plain, 64, 256, 16) == tiled_gemm_cost(plain, 64, 256, 16)


@pytest.mark.parametrize("table, why", [
    (TABLE[:-1], "every \\(m, k, n\\) of the grid"),
    (TABLE + TABLE[:1], "every \\(m, k, n\\) of the grid"),
    (tuple(row for row in TABLE if row[0] == 8), "two sizes of each"),
])
def test_a_table_that_is_not_a_full_grid_is_refused_naming_its_field(table, why):
    with pytest.raises(ProfileError, match=why) as refused:
        profile_from_dict(_with_table(table))
    assert refused.value.field == "gemm.shape_times_s"
