"""The fair baseline's kernels: how a good conventional compiler groups a program on a profile."""
from __future__ import annotations

from costmodel.profile import HardwareProfile
from lowering.as_run import compiled_by_xla, kernels_as_run
from lowering.attention_kernels import with_attention_kernels
from lowering.kernels import POLICIES, KernelProgram, build_kernel_program
from wire.json_types import Program


def baseline_kernels(program: Program, profile: HardwareProfile) -> KernelProgram:
    """The cheapest grouping of every conventional fusion policy (greedy sibling fusion can block a
    vertical fusion, so no one policy is best everywhere; a conventional compiler is credited with
    the best of them), each also with every attention taken out as one kernel of its own where the
    profile's kernels hold two GEMMs: a compiler that fuses GEMM chains fuses an attention whole and
    tiles it over blocks of query rows (`row_blocked`, no sum reordered). Where XLA compiles the
    program, the conventional compiler is XLA itself: the program as XLA groups it."""
    if compiled_by_xla(profile):
        return kernels_as_run(program, profile)
    candidates = []
    for policy in POLICIES:
        grouped = build_kernel_program(program, profile, policy)
        candidates.append(grouped)
        regrouped = with_attention_kernels(program, [k.eqns for k in grouped.kernels]) \
            if profile.kernel.max_gemms >= 2 else None
        if regrouped:
            candidates.append(build_kernel_program(program, profile, groups=regrouped))
    return min(candidates, key=lambda k: k.total.time_s)
