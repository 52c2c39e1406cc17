"""Kernels as they run where XLA compiles the returned program (a profile's `kernel.fusion` is
"xla": a CPU, a GPU). XLA fuses a program its own way, whatever grouping the search chose, so there
the baseline and the returned program are both priced in XLA's grouping; a fused kernel the program
carries (a Pallas kernel) runs as the kernel it is and is priced as such.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from costmodel.formulas import program_estimate
from costmodel.profile import HardwareProfile
from lowering.kernel_json import RunsAs
from lowering.kernels import FusionPolicy, Kernel, KernelProgram, build_kernel_program
from wire.json_types import Program

CARRIED_OPS = frozenset({"flash_attention", "tiled"})  # ops that are one fused kernel of the program's own


def compiled_by_xla(profile: HardwareProfile) -> bool:
    """Whether XLA, not this compiler, groups a returned program into the kernels that run."""
    return profile.kernel.fusion == "xla"


def xla_policy(profile: HardwareProfile) -> FusionPolicy:
    """XLA's fusion: producer-consumer fusion of elementwise ops and reductions, one loop nest per
    kernel (an op reading a reduction's result starts the next; values inside stream through
    registers), each GEMM a library call of its own, with its elementwise epilogue where the
    profile's GEMMs take one."""
    return FusionPolicy("xla", gemm_alone=True, gemm_epilogue=bool(profile.kernel.gemm_epilogue), one_loop_nest=True)


def carried_kernels(kernels: Sequence[Kernel]) -> list[Kernel]:
    """The kernels a returned program carries as fused kernels of its own (they run as chosen)."""
    return [k for k in kernels if CARRIED_OPS & set(k.ops)]


def runs_as(kernel: Kernel, profile: HardwareProfile) -> RunsAs:
    """How `kernel` runs: as chosen on hardware that runs this compiler's kernels (the OPTU), as the
    Pallas kernel the program carries, or as part of whatever XLA makes of the rest."""
    if not compiled_by_xla(profile):
        return "chosen"
    return "pallas" if CARRIED_OPS & set(kernel.ops) else "xla"


def kernels_as_run(program: Program, profile: HardwareProfile, carried: Sequence[Kernel] = ()) -> KernelProgram:
    """`program`'s kernels as XLA groups it, each of the `carried` kernels (equation indices into
    `program`) kept whole with its own estimate."""
    run = build_kernel_program(program, profile, xla_policy(profile), pinned=[k.eqns for k in carried])
    kernels = [next((replace(c, id=k.id) for c in carried if set(c.eqns) <= set(k.eqns)), k) if carried else k
               for k in run.kernels]
    return replace(run, kernels=kernels, total=program_estimate(profile, [k.estimate for k in kernels]))
