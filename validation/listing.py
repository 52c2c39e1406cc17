"""A human-readable listing of a KernelProgram: one block per kernel (what it reads, what it
computes, its tiling, its estimate), and, to explain a result, the rewrites that shaped each kernel.
Deterministic, so golden tests can pin it."""
from __future__ import annotations

from collections.abc import Mapping

from lowering.kernel_json import BufferJSON
from lowering.kernels import Kernel, KernelProgram
from validation.kernel_provenance import kernel_origin, rule_patterns, stands_for
from validation.response_json import ResponseJSON
from wire.json_types import Program


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.3f} us"


def _buffer(b: BufferJSON) -> str:
    shape = "x".join(str(d) for d in b["shape"]) or "scalar"
    return f"{b['name']}: {b['dtype']}[{shape}] @{b['level']}"


def _block(kernel: Kernel, label: str, notes: list[str] = ()) -> list[str]:
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
    return lines + [f"  {note}" for note in notes]


def kernel_listing(program: KernelProgram, hardware: str,
                   notes: Mapping[tuple[bool, int], list[str]] | None = None) -> str:
    """The listing: per-call kernels in execution order, then the weight-only precompute; `notes`
    adds lines to a kernel's block, by (precompute?, kernel id)."""
    notes = notes or {}
    total = program.total
    lines = [f"# kernel program on {hardware}: {len(program.kernels)} kernels per call, "
             f"{_us(total.time_s)}, hbm={int(total.hbm_bytes)} B, energy={total.energy_j:.3e} J"]
    for kernel in program.kernels:
        lines += _block(kernel, "kernel", notes.get((False, kernel.id), []))
    if program.precompute:
        lines.append(f"# precompute (once per weight set): {len(program.precompute)} kernels, "
                     f"{_us(program.precompute_total.time_s)}")
        for kernel in program.precompute:
            lines += _block(kernel, "precompute", notes.get((True, kernel.id), []))
    return "\n".join(lines) + "\n"


def explained_listing(original: Program, response: ResponseJSON) -> str:
    """The listing of an optimize `response` with, per kernel, the rewrites that shaped it: the fired
    rules whose patterns mention its ops or the ops of the `original` equations it replaces."""
    mapping, patterns = stands_for(original, response["program"], response.get("provenance")), rule_patterns()
    notes = {}
    for precompute, kernels in ((False, response["kernels"]), (True, response.get("precompute_kernels", []))):
        for kernel in kernels:
            origin = kernel_origin(original, kernel, mapping, response["report"]["rewrites"], patterns)
            shaped = ", ".join(origin["rewrites"]) or ("none of the fired rules mentions its ops" if origin["changed"]
                                                       else "none: it computes the original as written")
            notes[(precompute, kernel["id"])] = [f"{'rewrites':13s} {shaped}"]
    return kernel_listing(KernelProgram.from_response(response), response["estimate"]["hardware"], notes)
