"""The optimizer's answer as one typed model: what `pipeline.optimize` returns (validated here),
what workers carry back, what the HTTP app serves and documents in OpenAPI, and what the client
reads. Every field says what it means; keys a newer optimizer adds still pass through."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from costmodel.formulas import BOUNDS
from lowering.kernel_json import Proof, Resource, RunsAs
from validation.response_json import ResponseJSON
from wire.format import FORMAT

Bound = Literal[BOUNDS]  # type: ignore[valid-type]


class _Open(BaseModel):
    # Keys the pipeline adds later must reach the client, not be dropped by the response model.
    model_config = ConfigDict(extra="allow")


class CostEstimate(_Open):
    time_s: float = Field(description="estimated time per call, seconds")
    energy_j: float = Field(description="estimated energy per call, joules")
    hbm_bytes: float = Field(description="bytes moved between HBM and the chip")
    flops: float = Field(description="floating-point operations")
    bound: Bound = Field(description="what limits the time: " + ", ".join(BOUNDS))


class LowerBound(CostEstimate):
    binding: Bound = Field(description="the resource whose floor binds: memory, launch, or the compute's own "
                                       "(optical, weight_load, vector)")
    over: Literal["egraph", "returned"] = Field(description="what it is a floor of: `egraph`, every program of "
                                                            "the search's e-graph and the ones the request can "
                                                            "return; `returned`, those alone (no e-graph was "
                                                            "searched)")
    proof: dict[Resource, Proof] | None = Field(
        None, description="how the e-graph's floor of each resource was proven: `exact`, an exact extraction "
                          "with that resource alone as its cost; `heaviest_path`, the least over the e-graph's "
                          "programs of their costliest path (weaker where work runs in parallel branches)")


class Buffer(_Open):
    name: str = Field(description="the wire program's variable")
    shape: list[int] = Field(description="dimensions")
    dtype: str = Field(description="element type")
    role: str = Field(description="input, output or intermediate of the kernel")
    level: str = Field(description="where the value lives: hbm, or sram when a fused kernel keeps it on chip")


class Kernel(_Open):
    id: int = Field(description="position in execution order")
    kind: str = Field(description="the unit that runs it: optical_gemm, vector or host; fused for several ops; "
                                  "key_blocked for an attention run over blocks of keys (online softmax); "
                                  "row_blocked for one run over blocks of query rows, every key at once (a "
                                  "conventional compiler's tiling: no sum reordered)")
    ops: list[str] = Field(description="primitives fused into the kernel, in order")
    eqns: list[int] = Field(description="indices into program.eqns this kernel computes")
    inputs: list[str] = Field(description="variables read from HBM")
    outputs: list[str] = Field(description="variables written to HBM")
    tiling: dict[str, int] = Field(
        description="optical GEMM tiling (tiles, k_splits, weight_loads, passes); "
        "a key_blocked or row_blocked kernel adds query_block, key_block and their "
        "counts; empty for other kernels"
    )
    buffers: list[Buffer] = Field(description="every value the kernel touches, with its memory level")
    estimate: CostEstimate = Field(description="the kernel's estimate under the hardware profile")
    runs_as: RunsAs | None = Field(
        None, description="how it runs: `chosen`, as listed, on hardware that runs this compiler's kernels (the "
                          "OPTU); `pallas`, as the fused Pallas kernel the program carries (flash_attention, "
                          "tiled); `xla`, as XLA groups the program's ops when it compiles them (the kernel is "
                          "its grouping, priced as such)")


class Estimates(_Open):
    hardware: str = Field(description="the hardware profile estimated against")
    priced_as: Literal["chosen", "xla"] = Field("chosen", description="whose kernels `baseline`, `optimized` and "
                                            "`kernels` are: `chosen`, the kernels this compiler chose, which run as "
                                            "listed (the OPTU); `xla`, the programs as XLA groups them when it "
                                            "compiles them (a CPU, a GPU: the hardware profile's kernel.fusion), "
                                            "but for fused kernels the program carries (flash_attention), which "
                                            "run as chosen")
    naive: CostEstimate = Field(description="one kernel per equation, no rewrites")
    baseline: CostEstimate = Field(description="a conventional compiler on the same hardware, the cheapest of its "
                                               "policies (fusion, sibling fusion, GEMM chaining) with weight "
                                               "precompute, no algebraic rewrites; XLA's own grouping where "
                                               "`priced_as` is `xla`")
    optimized: CostEstimate = Field(description="the returned program's kernels and the call's dispatch")
    precompute: CostEstimate | None = Field(None, description="weight-only work of the returned program, run "
                                                              "once per weight set (not in `optimized`)")
    dispatch_s: float = Field(0.0, description="per call, in naive, baseline, optimized and lower_bound alike: the "
                                               "host dispatching the program and waiting for its result, on top "
                                               "of its kernels (the profile's kernel.dispatch_overhead_s)")
    speedup_vs_baseline: float = Field(description="baseline time / optimized time")
    speedup_vs_naive: float | None = Field(None, description="naive time / optimized time")
    optimized_over_bound: float | None = Field(None, description="optimized time / lower bound time: how far the "
                                                                 "returned kernels are from the floor")
    runs_as: dict[RunsAs, int] | None = Field(
        None, description="the per-call kernels (`kernels`) counted by how they run (see a kernel's `runs_as`): "
                          "which are realized as chosen and which are left to XLA")
    lower_bound: LowerBound = Field(description="a floor under every program this request can return (the "
                                                  "optimized, the baseline's, the original): per resource the least "
                                                  "they need per call; `bound` names the one that binds")


class Draw(_Open):
    seed: int = Field(description="seed of this draw of inputs")
    fan_in_scaled: bool = Field(description="whether weights were scaled by their fan-in, like an initialized network")
    contraction: float = Field(description="factor the inputs were scaled by toward zero")
    sensitivity: float | None = Field(None, description="how much the original's outputs move under a 1e-12 "
                                                        "nudge of its inputs (real mode)")
    threshold: float | None = Field(None, description="the error beyond which this draw fails the candidate")
    can_tell: bool | None = Field(None, description="whether this draw could have failed a wrong program")
    max_rel_error: float | None = Field(None, description="worst relative error between the programs in this draw")


class Validation(_Open):
    status: Literal["passed", "failed", "inconclusive", "identical", "skipped"] = Field(
        description="passed: the check could have failed and did not; identical: the same computation")
    max_rel_error: float | None = Field(None, description="worst relative error over all draws (float64)")
    trials: int = Field(0, description="draws of random inputs that were compared")
    reason: str | None = Field(None, description="why the verdict is what it is (for inconclusive: what could "
                                                 "not be told)")
    criterion: str | None = Field(None, description="what was compared: whole programs, rewritten regions, "
                                                    "searched pieces, or identical")
    tolerance: dict[str, float] = Field(default_factory=dict, description="allowed relative error per dtype")
    draws: list[Draw] | None = Field(None, description="each draw of inputs and what it showed")
    regions: int | None = Field(None, description="rewritten regions found (criterion regions)")
    distinct_regions: int | None = Field(
        None, description="distinct region checks (a region fed the same values twice is one)"
    )
    reused_regions: int | None = Field(None, description="of the distinct regions, those whose check passed "
                                                         "already on the same draws (an earlier candidate's)")
    reused_values: int | None = Field(None, description="values the regions start from that an earlier "
                                                        "candidate's check showed equal to the original's, "
                                                        "on the same draws")
    region_share: float | None = Field(None, description="share of the program inside rewritten regions")
    roots: list[str] | None = Field(None, description="original values the regions stand for")
    pieces: list[str] | None = Field(None, description="each searched piece's criterion (criterion pieces)")
    failed_output: int | None = Field(None, description="when failed: the output (for criterion regions, the "
                                                        "region root, an index into `roots`) that differed")
    failed_error: float | None = Field(None, description="when failed: its relative error")


class FusionEgraph(_Open):
    enodes: int = Field(description="e-nodes of the kernel e-graph")
    eclasses: int = Field(description="e-classes of the kernel e-graph")
    candidate_enodes: int = Field(description="e-nodes extraction chose among")
    rounds: int = Field(description="fusion rounds run")


class EgraphStats(_Open):
    enodes: int | None = Field(description="e-nodes after saturation (null when no search ran)")
    eclasses: int | None = Field(description="e-classes after saturation")
    iterations: int | None = Field(description="saturation iterations run")
    stop_reason: str = Field(description="why saturation stopped: saturated, iteration_limit, node_limit, "
                                         "time_limit, ...")
    fusion: FusionEgraph | None = Field(None, description="the kernel (fusion) e-graph")


class Extraction(_Open):
    method: str | None = Field(description="greedy, ilp, or null when none ran")
    cost_s: float | None = Field(description="estimated time of the extracted program")
    candidate_enodes: int | None = Field(None, description="e-nodes extraction chose among")
    optimality_gap: float | None = Field(description="the ILP's proven gap (0: optimal); null for greedy")
    status: str = Field(description="the extractor's status (optimal, time_limit, heuristic, not run)")
    algebra: Extraction | None = Field(None, description="the algebra-only extraction the kernels start from")


class EquationCounts(_Open):
    original: int = Field(description="equations of the program sent")
    optimized: int = Field(description="equations of the program returned")
    op_delta: dict[str, int] = Field(description="per primitive, equations returned less equations sent (only "
                                                 "the ones that differ)")


class Report(_Open):
    rewrites: dict[str, int] = Field(description="times each named rule fired while the e-graph saturated: what "
                                                 "the search explored, not what the returned program uses (its "
                                                 "equations, `equations` and `notes` say that)")
    egraph: EgraphStats = Field(description="e-graph sizes and why saturation stopped")
    extraction: Extraction = Field(description="how the program was chosen from the e-graph")
    fusion: dict[str, Any] | None = Field(None, description="kernel choice: the e-graph's program against the "
                                                            "baseline's and which was returned")
    partition: dict[str, int] | None = Field(None, description="pieces the program was cut into and searched")
    equations: EquationCounts = Field(description="program sizes")
    timings_s: dict[str, float] = Field(description="seconds per stage, one after another: they add up to the "
                                                    "request's wall time (a client adds its own: `capture`, "
                                                    "`client`, `validate_torch`, `build`)")
    background_s: dict[str, float] = Field(default_factory=dict, description="seconds of work that ran beside the "
                                                                             "stages (`validate`: the algebraic "
                                                                             "optimum's check, beside fusion)")
    notes: list[str] = Field(description="what the optimizer decided and why, in words")
    control_flow: list[dict[str, Any]] | None = Field(description="per nested body (scan, while, cond): its "
                                                                  "equation, rewrites, validation")


class OptimizeResponse(_Open):
    id: str = Field(description="hash of the canonical request")
    program: dict[str, Any] = Field(description=f"the optimized program, {FORMAT}")
    kernels: list[Kernel] = Field(description="per-call kernels, in execution order")
    precompute_kernels: list[Kernel] = Field(description="weight-only kernels, run once per weight set")
    baseline_kernels: list[Kernel] | None = Field(None, description="the fair baseline's per-call kernels (the "
                                                  "program as written, conventionally fused; `eqns` index that "
                                                  "program, not `program`)")
    listing: str = Field(description="human-readable kernel program, one block per kernel")
    estimate: Estimates = Field(description="estimates against the naive and baseline programs")
    validation: Validation = Field(description="the numerical check of the returned program against the one sent")
    report: Report = Field(description="what the search did")
    provenance: dict[str, str] = Field(default_factory=dict, description=(
        "optimized value -> the original value in its e-class (what it stands for, as the e-graph records it "
        "through ingest and extraction); empty when the program returned is not the search's own"))
    cache: Literal["hit", "miss"] = Field(description="whether the answer came from the result cache")


class SweepResponse(_Open):
    hardware: str = Field(description="the base profile")
    params: dict[str, list[Any]] = Field(description="the swept fields and their values")
    points: list[dict[str, Any]] = Field(description="per grid point: overrides, estimate, kernels, "
                                                     "rewrites, op_delta, gemms, program_digest")
    distinct_programs: int = Field(description="how many different programs the grid chose")


def typed(response: ResponseJSON) -> ResponseJSON:
    """`response` checked against the model and as the model writes it (JSON types, fields the
    pipeline left out absent rather than null)."""
    return OptimizeResponse.model_validate(response).model_dump(mode="json", exclude_unset=True)
