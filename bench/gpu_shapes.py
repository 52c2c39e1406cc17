"""Bench models at GPU-sized shapes: a call at the registry's small shapes takes microseconds on a
GPU, where launch and dispatch overheads decide and no kernel's tiling shows. Each model's
activations (every argument but its weights, or the first alone where the others must keep their
size) are made longer along one axis (the leading one, else the next: a batch, rows) by a power of
two, the least that makes gpu-roofline estimate one call of the program as written at `min_call_s`
or more. An axis is scaled only where doubling it doubles the work (not an input the model reads
only the start of) and keeps every loop's trip count: a GPU-sized workload has more rows per
kernel, not more sequential steps. A model whose code fixes every size (a reshape to a constant
batch) stays as it is. Shapes only: nothing the size of the scaled arguments is allocated here."""
from __future__ import annotations

from typing import Any

import jax

from bench.models.registry import build
from costmodel.formulas import Estimate
from costmodel.profile import load_profile
from lowering.baseline import baseline_kernels
from wire.capture import capture
from wire.json_types import Program

MAX_FACTOR = 1 << 16
GROWS = 1.5  # doubling a scaled axis must make the flops or the HBM traffic at least this much more


def _scaled(args: tuple[Any, ...], scaled: frozenset[int], axis: int, factor: int) -> tuple[Any, ...]:
    """`args` as shapes, each leaf of the arguments `scaled` `factor` times as long along `axis`."""
    def spec(x: Any, scale: bool) -> jax.ShapeDtypeStruct:
        shape = list(x.shape)
        if scale and len(shape) > axis:
            shape[axis] *= factor
        return jax.ShapeDtypeStruct(tuple(shape), x.dtype)

    return tuple(jax.tree_util.tree_map(lambda x, scale=i in scaled: spec(x, scale), a) for i, a in enumerate(args))


def _trip_counts(program: Program) -> list[Any]:
    return [e.get("params", {}).get("length") for e in program["eqns"] if e["op"] in ("scan", "while")]


def gpu_sized(name: str, min_call_s: float, profile: str = "gpu-roofline") -> tuple[Program, int]:
    """The model's program at the least power-of-two factor of its activations' size that `profile`
    estimates at `min_call_s` or more per call as written (its fair baseline), and the factor (1:
    the registry's shapes already are, or nothing scales)."""
    fn, args, weight_argnums = build(name)
    hardware = load_profile(profile)

    def traced(how: tuple[frozenset[int], int], factor: int) -> Program | None:
        try:
            return capture(fn, *_scaled(args, *how, factor), weight_argnums=weight_argnums)
        except (TypeError, ValueError):  # the model's code fixes a size this scales
            return None

    def estimate(program: Program) -> Estimate:
        return baseline_kernels(program, hardware).total

    program = capture(fn, *args, weight_argnums=weight_argnums)
    base = estimate(program)
    if base.time_s >= min_call_s:
        return program, 1
    activations = [i for i in range(len(args)) if i not in weight_argnums]
    subsets = [frozenset(activations), *(frozenset([i]) for i in activations)]
    for how in [(subset, axis) for axis in (0, 1) for subset in subsets]:
        doubled = traced(how, 2)
        if doubled is None or _trip_counts(doubled) != _trip_counts(program):
            continue
        grown = estimate(doubled)
        if grown.flops >= GROWS * base.flops or grown.hbm_bytes >= GROWS * base.hbm_bytes:
            break
    else:
        return program, 1
    factor, program = 2, doubled
    while factor < MAX_FACTOR and grown.time_s < min_call_s and (larger := traced(how, 2 * factor)) is not None:
        factor, program, grown = 2 * factor, larger, estimate(larger)
    return program, factor
