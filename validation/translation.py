"""Translation validation as a service (`POST /v1/validate`, `optu validate`,
`service.client.validate`): any two programs with one signature, hand-rewritten or from another
compiler, checked as the optimizer checks its own results (validation/validate.py)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from lowering.kernels import output_avals
from validation.validate import validate
from validation.verdict import Verdict
from wire.execute import typecheck
from wire.format import WireError, WireProgram, json_int
from wire.json_types import Program

EXIT_CODES = {"passed": 0, "identical": 0, "failed": 1, "inconclusive": 2}  # `optu validate`


class ValidateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    original: WireProgram = Field(description="the reference program")
    candidate: WireProgram = Field(description="the program that should compute what `original` does")
    fp_mode: Literal["real", "exact"] = Field("real", description="real: equal in real arithmetic, within the "
                                                                  "outputs' dtype tolerance; exact: bit-identical")
    seed: json_int(ge=0) = Field(0, description="the first input draw's seed")


class ValidateResponse(BaseModel):
    model_config = ConfigDict(extra="allow")  # criterion, draws, regions: the check's own account

    status: Literal["passed", "failed", "inconclusive", "identical"]
    max_rel_error: float
    tolerance: dict[str, float]
    trials: int
    reason: str


def _signature(program: Program, side: str) -> tuple[list[tuple], list[tuple]]:
    """(inputs, outputs) as (shape, dtype) in order; WireError naming `side` if it does not type-check."""
    try:
        typecheck(program)
    except WireError as err:
        raise WireError(err.message, eqn=err.eqn, field=f"{side}.{err.field}" if err.field else side) from None
    return [(tuple(s["shape"]), s["dtype"]) for s in program["inputs"]], output_avals(program)


def check_signatures(original: Program, candidate: Program,
                     sides: tuple[str, str] = ("original", "candidate")) -> None:
    """WireError (a 422) unless both programs type-check and take and return the same avals in order;
    the fields it names start with the programs' `sides`."""
    mine, other = sides
    (o_in, o_out), (c_in, c_out) = _signature(original, mine), _signature(candidate, other)
    for part, ours, theirs in (("inputs", o_in, c_in), ("outputs", o_out, c_out)):
        if len(ours) != len(theirs):
            raise WireError(f"the {other} has {len(theirs)} {part}, the {mine} {len(ours)}",
                            field=f"{other}.{part}")
        for k, (a, b) in enumerate(zip(ours, theirs)):
            if a != b:
                raise WireError(f"{b[1]}{list(b[0])} where the {mine} has {a[1]}{list(a[0])}",
                                field=f"{other}.{part}[{k}]")


def validate_programs(original: Program, candidate: Program, fp_mode: str = "real",
                      seed: int = 0) -> Verdict:
    """The verdict on `candidate` against `original`; WireError when they cannot be compared."""
    check_signatures(original, candidate)
    return validate(original, candidate, fp_mode, seed=seed)
