"""Checks of the regions an optimizer rewrote (`validation.regions`), and what such checks showed
for later candidates of the same search on the same draws (`CheckMemory`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from validation.compare import tolerance_for
from validation.inputs import Draw, InputDomain, InputDraws, nudged, nudges
from validation.judge import Tally, judge
from validation.regions import Region, RegionPlan, cone, distinct_checks, find_regions, original_side
from validation.value_numbering import ValueTable
from validation.verdict import Verdict
from validation.widen import CannotWiden, check_jit, float64_callable, widened
from wire.execute import program_to_callable
from wire.json_types import Program


@dataclass(frozen=True)
class PassedCheck:
    """A region check that passed: its worst error, output dtypes and telling draws."""

    max_rel_error: float
    dtypes: tuple[str, ...]
    trials: int


@dataclass
class CheckMemory:
    """What the checks of one original on one set of draws showed, for later candidates' checks on
    the same draws: the region checks that passed (by `check_key`), and the optimized values they
    showed equal to original values (by value number in `table`), which a later candidate's
    regions stop at as they stop at unchanged values."""

    table: ValueTable = field(default_factory=ValueTable)  # `real` for a real-mode check's memory
    passed: dict[str, PassedCheck] = field(default_factory=dict)
    verified: dict[int, str] = field(default_factory=dict)  # value number -> the original value it equals
    shown_by: dict[int, PassedCheck] = field(default_factory=dict)  # value number -> the check that showed it

    @classmethod
    def for_mode(cls, fp_mode: str) -> CheckMemory:
        return cls(ValueTable(real=fp_mode == "real"))

    def plan(self, original: Program, optimized: Program) -> RegionPlan | None:
        return find_regions(original, optimized, self.table, self.verified)

    def remember(self, plan: RegionPlan, check: PassedCheck) -> None:
        for region in plan.regions:
            for o, p in region.roots:
                self.verified[plan.numbered.key[p]], self.shown_by[plan.numbered.key[p]] = o, check


def region_validate(original: Program, optimized: Program, plan: RegionPlan, trials: int, seed: int,
                    draws: InputDraws | None, memory: CheckMemory) -> Verdict:
    """One jitted call per draw runs the original only as far as the regions need and each region
    on the values the original feeds it (one compile for all: XLA's fixed cost per module is
    larger than a small region's); each region's results are compared with the original's
    values there. Regions that are the same check (`check_key`) run once.
    A check in `memory` (an earlier candidate's, on the same draws) is not run again, and the
    values earlier checks showed equal to original values bound the regions (`CheckMemory.plan`);
    what passes here is remembered."""
    checks = distinct_checks(original, optimized, plan)
    reused = [memory.passed[key] for key in checks if key in memory.passed]
    earlier = reused + [memory.shown_by[number] for number in sorted(plan.relied)]
    fresh = {key: region for key, region in checks.items() if key not in memory.passed}
    extra = {"regions": len(plan.regions), "distinct_regions": len(checks), "region_share": round(plan.share, 4)}
    if reused:
        extra["reused_regions"] = len(reused)
    if plan.relied:
        extra["reused_values"] = len(plan.relied)
    if not fresh:
        verdict = Tally("regions", [d for check in earlier for d in check.dtypes])
        verdict.trials, verdict.worst = min(c.trials for c in earlier), max(c.max_rel_error for c in earlier)
        memory.remember(plan, PassedCheck(verdict.worst, tuple(verdict.dtypes), verdict.trials))
        return verdict.result("passed", f"every distinct rewritten region ({len(checks)}) and every value the "
                                        f"regions start from is what checks that passed already, on these "
                                        f"draws, showed", **extra)
    result = _run_regions(original, optimized, plan, list(fresh.values()), trials, seed, draws) | extra
    if result["status"] != "passed":
        return result
    for key, region in fresh.items():
        memory.passed[key] = PassedCheck(result["max_rel_error"], tuple(plan.original_numbered.aval[o][1]
                                                                        for o, _ in region.roots), result["trials"])
    if earlier:
        result["max_rel_error"] = max(result["max_rel_error"], *(c.max_rel_error for c in earlier))
        result["trials"] = min(result["trials"], *(c.trials for c in earlier))
        result["tolerance"] = {d: tolerance_for(d, "real") for d in
                               sorted({*result["tolerance"], *(d for c in earlier for d in c.dtypes)})}
        result["reason"] += (f"; {len(reused)} more distinct regions, and the {len(plan.relied)} values the "
                             f"regions start from that earlier checks showed equal to the original's, passed "
                             f"already, on these draws")
    memory.remember(plan, PassedCheck(result["max_rel_error"], tuple(result["tolerance"]), result["trials"]))
    return result


def _run_regions(original: Program, optimized: Program, plan: RegionPlan, checks: list[Region],
                 trials: int, seed: int, draws: InputDraws | None) -> Verdict:
    """The original runs in its declared types as far as the regions' inputs (its values there are
    what the regions are fed, so their rounding is the program's own); from those values on, each
    region and the original's computation of the same roots run in float64, and the original's
    sensitivity is measured there, on the values fed to it nudged: rounding inside the region is
    all that can separate a right rewrite from the original."""
    draws = draws or InputDraws()
    sides = [original_side(original, region, plan) for region in checks]
    leaves = list(dict.fromkeys(spec["name"] for side in sides for spec in side["inputs"]))
    program_inputs = {spec["name"] for spec in original["inputs"]}
    computed = [name for name in leaves if name not in program_inputs]
    needed, prefix = cone(original, leaves), cone(original, computed)  # what the check draws; what runs first
    roots = [o for region in checks for o, _ in region.roots]
    dtypes = [plan.original_numbered.aval[o][1] for o in roots]
    verdict = Tally("regions", dtypes)
    needed_names, prefix_names = [spec["name"] for spec in needed["inputs"]], [s["name"] for s in prefix["inputs"]]
    try:
        run_prefix = program_to_callable(prefix)
        subprograms = [region.subprogram(optimized, plan.numbered) for region in checks]
        references = [(float64_callable(side), [spec["name"] for spec in side["inputs"]]) for side in sides]
        calls = [(float64_callable(subprogram), region) for subprogram, region in zip(subprograms, checks)]
    except (TypeError, ValueError) as err:
        return verdict.result("inconclusive", f"the regions cannot be evaluated in float64: {err}", roots=roots)

    def original_sides(values: dict[str, Any]) -> list[Any]:  # the original's values at the roots
        return [out for fn, names in references for out in fn(*(values[n] for n in names))]

    def check(args: list[Any], directions: list[Any], relative: float):
        # One compiled call per draw: the prefix in its declared types, then in float64 the regions,
        # the original side, and the original side again on the fed values nudged. Casting and
        # nudging in XLA spares host copies of every fed value (the prefix's outputs are big).
        values = dict(zip(needed_names, args))
        if computed:
            values.update(zip(computed, run_prefix(*(values[n] for n in prefix_names))))
        wide = dict(zip(leaves, map(widened, (values[n] for n in leaves))))
        moved = dict(zip(leaves, nudged([wide[n] for n in leaves], directions, relative)))
        results = [out for fn, region in calls for out in fn(*(wide[o] for _, o in region.boundary))]
        return original_sides(wide), results, original_sides(moved)

    run = check_jit(check, [*sides, *subprograms])
    specs = [{"name": name, "shape": list(plan.original_numbered.aval[name][0]),
              "dtype": plan.original_numbered.aval[name][1]} for name in leaves]

    def evaluate(args: list[np.ndarray], draw: Draw, relative: float):
        with jax.enable_x64(True):
            try:
                outputs = run(args, nudges({"inputs": specs}, draw.seed, draws), relative)
            except (TypeError, ValueError) as err:  # a trace-time type error: the widened regions are ill-typed
                raise CannotWiden(f"the regions cannot be evaluated in float64: {err}") from err
        return tuple([np.asarray(x) for x in part] for part in outputs)

    return judge(needed, dtypes, evaluate, verdict, trials, seed, draws, InputDomain.of(original)) | {"roots": roots}
