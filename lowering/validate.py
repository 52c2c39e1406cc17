"""Translation validation: the optimized program must compute what the original computes.

Verdicts (`status`): `identical` (value numbering finds the same computation: nothing is run),
`passed`, `failed`, `inconclusive` (the check could not tell, with the reason), and `skipped` (the
caller turned validation off; set by the pipeline).

`real` mode evaluates both programs in float64 (complex128; JAX's x64 scoped to the check) on the
same seeded inputs, so neither program's own rounding decides. A draw of inputs can tell only
where the original is stable there: it is evaluated again on the inputs nudged by 1e-12 relative
(1e-14 for float64 programs), and where its outputs move by more than the declared dtype's
tolerance (chaos, ill-conditioning) the draw tells nothing; draws contracted toward zero are
tried next. A program passes when `TRIALS` draws that can tell all agree within what float64
rounding explains (never more than the tolerance), fails when one that can tell disagrees, and is
inconclusive when too few draws could tell. Integer and
boolean outputs compare exactly; complex ones on both parts.

Big programs are mostly unchanged by the optimizer, so the check runs only what changed where it
can (`find_regions`): the original runs in its declared types as far as the regions' inputs, and
from the values it feeds them each rewritten region and the original's own computation of the
same values run in float64 (sensitivity measured there too, on those values nudged). Of regions
that are the same check (an encoder's layers) the earliest runs; a check that passed already on
the same draws (an earlier candidate of the same search) is not run again, and the values it
showed equal to the original's bound a later candidate's regions as unchanged values do. Where
the regions do not pass, the whole programs run; a failed region is never overruled by a whole
run that passes (deep programs can hide a wrong value, and the pairing of values is inferred):
the verdict is then `inconclusive`.

`exact` mode runs both programs in their declared types and requires bit-identical results.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import jax
import numpy as np

from lowering.compare import bit_identical, informative, output_error, tolerance_for
from lowering.kernels import output_avals
from lowering.observability import change_shows
from lowering.regions import Region, RegionPlan, ValueTable, cone, distinct_checks, find_regions, original_side
from lowering.validation_inputs import TRIALS, Draw, InputDraws, nudged, nudges, positive_inputs, random_inputs
from lowering.widen import CannotWiden, Widened, float64_callable, widen
from wire.execute import jitted_program

# Evaluated in float64, a right rewrite differs from the original only by rounding: about as much
# as the original moves when its inputs change by float64's rounding (its measured sensitivity
# scaled down from the nudge), times a slack for reductions that round many times (a random nudge
# shows less than worst-case rounding). A difference beyond that, or beyond the dtype's
# tolerance, is a different program: a constant's sign flipped inside a layer norm's epsilon too.
FLOAT64_ROUNDING = 2.0**-53
ROUNDING_SLACK = 1e4
ROUNDING_FLOOR = 1e-12
MAX_REGION_SHARE = 0.6  # beyond this share of the optimized program in regions, checking them costs as much as the whole
NUDGE = {"float64": 1e-14, "complex128": 1e-14}  # relative input change measuring sensitivity; else 1e-12
DEFAULT_NUDGE = 1e-12
# The draws tried in turn, (fan-in scaled, contraction), each with its own seed. The first two are
# unlike each other, as a pass needs two: standard normal (deep random networks stay sensitive to
# every weight) and scaled like an initialized network (activations O(1), so a layer norm's epsilon
# or a small bias still shows). Then contracted toward zero, where recurrences and saturating
# activations stop amplifying differences.
DRAWS = ((False, 1.0), (True, 1.0), (False, 1.0), (True, 0.3), (True, 0.1), (True, 0.03), (True, 0.01))


@dataclass
class Verdict:
    """What the draws of one check found; `result` is the response's `validation` object."""

    criterion: str
    dtypes: list[str]
    trials: int = 0
    tried: list[dict[str, Any]] = field(default_factory=list)
    worst: float = 0.0

    def tolerance(self) -> dict[str, float]:
        return {d: tolerance_for(d, "real") for d in sorted(set(self.dtypes))}

    def result(self, status: str, reason: str, **extra: Any) -> dict[str, Any]:
        return {"status": status, "max_rel_error": self.worst, "tolerance": self.tolerance(), "trials": self.trials,
                "criterion": self.criterion, "reason": reason, "draws": self.tried, **extra}


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

    table: ValueTable = field(default_factory=ValueTable)
    passed: dict[str, PassedCheck] = field(default_factory=dict)
    verified: dict[int, str] = field(default_factory=dict)  # value number -> the original value it equals
    shown_by: dict[int, PassedCheck] = field(default_factory=dict)  # value number -> the check that showed it

    def plan(self, original: dict[str, Any], optimized: dict[str, Any]) -> RegionPlan | None:
        return find_regions(original, optimized, self.table, self.verified)

    def remember(self, plan: RegionPlan, check: PassedCheck) -> None:
        for region in plan.regions:
            for o, p in region.roots:
                self.verified[plan.numbered.key[p]], self.shown_by[plan.numbered.key[p]] = o, check


def identical() -> dict[str, Any]:
    return {"status": "identical", "max_rel_error": 0.0, "tolerance": {}, "trials": 0, "criterion": "identical",
            "reason": "value numbering finds the same computation in both programs; nothing was run"}


def validate(original: dict[str, Any], optimized: dict[str, Any], fp_mode: str = "real",
             trials: int = TRIALS, seed: int = 0, draws: InputDraws | None = None,
             memory: CheckMemory | None = None) -> dict[str, Any]:
    """The verdict on `optimized` against `original` (see the module docstring); `draws` may hold
    the inputs drawn ahead, and `memory` what earlier candidates' checks showed on them."""
    memory, draws = memory or CheckMemory(), draws or InputDraws()
    plan = memory.plan(original, optimized)
    if plan is not None and not plan.regions and not plan.relied:
        return identical()
    if plan is None or fp_mode != "real" or plan.share > MAX_REGION_SHARE:
        return validate_whole(original, optimized, fp_mode, trials, seed, draws)
    regions = region_validate(original, optimized, plan, trials, seed, draws, memory)
    if regions["status"] == "passed":
        return regions
    whole = validate_whole(original, optimized, fp_mode, trials, seed, draws)
    if regions["status"] != "failed" or whole["status"] != "passed":
        return whole
    # A failed region is not overruled by a whole run unless that run could have seen it: a change of
    # the size the region showed, at the original value it was paired with, moves the outputs
    # beyond the whole run's threshold, so the pairing (inferred by value numbering) was the error.
    value = regions["roots"][regions["failed_output"]]
    telling = [d for d in whole["draws"] if d["can_tell"]]
    if change_shows(original, value, regions["failed_error"], telling, draws):
        return {**whole, "reason": f"{whole['reason']}; a rewritten region disagreed with the original value "
                                   f"{value} it was paired with, but a change that size there shows in these "
                                   f"runs' outputs, so that pairing was wrong"}
    return {**whole, "status": "inconclusive", "criterion": "regions",
            "reason": f"a rewritten region disagrees with the original value {value} it was paired with "
                      f"({regions['reason']}) while the whole programs agree, and a change that size there "
                      f"need not show in the outputs: the check cannot tell which to believe"}


def validate_pieces(original: dict[str, Any], optimized: dict[str, Any],
                    pieces: list[tuple[dict[str, Any], dict[str, Any]]], fp_mode: str = "real") -> dict[str, Any]:
    """`optimized` stitched from optimized pieces of `original` (a piecewise search): each distinct
    piece checked against the piece it replaces, as a program of its own (an encoder's twelve
    layers: one check). A failed piece is the verdict; one that cannot tell sends it to `validate`."""
    results = [validate(written, searched, fp_mode) for written, searched in pieces]
    failed = [r for r in results if r["status"] == "failed"]
    if failed:
        return {**failed[0], "criterion": "pieces", "reason": f"a piece failed: {failed[0]['reason']}"}
    if any(r["status"] not in ("passed", "identical") for r in results):
        return validate(original, optimized, fp_mode)
    if all(r["status"] == "identical" for r in results):
        return identical()
    checked = [r for r in results if r["status"] == "passed"]
    worst = max(checked, key=lambda r: r["max_rel_error"])
    return {**worst, "trials": min(r["trials"] for r in checked), "criterion": "pieces",
            "pieces": [r["criterion"] for r in results],
            "reason": f"each of {len(results)} distinct pieces passed or is identical"}


def validate_whole(original: dict[str, Any], optimized: dict[str, Any], fp_mode: str = "real",
                   trials: int = TRIALS, seed: int = 0, draws: InputDraws | None = None) -> dict[str, Any]:
    """Both whole programs on the same inputs: in float64 (`real`), or in their own types (`exact`)."""
    dtypes = [dtype for _, dtype in output_avals(original)]
    if fp_mode == "exact":
        return _exact(original, optimized, dtypes, trials, seed, draws)
    try:
        reference, candidate = float64_callable(original), float64_callable(optimized)
    except (TypeError, ValueError) as err:
        return Verdict("float64", dtypes).result("inconclusive", f"the programs cannot be evaluated in float64: {err}")
    draws = draws or InputDraws()
    runs = checked_runs(lambda *args: (reference(*args), args), lambda args: candidate(*args))
    candidate_alone = functools.cache(lambda: Widened(optimized))  # compiled only when it is needed

    def evaluate(args: list[np.ndarray], draw: Draw, relative: float):
        # The original's outputs on a draw (and nudged) do not depend on the candidate: an earlier
        # candidate's check of the same original computed them already (the original is kept
        # with them, so its id names it while they live).
        key = ("whole", id(original), draw, relative)
        if key in draws.outputs:
            _, refs, moved = draws.outputs[key]
            return refs, candidate_alone()(widen(args)), moved
        refs, results, moved = runs(args, nudges(original, draw.seed, draws), relative)
        draws.outputs[key] = (original, refs, moved)
        return refs, results, moved

    return judge(original, dtypes, evaluate, Verdict("float64", dtypes), trials, seed, draws)


Outputs = list[np.ndarray]
# (inputs in their declared types, nudge directions, nudge) -> (reference's, candidate's, nudged reference's)
Runs = Callable[[list[np.ndarray], list[np.ndarray | None], float], tuple[Outputs, Outputs, Outputs]]
# (inputs in their declared types, the draw, nudge) -> (reference's, candidate's, nudged reference's)
Evaluate = Callable[[list[np.ndarray], Draw, float], tuple[Outputs, Outputs, Outputs]]


def checked_runs(reference: Callable[..., tuple[list, Any]], candidate: Callable[[Any], list]) -> Runs:
    """`reference` (of widened inputs: the reference's outputs and what `candidate` reads) and
    `candidate` (its outputs), jitted once and called twice per draw: on the widened inputs, and on
    them nudged along their directions, where the candidate is skipped (a conditional, so the
    nudged call is the same compiled program: XLA's compile of a big program costs more than a
    run). Widening and nudging stay on the host: in XLA each input's cast and nudge is a kernel of
    its own, whose compile time on an 80-matmul chain exceeded the runs'."""

    def runs(compare, *args):
        refs, fed = reference(*args)
        avals = jax.eval_shape(candidate, fed)
        skipped = lambda _: [jax.numpy.zeros(a.shape, a.dtype) for a in avals]
        return refs, jax.lax.cond(compare, candidate, skipped, fed)

    run = jax.jit(runs)

    def evaluate(args: list[np.ndarray], directions: list[np.ndarray | None], relative: float):
        wide = widen(args)
        with jax.enable_x64(True):
            try:
                (refs, results), (moved, _) = run(True, *wide), run(False, *nudged(wide, directions, relative))
            except (TypeError, ValueError) as err:  # a trace-time type error: the widened program is ill-typed
                raise CannotWiden(f"the programs cannot be evaluated in float64: {err}") from err
        return [np.asarray(x) for x in refs], [np.asarray(x) for x in results], [np.asarray(x) for x in moved]

    return evaluate


def judge(program: dict[str, Any], dtypes: list[str], evaluate: Evaluate, verdict: Verdict,
          trials: int, seed: int, draws: InputDraws | None, positive: frozenset[str] | None = None) -> dict[str, Any]:
    """Draw inputs for `program` (`DRAWS` in turn; `positive` ones as `random_inputs` says) until
    `trials` of them can tell, comparing the candidate's outputs with the reference's
    (`evaluate`, see `checked_runs`)."""
    try:
        return _judge(program, dtypes, evaluate, verdict, trials, seed, draws, positive)
    except CannotWiden as err:
        return verdict.result("inconclusive", str(err))


def _judge(program: dict[str, Any], dtypes: list[str], evaluate: Evaluate, verdict: Verdict,
           trials: int, seed: int, draws: InputDraws | None, positive: frozenset[str] | None) -> dict[str, Any]:
    nudge = min(NUDGE.get(d, DEFAULT_NUDGE) for d in dtypes) if dtypes else DEFAULT_NUDGE
    tolerances = [tolerance_for(d, "real") for d in dtypes]
    positions_only = set(range(len(dtypes)))  # outputs with no finite value on every draw that told so far
    for k, (scaled, contraction) in enumerate(DRAWS):
        args = random_inputs(program, seed + k, scaled, draws, contraction, positive)
        refs, results, moved = evaluate(args, Draw(seed + k, scaled, contraction), nudge)
        errors = [output_error(r, c) for r, c in zip(refs, results)]
        spread = [output_error(r, m) for r, m in zip(refs, moved)]
        # A draw where every output overflowed tells nothing (matching inf positions pass anything); one
        # output with no finite value beside others that have them (a mask of -inf) is compared by
        # its nan/inf positions, and the others tell.
        finite = [informative(r) for r in refs]
        can_tell = (not refs or any(finite)) and all(s <= t for s, t in zip(spread, tolerances))
        limits = [min(t, max(ROUNDING_FLOOR, ROUNDING_SLACK * s * FLOAT64_ROUNDING / nudge))
                  for s, t in zip(spread, tolerances)]
        verdict.tried.append({"seed": seed + k, "fan_in_scaled": scaled, "contraction": contraction,
                              "max_rel_error": max(errors, default=0.0), "sensitivity": max(spread, default=0.0),
                              "threshold": max(limits, default=0.0), "can_tell": can_tell})
        if not can_tell:
            continue
        verdict.worst = max(verdict.worst, *errors, 0.0)
        wrong = [(i, e, t) for i, (e, t) in enumerate(zip(errors, limits)) if e > t]
        if wrong:
            i, e, t = wrong[0]
            return verdict.result("failed", f"output {i} differs by {e:.3g} relative on draw {seed + k}, beyond "
                                            f"what rounding explains ({t:.3g}; tolerance {tolerances[i]:g}): the "
                                            f"original moves by only {spread[i]:.3g} when its inputs change by "
                                            f"{nudge:g} relative", failed_output=i, failed_error=e)
        verdict.trials += 1
        positions_only -= {i for i, f in enumerate(finite) if f}
        if verdict.trials == trials:
            only = (f"; outputs {sorted(positions_only)} had no finite value on these draws and were compared by "
                    f"their nan/inf positions only") if positions_only else ""
            return verdict.result("passed", f"{trials} input draws agree within what rounding explains, each "
                                            f"stable under a {nudge:g} relative change of the inputs{only}")
    worst_spread = max((d["sensitivity"] for d in verdict.tried), default=0.0)
    return verdict.result("inconclusive", f"only {verdict.trials} of {len(verdict.tried)} input draws (contracted down "
                                          f"to x{DRAWS[-1][1]:g}) could tell: the original's outputs move by up to "
                                          f"{worst_spread:.3g} relative when its inputs change by {nudge:g}, beyond "
                                          f"the tolerance (or overflow)")


def _exact(original: dict[str, Any], optimized: dict[str, Any], dtypes: list[str], trials: int, seed: int,
           draws: InputDraws | None) -> dict[str, Any]:
    """Bit-identical results in the declared types, on draws whose outputs are not all overflow."""
    run_original, run_optimized = jitted_program(original), jitted_program(optimized)
    verdict = Verdict("exact", dtypes)
    for k, (scaled, contraction) in enumerate(DRAWS):
        args = random_inputs(original, seed + k, scaled, draws, contraction)
        refs, results = [np.asarray(r) for r in run_original(*args)], [np.asarray(r) for r in run_optimized(*args)]
        verdict.tried.append({"seed": seed + k, "fan_in_scaled": scaled, "contraction": contraction})
        if not all(informative(r) for r in refs):
            continue
        verdict.worst = max(verdict.worst, *(output_error(r, c) for r, c in zip(refs, results)), 0.0)
        different = [i for i, (r, c) in enumerate(zip(refs, results)) if not bit_identical(r, c)]
        if different:
            return verdict.result("failed", f"output {different[0]} is not bit-identical on draw {seed + k}")
        verdict.trials += 1
        if verdict.trials == trials:
            return verdict.result("passed", f"bit-identical on {trials} input draws")
    return verdict.result("inconclusive", "the original's outputs overflowed on every input draw tried")


def region_validate(original: dict[str, Any], optimized: dict[str, Any], plan: RegionPlan, trials: int, seed: int,
                    draws: InputDraws | None, memory: CheckMemory) -> dict[str, Any]:
    """One jitted call per draw (in float64) runs the original only as far as the regions need and each
    region on the values the original feeds it (one compile for all: XLA's fixed cost per module
    is larger than a small region's); each region's results are compared with the original's
    values there. Regions that are the same check (`check_key`) run once: the earliest of them.
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
        verdict = Verdict("regions", [d for check in earlier for d in check.dtypes])
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


def _run_regions(original: dict[str, Any], optimized: dict[str, Any], plan: RegionPlan, checks: list[Region],
                 trials: int, seed: int, draws: InputDraws | None) -> dict[str, Any]:
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
    verdict = Verdict("regions", dtypes)
    try:
        run_prefix = jitted_program(prefix)
        references = [(float64_callable(side), [spec["name"] for spec in side["inputs"]]) for side in sides]
        calls = [(float64_callable(region.subprogram(optimized, plan.numbered)), region) for region in checks]
    except (TypeError, ValueError) as err:
        return verdict.result("inconclusive", f"the regions cannot be evaluated in float64: {err}", roots=roots)

    def original_sides(*leaf_values):  # the original's values at the roots, and those the regions are fed
        values = dict(zip(leaves, leaf_values))
        refs = [out for fn, names in references for out in fn(*(values[n] for n in names))]
        return refs, [[values[o] for _, o in region.boundary] for _, region in calls]

    def regions(fed):
        return [out for (fn, _), region_inputs in zip(calls, fed) for out in fn(*region_inputs)]

    runs = checked_runs(original_sides, regions)
    specs = [{"name": name, "shape": list(plan.original_numbered.aval[name][0]),
              "dtype": plan.original_numbered.aval[name][1]} for name in leaves]

    def evaluate(args: list[np.ndarray], draw: Draw, relative: float):
        values = dict(zip((spec["name"] for spec in needed["inputs"]), args))
        if computed:
            values.update(zip(computed, run_prefix(*(values[spec["name"]] for spec in prefix["inputs"]))))
        return runs([values[name] for name in leaves], nudges({"inputs": specs}, draw.seed, draws), relative)

    return judge(needed, dtypes, evaluate, verdict, trials, seed, draws, positive_inputs(original)) | {"roots": roots}
