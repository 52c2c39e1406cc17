"""The loop every numeric check shares: draws of inputs tried in turn (`DRAWS`) until enough of
them can tell, each comparing a candidate's outputs with a reference's within what float64
rounding explains at the reference's measured sensitivity, and the verdict they add up to (`Tally`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import numpy as np

from validation.compare import informative, output_error, tolerance_for
from validation.inputs import Draw, InputDomain, InputDraws, random_inputs
from validation.verdict import DrawFinding, Verdict
from validation.widen import CannotWiden
from wire.json_types import Program

# Evaluated in float64, a right rewrite differs from the original only by rounding: about as much
# as the original moves when its inputs change by float64's rounding (its measured sensitivity
# scaled down from the nudge), times a slack for reductions that round many times (a random nudge
# shows less than worst-case rounding). A difference beyond that, or beyond the dtype's
# tolerance, is a different program: a constant's sign flipped inside a layer norm's epsilon too.
FLOAT64_ROUNDING = 2.0**-53
ROUNDING_SLACK = 1e4
ROUNDING_FLOOR = 1e-12
NUDGE = {"float64": 1e-14, "complex128": 1e-14}  # relative input change measuring sensitivity; else 1e-12
DEFAULT_NUDGE = 1e-12
# The draws tried in turn, (fan-in scaled, contraction), each with its own seed. The first two are
# unlike each other, as a pass needs two: standard normal (deep random networks stay sensitive to
# every weight) and scaled like an initialized network (activations O(1), so a layer norm's epsilon
# or a small bias still shows). Then contracted toward zero, where recurrences and saturating
# activations stop amplifying differences.
DRAWS = ((False, 1.0), (True, 1.0), (False, 1.0), (True, 0.3), (True, 0.1), (True, 0.03), (True, 0.01))


@dataclass
class Tally:
    """What the draws of one check found; `result` is the response's `validation` object."""

    criterion: str
    dtypes: list[str]
    trials: int = 0
    tried: list[DrawFinding] = field(default_factory=list)
    worst: float = 0.0

    def tolerance(self) -> dict[str, float]:
        return {d: tolerance_for(d, "real") for d in sorted(set(self.dtypes))}

    def result(self, status: str, reason: str, **extra: Any) -> Verdict:
        return {"status": status, "max_rel_error": self.worst, "tolerance": self.tolerance(), "trials": self.trials,
                "criterion": self.criterion, "reason": reason, "draws": self.tried, **extra}


Outputs = list[np.ndarray]


class Runs(NamedTuple):
    """One draw's outputs: the reference's, the candidate's, and the original's on the draw nudged
    (its sensitivity). `original` is the original program's own outputs where the reference is
    another implementation of it (PyTorch running the model): the two round differently, and what
    separates them on this draw is allowed on top of rounding (the candidate may stray from the
    original by rounding, and the original from the reference by that much, and no farther)."""

    reference: Outputs
    candidate: Outputs
    nudged: Outputs
    original: Outputs | None = None


# (inputs in their declared types, the draw, nudge) -> what the programs computed there
Evaluate = Callable[[list[np.ndarray], Draw, float], Runs | tuple[Outputs, Outputs, Outputs]]


def judge(program: Program, dtypes: list[str], evaluate: Evaluate, verdict: Tally,
          trials: int, seed: int, draws: InputDraws | None, domain: InputDomain | None = None) -> Verdict:
    """Draw inputs for `program` (`DRAWS` in turn, from `domain` as `random_inputs` says) until
    `trials` of them can tell, comparing the candidate's outputs with the reference's
    (`evaluate`: a whole check's `checked_runs`, or a region check's run)."""
    try:
        return _judge(program, dtypes, evaluate, verdict, trials, seed, draws, domain)
    except CannotWiden as err:
        return verdict.result("inconclusive", str(err))


def _judge(program: Program, dtypes: list[str], evaluate: Evaluate, verdict: Tally,
           trials: int, seed: int, draws: InputDraws | None, domain: InputDomain | None) -> Verdict:
    nudge = min(NUDGE.get(d, DEFAULT_NUDGE) for d in dtypes) if dtypes else DEFAULT_NUDGE
    tolerances = [tolerance_for(d, "real") for d in dtypes]
    positions_only = set(range(len(dtypes)))  # outputs with no finite value on every draw that told so far
    domain = domain or InputDomain.of(program)  # read off the program once, not per draw
    for k, (scaled, contraction) in enumerate(DRAWS):
        args = random_inputs(program, seed + k, scaled, draws, contraction, domain)
        refs, results, moved, own = Runs(*evaluate(args, Draw(seed + k, scaled, contraction), nudge))
        originals = refs if own is None else own
        errors = [output_error(r, c) for r, c in zip(refs, results)]
        spread = [output_error(o, m) for o, m in zip(originals, moved)]
        apart = [0.0 if own is None else output_error(r, o) for r, o in zip(refs, originals)]
        # A draw where every output overflowed tells nothing (matching inf positions pass anything); one
        # output with no finite value beside others that have them (a mask of -inf) is compared by
        # its nan/inf positions, and the others tell.
        finite = [informative(r) for r in refs]
        can_tell = (not refs or any(finite)) and all(s <= t for s, t in zip(spread, tolerances))
        limits = [min(t, max(ROUNDING_FLOOR, ROUNDING_SLACK * s * FLOAT64_ROUNDING / nudge) + a)
                  for s, a, t in zip(spread, apart, tolerances)]
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
