"""The debugger's findings as it passes them: the kernels it checks and what each one showed, typed
key by key (service/optimizer/debug.py's pydantic models document the keys clients read)."""
# No `from __future__ import annotations`: TypedDict reads NotRequired from evaluated annotations.
from typing import NotRequired, TypedDict

from validation.verdict import Verdict


class KernelToCheck(TypedDict):
    """A kernel as a response lists it: enough to know which values it writes from which."""

    id: int
    kind: str
    ops: list[str]
    inputs: list[str]
    outputs: list[str]
    precompute: NotRequired[bool]  # weight-only work, run first


class Replaced(TypedDict):
    eqn: int
    op: str


class Origin(TypedDict):
    """What a kernel stands for in the original program and the rewrites that can have shaped it."""

    stands_for: dict[str, str | None]  # per output, the original value (None: none known)
    replaces: list[Replaced]
    changed: bool  # it does not compute the original's equations as written
    rewrites: list[str]


class OutputFinding(TypedDict):
    value: str
    stands_for: str | None
    max_rel_error: float | None
    tolerance: float
    diverges: bool


class KernelFinding(TypedDict):
    id: int
    precompute: bool
    kind: str
    ops: list[str]
    outputs: list[OutputFinding]
    max_rel_error: float | None
    diverges: bool
    changed: bool
    replaces: list[Replaced]
    rewrites: list[str]


class Findings(TypedDict):
    """The kernel-by-kernel comparison, and the first kernel beyond tolerance."""

    seed: int
    kernels: list[KernelFinding]
    first_divergent: KernelFinding | None
    unmapped: list[str]  # optimized values that stand for no original value
    summary: str


class BisectionJSON(TypedDict):
    status: str  # found, time_limit or not_failing
    rules: list[str]
    configurations: int
    kernel: KernelFinding | None


class DebugJSON(Findings):
    validation: Verdict
    bisection: NotRequired[BisectionJSON]
