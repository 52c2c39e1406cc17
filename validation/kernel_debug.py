"""The kernel-by-kernel debugger: the original and the optimized program evaluated in float64 on the
validator's inputs, each optimized kernel's outputs compared with the original values they stand
for (validation/kernel_provenance.py), and the first kernel beyond its dtype's tolerance named with
the rewrites that can have shaped it."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from validation.compare import output_error, tolerance_for
from validation.debug_json import Findings, KernelFinding, KernelToCheck, OutputFinding
from validation.inputs import random_inputs
from validation.kernel_provenance import kernel_origin, rule_patterns, stands_for
from validation.widen import Widened, widen
from wire.json_types import Operand, Program

# The validator's fan-in-scaled draw (validation/validate.py DRAWS[1]): activations stay O(1), so a
# small wrong term (a dropped bias, a layer norm's epsilon) shows instead of drowning in growth.
FAN_IN_SCALED = True


def every_value(program: Program, args: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Every input and equation output of `program` in float64 on `args`: each kernel's outputs as
    running the kernels in order computes them, in one jitted call."""
    names = [o["name"] for e in program["eqns"] for o in e["out"]]
    values = dict(zip((s["name"] for s in program["inputs"]), widen(args)))
    if names:
        every: list[Operand] = list(names)
        values.update(zip(names, Widened({**program, "outputs": every})(widen(args))))
    return values


def debug_kernels(original: Program, optimized: Program, kernels: Sequence[KernelToCheck],
                  rules_fired: Mapping[str, int] | None = None,
                  patterns: Mapping[str, frozenset[str]] | None = None, seed: int = 0,
                  provenance: Mapping[str, str] | None = None) -> Findings:
    """Per kernel of `optimized` (as a response lists them: `id`, `kind`, `ops`, `inputs`, `outputs`;
    precompute kernels with `precompute: true`, run first), the largest normwise relative error of
    its outputs against the original values they stand for; the first kernel in execution order
    beyond its outputs' dtype tolerance; and per changed kernel the fired rules (`rules_fired`)
    that can have shaped it (`patterns`: rewrites/registry.py `pattern_ops`). Both programs must
    have one signature; `provenance` is the optimize response's (see `stands_for`)."""
    patterns = rule_patterns() if patterns is None else patterns
    args = random_inputs(original, seed, FAN_IN_SCALED)
    reference, candidate = every_value(original, args), every_value(optimized, args)
    mapping = stands_for(original, optimized, provenance)
    dtypes = {o["name"]: o["dtype"] for e in optimized["eqns"] for o in e["out"]}
    report: list[KernelFinding] = []
    first: KernelFinding | None = None
    for kernel in sorted(kernels, key=lambda k: (not k.get("precompute", False), k["id"])):
        origin = kernel_origin(original, kernel, mapping, rules_fired, patterns)
        outputs: list[OutputFinding] = []
        for name, target in origin["stands_for"].items():
            tolerance = tolerance_for(dtypes.get(name, "float32"), "real")
            error = output_error(reference[target], candidate[name]) if target in reference else None
            outputs.append({"value": name, "stands_for": target, "max_rel_error": error, "tolerance": tolerance,
                            "diverges": error is not None and error > tolerance})
        errors = [o["max_rel_error"] for o in outputs if o["max_rel_error"] is not None]
        entry: KernelFinding = {
            "id": kernel["id"], "precompute": kernel.get("precompute", False), "kind": kernel["kind"],
            "ops": list(kernel["ops"]), "outputs": outputs, "max_rel_error": max(errors, default=None),
            "diverges": any(o["diverges"] for o in outputs), "changed": origin["changed"],
            "replaces": origin["replaces"], "rewrites": origin["rewrites"]}
        report.append(entry)
        if entry["diverges"] and first is None:
            first = entry
    return {"seed": seed, "kernels": report, "first_divergent": first,
            "unmapped": [o["value"] for k in report for o in k["outputs"] if o["stands_for"] is None],
            "summary": _summary(first, len(report))}


def _summary(first: KernelFinding | None, count: int) -> str:
    if first is None:
        return f"all {count} kernels agree with the original values they stand for within their dtype's tolerance"
    # a diverging output has its error
    worst = max((o for o in first["outputs"] if o["diverges"]), key=lambda o: o["max_rel_error"] or 0.0)
    kind = "precompute kernel" if first["precompute"] else "kernel"
    rules = ", ".join(first["rewrites"]) or "no fired rule mentions its ops"
    return (f"{kind} {first['id']} ({' -> '.join(first['ops'])}) is the first to diverge: {worst['value']} differs "
            f"from the original's {worst['stands_for']} by {worst['max_rel_error']:.3g} relative (tolerance "
            f"{worst['tolerance']:g}); rewrites: {rules}")
