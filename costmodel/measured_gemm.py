"""GEMM times by shape, measured on the machine a profile describes (a grid of (m, k, n) products):
a product is priced by interpolating the grid in log space, where a CPU's GEMM library changes its
efficiency with the shape in ways no tile model follows (a mid-size product runs at half the rate
of a large one; few rows or a thin K are dearer than their flops)."""
from __future__ import annotations

import functools
import math

import numpy as np

ShapeTimes = tuple[tuple[int, int, int, float], ...]  # (m, k, n, seconds) of an (m x k) @ (k x n) product


def grid_axes(times: ShapeTimes) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The sizes along m, k and n; raises ValueError unless `times` holds each (m, k, n) of their
    product once, with at least two sizes per axis (an interpolation needs both ends)."""
    axes = tuple(tuple(sorted({row[i] for row in times})) for i in range(3))
    if any(len(axis) < 2 for axis in axes):
        raise ValueError("needs at least two sizes of each of m, k and n")
    shapes = [row[:3] for row in times]
    if len(set(shapes)) != len(shapes) or len(shapes) != math.prod(len(a) for a in axes):
        raise ValueError(f"must hold every (m, k, n) of the grid {' x '.join(map(str, axes))} once")
    return axes  # type: ignore[return-value]


@functools.lru_cache(maxsize=8)
def _interpolator(times: ShapeTimes):
    from scipy.interpolate import RegularGridInterpolator  # only profiles with a table pay its import

    axes = grid_axes(times)
    index = [{size: i for i, size in enumerate(axis)} for axis in axes]
    log_s = np.empty(tuple(len(a) for a in axes))
    for m, k, n, seconds in times:
        log_s[index[0][m], index[1][k], index[2][n]] = math.log(seconds)
    return axes, RegularGridInterpolator([np.log(a) for a in axes], log_s)


def measured_gemm_s(times: ShapeTimes, m: int, k: int, n: int) -> float:
    """Seconds of an (m x k) @ (k x n) product: the grid interpolated linearly in log size and log
    time. Past the grid's largest size along an axis the time grows in proportion (the rate of the
    largest measured products holds); below its smallest it stays (a product smaller than any
    measured costs what the smallest did: overhead, not flops)."""
    axes, interpolate = _interpolator(times)
    point, scale = [], 1.0
    for size, axis in zip((m, k, n), axes):
        if size > axis[-1]:
            scale *= size / axis[-1]
        point.append(math.log(min(max(size, axis[0]), axis[-1])))
    return scale * math.exp(float(interpolate(point)[0]))
