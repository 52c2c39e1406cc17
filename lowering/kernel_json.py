"""Kernels and their estimates as a response reports them, typed key by key: what lowering writes
and every reader of a response (the report, the debugger, the client) reads.
service/optimizer/response.py's pydantic models document each key; tests/validation/test_response_json.py
keeps the two alike."""
# No `from __future__ import annotations`: TypedDict reads NotRequired from evaluated annotations.
from typing import Literal, NotRequired, TypedDict

from costmodel.formulas import Cost
from wire.json_types import Program

Resource = Literal["compute", "memory", "launch"]  # what a lower bound's floor is taken of
Proof = Literal["exact", "heaviest_path"]  # how the e-graph's floor of a resource was proven
RunsAs = Literal["chosen", "pallas", "xla"]  # how a kernel runs (lowering/as_run.py `runs_as`)


class BufferJSON(TypedDict):
    """A value the kernel touches and where it lives."""

    name: str
    shape: list[int]
    dtype: str
    role: str  # input, output or intermediate of the kernel
    level: str  # hbm, or sram where a fused kernel keeps it on chip


class KernelJSON(TypedDict):
    id: int
    kind: str
    ops: list[str]
    eqns: list[int]  # indices into the program's eqns
    inputs: list[str]
    outputs: list[str]
    tiling: dict[str, int]
    buffers: list[BufferJSON]
    estimate: Cost
    runs_as: NotRequired[RunsAs]


class LowerBoundJSON(Cost):
    binding: str
    over: Literal["egraph", "returned"]
    proof: NotRequired[dict[Resource, Proof] | None]


class EstimatesJSON(TypedDict):
    hardware: str
    priced_as: NotRequired[Literal["chosen", "xla"]]
    naive: Cost
    baseline: Cost
    optimized: Cost
    precompute: NotRequired[Cost | None]
    dispatch_s: NotRequired[float]
    speedup_vs_baseline: float
    speedup_vs_naive: NotRequired[float | None]
    optimized_over_bound: NotRequired[float | None]
    lower_bound: LowerBoundJSON
    runs_as: NotRequired[dict[RunsAs, int] | None]  # per-call kernels by how they run


class KernelsJSON(TypedDict):
    """The part of a response that says what runs: the program, its kernels and their estimates."""

    program: Program
    kernels: list[KernelJSON]
    precompute_kernels: list[KernelJSON]
    baseline_kernels: NotRequired[list[KernelJSON] | None]
    listing: str
    estimate: EstimatesJSON
