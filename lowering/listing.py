"""A human-readable listing of a KernelProgram: one block per kernel (what it reads, what it
computes, its tiling, its estimate). Deterministic, so golden tests can pin it."""
from __future__ import annotations

from typing import Any

from lowering.kernels import Kernel, KernelProgram


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.3f} us"


def _buffer(b: dict[str, Any]) -> str:
    shape = "x".join(str(d) for d in b["shape"]) or "scalar"
    return f"{b['name']}: {b['dtype']}[{shape}] @{b['level']}"


def _block(kernel: Kernel, label: str) -> list[str]:
    est = kernel.estimate
    lines = [f"{label} {kernel.id} {kernel.kind}  {_us(est.time_s)}  bound={est.bound}  "
             f"hbm={int(est.hbm_bytes)} B  flops={int(est.flops)}  energy={est.energy_j:.3e} J"]
    for role in ("input", "output", "intermediate"):
        buffers = [_buffer(b) for b in kernel.buffers if b["role"] == role]
        if buffers:
            lines.append(f"  {role + 's':13s} " + ", ".join(buffers))
    lines.append(f"  {'computes':13s} " + " -> ".join(kernel.ops))
    if kernel.tiling:
        lines.append(f"  {'tiling':13s} " + ", ".join(f"{k}={v}" for k, v in kernel.tiling.items()))
    return lines


def kernel_listing(program: KernelProgram, hardware: str) -> str:
    """The listing: per-call kernels in execution order, then the weight-only precompute."""
    total = program.total
    lines = [f"# kernel program on {hardware}: {len(program.kernels)} kernels per call, "
             f"{_us(total.time_s)}, hbm={int(total.hbm_bytes)} B, energy={total.energy_j:.3e} J"]
    for kernel in program.kernels:
        lines += _block(kernel, "kernel")
    if program.precompute:
        lines.append(f"# precompute (once per weight set): {len(program.precompute)} kernels, "
                     f"{_us(program.precompute_total.time_s)}")
        for kernel in program.precompute:
            lines += _block(kernel, "precompute")
    return "\n".join(lines) + "\n"
