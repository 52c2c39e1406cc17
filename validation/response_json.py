"""The optimize response as every stage and reader passes it: the JSON service/optimizer/response.py's
pydantic models validate and document, typed key by key. It lives here, below the optimizer that
builds it, because the explained listing is the lowest layer that reads a whole response;
tests/validation/test_response_json.py keeps these and the models alike."""
# No `from __future__ import annotations`: TypedDict reads NotRequired from evaluated annotations.
from typing import Literal, NotRequired, TypedDict

from lowering.kernel_json import KernelsJSON
from validation.verdict import Verdict


class FusionEgraphJSON(TypedDict):
    enodes: int
    eclasses: int
    candidate_enodes: int | None
    rounds: int


class EgraphJSON(TypedDict):
    enodes: int | None  # null: no search ran
    eclasses: int | None
    iterations: int | None
    stop_reason: str
    fusion: NotRequired[FusionEgraphJSON | None]


class ExtractionJSON(TypedDict):
    method: str | None
    cost_s: float | None
    candidate_enodes: NotRequired[int | None]
    optimality_gap: float | None
    status: str
    algebra: NotRequired["ExtractionJSON | None"]


class EquationCountsJSON(TypedDict):
    original: int
    optimized: int
    op_delta: dict[str, int]


class FusionChoiceJSON(TypedDict, total=False):
    """Which kernels were returned and what they were weighed against (seconds per call)."""

    chosen: str  # egraph, a policy's name, baseline, min_speedup or xla
    egraph_s: float
    baseline_s: float
    as_run_s: float  # the search's program as XLA groups it
    programs: int
    seeded_kernels: int


class ReportJSON(TypedDict):
    rewrites: dict[str, int]
    egraph: EgraphJSON
    extraction: ExtractionJSON
    fusion: NotRequired[FusionChoiceJSON | None]
    partition: NotRequired[dict[str, int] | None]
    equations: EquationCountsJSON
    timings_s: dict[str, float]
    background_s: NotRequired[dict[str, float]]
    notes: list[str]
    control_flow: list["NestedReportJSON"] | None


class NestedReportJSON(TypedDict):
    """A nested body's optimization (scan, while, cond): where it is and what became of it."""

    eqn: int
    op: str
    param: str  # where in the equation's params the body sits
    validation: Verdict | None  # null: the pipeline could not optimize it
    rewrites: dict[str, int]
    accepted: bool
    reason: str | None  # why the optimized body was not taken
    equations: dict[str, int]  # original, optimized
    control_flow: list["NestedReportJSON"]


class ResponseJSON(KernelsJSON):
    id: str
    validation: Verdict
    report: ReportJSON
    provenance: NotRequired[dict[str, str]]
    cache: Literal["hit", "miss"]
