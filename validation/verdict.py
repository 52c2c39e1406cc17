"""A check's verdict as the stages build and pass it: the JSON the response's `validation` holds
(service/optimizer/response.py's `Validation` documents each key), typed key by key;
tests/validation/test_verdict.py keeps the two alike."""
# No `from __future__ import annotations`: TypedDict reads NotRequired from evaluated annotations.
from typing import Literal, NotRequired, TypedDict

Status = Literal["passed", "failed", "inconclusive", "identical", "skipped"]


class DrawFinding(TypedDict):
    """One draw of inputs and what it showed."""

    seed: int
    fan_in_scaled: bool
    contraction: float
    sensitivity: NotRequired[float | None]
    threshold: NotRequired[float | None]
    can_tell: NotRequired[bool | None]
    max_rel_error: NotRequired[float | None]


class Verdict(TypedDict):
    """`passed` only where the check could have failed and did not."""

    status: Status
    max_rel_error: NotRequired[float | None]
    trials: NotRequired[int]
    reason: NotRequired[str | None]
    criterion: NotRequired[str | None]
    tolerance: NotRequired[dict[str, float]]
    draws: NotRequired[list[DrawFinding] | None]
    regions: NotRequired[int | None]
    distinct_regions: NotRequired[int | None]
    reused_regions: NotRequired[int | None]
    reused_values: NotRequired[int | None]
    region_share: NotRequired[float | None]
    roots: NotRequired[list[str] | None]
    pieces: NotRequired[list[str] | None]
    failed_output: NotRequired[int]
    failed_error: NotRequired[float]
