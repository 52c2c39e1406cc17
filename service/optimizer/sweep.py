"""What-if sweeps for hardware co-design: optimize one program on a grid of profile overrides,
re-extracting at every point so the chosen program can change with the hardware."""
from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any

from costmodel.op_cost import GEMM_OPS, gemm_dims
from costmodel.profile import HardwareProfile, ProfileError, with_overrides
from lowering.kernels import avals_of
from service.optimizer import pipeline
from service.optimizer.options import OptimizeOptions
from service.optimizer.progress import report
from wire.json_types import Program

MAX_PARAMS = 2
MAX_POINTS = 25  # each point is a whole optimization; a bigger grid belongs in a batch job


class SweepError(ProfileError):
    """A sweep request that is not a valid grid; `field` is "params" or "params.<dotted name>"."""


def program_digest(program: Program) -> str:
    """Hash of a program's equations: equal digests mean the same chosen program."""
    return hashlib.sha256(json.dumps(program["eqns"], sort_keys=True).encode()).hexdigest()[:16]


def sweep_grid(base: HardwareProfile, params: dict[str, list[Any]]) -> list[tuple[dict[str, Any], HardwareProfile]]:
    """Every point of the grid as (overrides, profile), first parameter varying slowest.

    Every value is validated before any optimization runs, so a bad request costs nothing."""
    if not isinstance(params, dict) or not params:
        raise SweepError("params: give one or two profile fields, each with a list of values", field="params")
    if len(params) > MAX_PARAMS:
        raise SweepError(f"params: {len(params)} fields given; a sweep varies at most {MAX_PARAMS}",
                         field="params")
    for name, values in params.items():
        if not isinstance(values, list) or not values:
            raise SweepError(f"params.{name}: expected a non-empty list of values", field=f"params.{name}")
    n_points = 1
    for values in params.values():
        n_points *= len(values)
    if n_points > MAX_POINTS:
        raise SweepError(f"params: the grid has {n_points} points; the limit is {MAX_POINTS}", field="params")
    names = list(params)
    grid = []
    for combo in itertools.product(*(params[n] for n in names)):
        overrides = dict(zip(names, combo))
        try:
            grid.append((overrides, with_overrides(base, overrides)))
        except ProfileError as exc:
            raise SweepError(f"params: {exc}", field=f"params.{exc.field}" if exc.field else "params") from None
    return grid


def gemm_shapes(program: Program) -> list[str]:
    """`m x k x n` (`batch x m x k x n` when batched) of each GEMM in program order: shows a
    re-association or a merge that leaves the op counts unchanged."""
    avals = avals_of(program)
    shapes = []
    for e in program["eqns"]:
        if e["op"] in GEMM_OPS:
            ins = [avals[a] if isinstance(a, str) else ((), a["dtype"]) for a in e["in"]]
            out = (tuple(e["out"][0]["shape"]), e["out"][0]["dtype"])
            m, k, n, batch = gemm_dims(e["op"], e.get("params") or {}, ins, out)
            shapes.append(f"{m}x{k}x{n}" if batch == 1 else f"{batch}x{m}x{k}x{n}")
    return shapes


def sweep(program: Program, base: HardwareProfile, params: dict[str, list[Any]],
          options: OptimizeOptions) -> dict[str, Any]:
    """Optimize `program` at every grid point of `params` (dotted profile fields -> values of
    `base`'s)."""
    points = []
    grid = sweep_grid(base, params)
    for k, (overrides, profile) in enumerate(grid):
        report(point=f"{k + 1}/{len(grid)}")
        response = pipeline.optimize(program, profile, options)
        est = response["estimate"]
        points.append({
            "overrides": overrides,
            "estimate": {k: est[k] for k in ("optimized", "baseline", "speedup_vs_baseline", "lower_bound")},
            "kernels": len(response["kernels"]),
            # Saturation does not depend on the hardware; what a point changes is the extraction,
            # so the op delta and digest say what it chose and the rules say what was available.
            "rewrites": response["report"]["rewrites"],
            "op_delta": response["report"]["equations"]["op_delta"],
            "gemms": gemm_shapes(response["program"]),
            "program_digest": program_digest(response["program"]),
            "extraction": response["report"]["extraction"]["method"],
            "validation": response["validation"]["status"],
            "notes": response["report"]["notes"],
        })
    return {"hardware": base.name, "params": {k: list(v) for k, v in params.items()}, "points": points,
            "distinct_programs": len({p["program_digest"] for p in points})}
