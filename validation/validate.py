"""Translation validation: the optimized program must compute what the original computes.

Verdicts (`status`): `identical` (value numbering finds the same computation up to exact normal
forms, and in `real` mode identities of real arithmetic (validation/normal_forms.py): nothing is
run),
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
from typing import Any, Callable

import jax
import numpy as np

from lowering.kernels import output_avals
from validation.compare import bit_identical, informative, output_error
from validation.inputs import TRIALS, Draw, InputDraws, nudged, nudges, random_inputs
from validation.judge import DRAWS, Tally, judge
from validation.observability import change_shows
from validation.region_check import CheckMemory, region_validate
from validation.verdict import Verdict
from validation.widen import CannotWiden, Widened, check_jit, float64_callable, widen
from wire.execute import jitted_program, typecheck
from wire.format import WireError
from wire.json_types import Program

MAX_REGION_SHARE = (
    0.6  # beyond this share of the optimized program in regions, checking them costs as much as the whole
)


def identical() -> Verdict:
    return {"status": "identical", "max_rel_error": 0.0, "tolerance": {}, "trials": 0, "criterion": "identical",
            "reason": "value numbering finds the same computation in both programs, up to normal forms: exact "
                      "ones, and in real mode identities of real arithmetic (sums and products in another order, "
                      "division by a constant as multiplication by its reciprocal, a chain of matrix products "
                      "multiplied in another order, a merged GEMM's slices as the GEMMs they replace); nothing "
                      "was run"}


def validate(original: Program, optimized: Program, fp_mode: str = "real",
             trials: int = TRIALS, seed: int = 0, draws: InputDraws | None = None,
             memory: CheckMemory | None = None) -> Verdict:
    """The verdict on `optimized` against `original` (see the module docstring); `draws` may hold
    the inputs drawn ahead, and `memory` what earlier candidates' checks showed on them."""
    memory, draws = memory or CheckMemory.for_mode(fp_mode), draws or InputDraws()
    if memory.table.real and fp_mode != "real":
        raise ValueError("a real-arithmetic check memory numbers values equal that need not be bit-identical")
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


def validate_pieces(original: Program, optimized: Program,
                    pieces: list[tuple[Program, Program]], fp_mode: str = "real") -> Verdict:
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


def validate_whole(original: Program, optimized: Program, fp_mode: str = "real",
                   trials: int = TRIALS, seed: int = 0, draws: InputDraws | None = None) -> Verdict:
    """Both whole programs on the same inputs: in float64 (`real`), or in their own types (`exact`)."""
    dtypes = [dtype for _, dtype in output_avals(original)]
    if fp_mode == "exact":
        return _exact(original, optimized, dtypes, trials, seed, draws)
    try:
        reference, candidate = float64_callable(original), float64_callable(optimized)
    except (TypeError, ValueError) as err:
        try:  # a program that does not type in its own types is wrong, not merely unwidenable
            typecheck(optimized)
        except WireError as own:
            return Tally("float64", dtypes).result("failed", f"the optimized program does not type-check: {own}")
        return Tally("float64", dtypes).result("inconclusive", f"the programs cannot be evaluated in float64: {err}")
    draws = draws or InputDraws()
    runs = checked_runs(lambda *args: (reference(*args), args), lambda args: candidate(*args), [original, optimized])
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

    return judge(original, dtypes, evaluate, Tally("float64", dtypes), trials, seed, draws)

Outputs = list[np.ndarray]
# (inputs in their declared types, nudge directions, nudge) -> (reference's, candidate's, nudged reference's)
Runs = Callable[[list[np.ndarray], list[np.ndarray | None], float], tuple[Outputs, Outputs, Outputs]]


def checked_runs(reference: Callable[..., tuple[list, Any]], candidate: Callable[[Any], list],
                 programs: list[Program]) -> Runs:
    """`reference` (of widened inputs: the reference's outputs and what `candidate` reads) and
    `candidate` (its outputs), jitted once and called twice per draw: on the widened inputs, and on
    them nudged along their directions, where the candidate is skipped (a conditional, so the
    nudged call is the same compiled program: XLA's compile of a big program costs more than a
    run). Widening and nudging stay on the host: in XLA each input's cast and nudge is a kernel of
    its own, whose compile time on an 80-matmul chain exceeded the runs'. `programs` are the
    programs they run (`check_jit` compiles by what they hold)."""

    def runs(compare, *args):
        refs, fed = reference(*args)
        avals = jax.eval_shape(candidate, fed)
        skipped = lambda _: [jax.numpy.zeros(a.shape, a.dtype) for a in avals]
        return refs, jax.lax.cond(compare, candidate, skipped, fed)

    run = check_jit(runs, programs)

    def evaluate(args: list[np.ndarray], directions: list[np.ndarray | None], relative: float):
        wide = widen(args)
        with jax.enable_x64(True):
            try:
                (refs, results), (moved, _) = run(True, *wide), run(False, *nudged(wide, directions, relative))
            except (TypeError, ValueError) as err:  # a trace-time type error: the widened program is ill-typed
                raise CannotWiden(f"the programs cannot be evaluated in float64: {err}") from err
        return [np.asarray(x) for x in refs], [np.asarray(x) for x in results], [np.asarray(x) for x in moved]

    return evaluate

def _exact(original: Program, optimized: Program, dtypes: list[str], trials: int, seed: int,
           draws: InputDraws | None) -> Verdict:
    """Bit-identical results in the declared types, on draws whose outputs are not all overflow."""
    run_original, run_optimized = jitted_program(original), jitted_program(optimized)
    verdict = Tally("exact", dtypes)
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
