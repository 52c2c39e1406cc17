"""The report's charts as Vega-Lite specs built with altair: the kernel timeline (one bar per
kernel, as long as its estimated time, coloured by what bounds it) and the kernels' roofline."""
from __future__ import annotations

from typing import Any

import altair as alt

from costmodel.profile import HardwareProfile
from lowering.kernel_json import KernelJSON
from service.report.style import BOUND_COLORS, BOUND_LABELS, seconds, size

WIDTH = 760
ROW_PX = 18  # one timeline row per kernel
ChartRow = dict[str, str | float]  # one datum of a chart: its fields by name


def _bound_colour() -> alt.Color:
    return alt.Color("bound:N", title="bound", scale=alt.Scale(domain=list(BOUND_LABELS.values()),
                                                                 range=list(BOUND_COLORS.values())))


def _kernel_facts(kernel: KernelJSON) -> ChartRow:
    est = kernel["estimate"]
    return {"kernel": f"k{kernel['id']}", "order": kernel["id"], "kind": kernel["kind"],
            "ops": " ".join(kernel["ops"]), "time": seconds(est["time_s"]), "hbm": size(est["hbm_bytes"]),
            "bound": BOUND_LABELS[est["bound"]]}


def timeline_rows(kernels: list[KernelJSON], dispatch_s: float = 0.0) -> list[ChartRow]:
    """One row per kernel in execution order: start and end in microseconds, kernels back to back,
    after the call's dispatch (a row of its own where the profile charges one)."""
    rows, start_s = [], dispatch_s
    if dispatch_s:
        rows.append({"kernel": "dispatch", "order": -1, "kind": "dispatch", "ops": "", "time": seconds(dispatch_s),
                     "hbm": size(0), "bound": BOUND_LABELS["launch"], "start_us": 0.0, "end_us": dispatch_s * 1e6})
    for kernel in kernels:
        end_s = start_s + kernel["estimate"]["time_s"]
        rows.append(_kernel_facts(kernel) | {"start_us": start_s * 1e6, "end_us": end_s * 1e6})
        start_s = end_s
    return rows


def timeline_spec(kernels: list[KernelJSON], dispatch_s: float = 0.0) -> dict[str, Any]:
    chart = alt.Chart(alt.Data(values=timeline_rows(kernels, dispatch_s))).mark_bar(height={"band": 0.8}).encode(
        x=alt.X("start_us:Q", title="estimated time per call (µs)"), x2="end_us:Q",
        y=alt.Y("kernel:N", title=None, sort=alt.EncodingSortField(field="order", op="min")),
        color=_bound_colour(),
        tooltip=["kernel:N", "kind:N", "ops:N", "time:N", "hbm:N", "bound:N"])
    return chart.properties(width=WIDTH, height=alt.Step(ROW_PX)).to_dict()


def roofline_points(kernels: list[KernelJSON]) -> list[ChartRow]:
    """Kernels that have a place on log axes (some flops and some HBM traffic), with their
    arithmetic intensity (flop/byte) and attained throughput (GFLOP/s)."""
    return [_kernel_facts(k) | {"intensity": k["estimate"]["flops"] / k["estimate"]["hbm_bytes"],
                                "gflops": k["estimate"]["flops"] / k["estimate"]["time_s"] / 1e9}
            for k in kernels
            if k["estimate"]["flops"] > 0 and k["estimate"]["hbm_bytes"] > 0 and k["estimate"]["time_s"] > 0]


def roofs(profile: HardwareProfile, low: float, high: float) -> list[ChartRow]:
    """The profile's ceilings over intensities `low`..`high`: HBM bandwidth times intensity up to
    each unit's peak (the GEMM cores' multiply-accumulates, the vector unit's flops)."""
    bandwidth = profile.memory.hbm_bw_bytes_per_s
    gemm = profile.gemm
    peaks = {"GEMM peak": 2.0 * gemm.rows * gemm.cols * gemm.cores * gemm.clock_hz,
             "vector peak": profile.vector.flops_per_s}
    rows = []
    for roof, peak in peaks.items():
        ridge = peak / bandwidth
        for intensity in sorted({low, min(max(ridge, low), high), high}):
            rows.append({"roof": roof, "intensity": intensity, "gflops": min(peak, intensity * bandwidth) / 1e9})
    return rows


def roofline_spec(kernels: list[KernelJSON], profile: HardwareProfile | None) -> dict[str, Any]:
    """Kernels as points on log-log axes under the profile's roofs (no roofs without a profile)."""
    points = roofline_points(kernels)
    log_x = alt.Scale(type="log")
    marks = alt.Chart(alt.Data(values=points)).mark_point(filled=True, size=80).encode(
        x=alt.X("intensity:Q", title="arithmetic intensity (flop per HBM byte)", scale=log_x),
        y=alt.Y("gflops:Q", title="attained GFLOP/s", scale=alt.Scale(type="log")),
        color=_bound_colour(), tooltip=["kernel:N", "kind:N", "ops:N", "time:N", "hbm:N", "bound:N"])
    layers: list[alt.Chart] = [marks]
    if profile is not None and points:
        intensities = [p["intensity"] for p in points]
        lines = alt.Chart(alt.Data(values=roofs(profile, min(intensities) / 10, max(intensities) * 10)))
        layers.insert(0, lines.mark_line(color="#444444").encode(
            x="intensity:Q", y="gflops:Q", strokeDash=alt.StrokeDash("roof:N", title="ceiling")))
    return alt.layer(*layers).properties(width=WIDTH, height=360).to_dict()
