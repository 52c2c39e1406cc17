"""A KernelProgram run kernel by kernel: each kernel becomes its own jitted JAX function over the
buffers it reads, and buffers flow between kernels the way the kernel program says they do."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lowering.kernel_json import KernelsJSON
from lowering.kernels import Kernel, avals_of
from wire.execute import jitted_program
from wire.json_types import Program


def kernel_subprogram(program: Program, kernel: Kernel) -> Program:
    """The kernel's equations as a standalone wire program; consts it reads stay consts."""
    eqns = [program["eqns"][i] for i in sorted(set(kernel.eqns))]  # program order is a valid schedule
    consts = {c["name"]: c for c in program.get("consts", [])}
    avals = avals_of(program)
    outputs = kernel.outputs or [o["name"] for o in eqns[-1]["out"]]
    return {"format": program["format"],
            "inputs": [{"name": n, "shape": list(avals[n][0]), "dtype": avals[n][1]}
                       for n in kernel.inputs if n not in consts],
            "consts": [consts[n] for n in kernel.inputs if n in consts],
            "eqns": eqns, "outputs": outputs}


class KernelRunner:
    """Runs the kernels of a lowered wire program in order (precompute first, then per call); one
    jitted function per kernel, compiled on first use."""

    def __init__(self, program: Program, kernels: list[Kernel]):
        self.program = program
        self.steps = [(k, kernel_subprogram(program, k)) for k in kernels]
        self.calls = [jitted_program(sub) for _, sub in self.steps]

    @classmethod
    def from_response(cls, response: KernelsJSON) -> KernelRunner:
        """The kernel program of an optimize response (`precompute_kernels`, then `kernels`)."""
        kernels = [Kernel.from_dict(k) for k in [*response["precompute_kernels"], *response["kernels"]]]
        return cls(response["program"], kernels)

    def buffers(self, *args: Any) -> dict[str, Any]:
        """Every buffer the kernels write, keyed by name, after one run on `args` (program inputs)."""
        env: dict[str, Any] = dict(zip((i["name"] for i in self.program["inputs"]), args))
        for (_, sub), call in zip(self.steps, self.calls):
            env.update(zip(sub["outputs"], call(*(env[i["name"]] for i in sub["inputs"]))))
        return env

    def __call__(self, *args: Any) -> Sequence[Any]:
        env = self.buffers(*args)
        return [env[o] if isinstance(o, str) else o for o in self.program["outputs"]]
