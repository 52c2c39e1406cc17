"""GEMM times by shape, measured on the machine a profile describes (a grid of (m, k, n) products):
a product is priced by interpolating the grid in log space, where a CPU's GEMM library changes its
efficiency with the shape in ways no tile model follows (a mid-size product runs at half the rate
of a large one; few rows or a thin K are dearer than their flops)."""
from __future__ import annotations

import bisect
import functools
import itertools
import math

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


class _Grid:
    """One table's log sizes and log times, and the shapes priced from it so far (extraction prices
    the same few shapes over and over)."""

    def __init__(self, times: ShapeTimes):
        self.axes = grid_axes(times)
        self.logs = [[math.log(size) for size in axis] for axis in self.axes]
        index = [{size: i for i, size in enumerate(axis)} for axis in self.axes]
        self.log_s = {(index[0][m], index[1][k], index[2][n]): math.log(s) for m, k, n, s in times}
        self.priced: dict[tuple[int, int, int], float] = {}

    def seconds(self, m: int, k: int, n: int) -> float:
        if (m, k, n) not in self.priced:
            self.priced[m, k, n] = self._interpolated(m, k, n)
        return self.priced[m, k, n]

    def _interpolated(self, m: int, k: int, n: int) -> float:
        """Multilinear in log size and log time between the grid's neighbours of the point (clamped
        to the grid), times the proportion past its largest sizes."""
        cells, scale = [], 1.0
        for size, axis, logs in zip((m, k, n), self.axes, self.logs):
            if size > axis[-1]:
                scale *= size / axis[-1]
            x = math.log(min(max(size, axis[0]), axis[-1]))
            i = min(bisect.bisect_right(logs, x), len(logs) - 1) - 1
            cells.append((i, (x - logs[i]) / (logs[i + 1] - logs[i])))
        log_s = 0.0
        for corner in itertools.product((0, 1), repeat=3):
            weight = math.prod(w if up else 1.0 - w for (_, w), up in zip(cells, corner))
            if weight:
                log_s += weight * self.log_s[tuple(i + up for (i, _), up in zip(cells, corner))]
        return scale * math.exp(log_s)


@functools.lru_cache(maxsize=8)
def _grid(times: ShapeTimes) -> _Grid:
    return _Grid(times)


def measured_gemm_s(times: ShapeTimes, m: int, k: int, n: int) -> float:
    """Seconds of an (m x k) @ (k x n) product: the grid interpolated linearly in log size and log
    time. Past the grid's largest size along an axis the time grows in proportion (the rate of the
    largest measured products holds); below its smallest it stays (a product smaller than any
    measured costs what the smallest did: overhead, not flops)."""
    return _grid(times).seconds(m, k, n)
