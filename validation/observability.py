"""Whether a change at one value of a program shows in its outputs: what decides, when a rewritten
region disagrees with the original value it was paired with but the whole programs agree, between
"the pairing was a wrong guess" (a change that size there would have shown) and "the whole run
cannot see it" (inconclusive)."""
from __future__ import annotations

import numpy as np

from validation.compare import output_error
from validation.inputs import InputDraws, random_inputs
from validation.regions import cone
from validation.verdict import DrawFinding
from validation.widen import Widened, widen
from wire.json_types import Program


def change_shows(original: Program, value: str, relative: float, runs: list[DrawFinding],
                 draws: InputDraws | None = None) -> bool:
    """Whether, on every one of `runs` (a whole run's draws: seed, fan_in_scaled, contraction and
    its threshold), moving `value` by `relative` of its largest magnitude, in a seeded random
    direction, moves `original`'s outputs by more than that run's threshold (normwise relative)."""
    upto, rest = cone(original, [value]), cone(original, original["outputs"], fed=[value])
    run_upto, run_rest, run_original = Widened(upto), Widened(rest), Widened(original)  # compiled once for all runs
    for run in runs:
        args = widen(random_inputs(original, run["seed"], run["fan_in_scaled"], draws, run["contraction"]))
        by_name = dict(zip((s["name"] for s in original["inputs"]), args))
        (current,) = run_upto([by_name[s["name"]] for s in upto["inputs"]])
        if not np.issubdtype(current.dtype, np.inexact) or not current.size:
            return False
        direction = np.random.default_rng(run["seed"]).standard_normal(current.shape)
        moved = current + relative * np.abs(current).max() * direction / max(np.abs(direction).max(), 1e-300)
        before = run_original(args)
        after = run_rest([moved.astype(current.dtype), *(by_name[s["name"]] for s in rest["inputs"][1:])])
        if not any(output_error(b, a) > run["threshold"] for b, a in zip(before, after)):
            return False
    return True
