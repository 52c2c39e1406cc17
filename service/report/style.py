"""How the report shows things: one colour and label per kernel bound (shared by the charts and the
graphs, so a colour means the same everywhere) and human units for seconds and bytes."""
from __future__ import annotations

# Colour-blind-safe (Okabe-Ito) colours, one per bound the cost model can name.
BOUND_COLORS = {"weight_load": "#E69F00", "optical": "#0072B2", "vector": "#009E73", "memory": "#D55E00",
                "launch": "#999999"}
BOUND_LABELS = {"weight_load": "weight load", "optical": "optical GEMM", "vector": "vector unit",
                "memory": "memory (HBM)", "launch": "launch overhead"}


def seconds(value: float | None) -> str:
    """`value` seconds in the unit that keeps three significant digits readable."""
    if value is None:
        return "n/a"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-12:.3g} ps" if value else "0 s"


def size(nbytes: float | None) -> str:
    """`nbytes` in binary units (KiB, MiB, ...)."""
    if nbytes is None:
        return "n/a"
    if abs(nbytes) < 1024:
        return f"{nbytes:.0f} B"
    value = nbytes / 1024
    for unit in ("KiB", "MiB"):
        if abs(value) < 1024:
            return f"{value:.3g} {unit}"
        value /= 1024
    return f"{value:.3g} GiB"
