"""The debugger as a service (`POST /v1/debug`, `optu debug`): an optimized program run kernel by
kernel against its original (validation/kernel_debug.py), and the rules to blame found by delta
debugging over the rule set, each configuration re-optimized and validated (validation/rule_bisect.py)."""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from costmodel.profile import HardwareProfile
from lowering.kernels import CONVENTIONAL, build_kernel_program
from rewrites.registry import NamedRule
from rewrites.schedule import ALGEBRA_RULE_NAMES
from service.optimizer.options import OptimizeOptions
from service.optimizer.pipeline import optimize
from validation.debug_json import BisectionJSON, DebugJSON, KernelToCheck
from validation.kernel_debug import debug_kernels
from validation.kernel_provenance import rule_patterns
from validation.response_json import ResponseJSON
from validation.rule_bisect import NotFailing, minimal_failing
from validation.translation import check_signatures
from validation.validate import validate
from validation.widen import CannotWiden
from wire.format import JsonInt, WireError, WireProgram, json_int
from wire.json_types import Program


class DebugKernelSpec(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)  # the rest of a response's kernel (estimate, buffers) passes

    id: JsonInt = Field(description="the kernel's id")
    kind: str = Field("vector", description="optical_gemm, vector, fused, key_blocked or host")
    ops: list[str] = Field(description="primitives the kernel computes")
    inputs: list[str] = Field(description="values of the optimized program it reads")
    outputs: list[str] = Field(description="values of the optimized program it writes")
    precompute: bool = Field(False, description="weight-only work, run once before the per-call kernels")


class DebugRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    original: WireProgram = Field(description="the program as written")
    optimized: WireProgram = Field(description="the optimized program (a /v1/optimize response's `program`; "
                                               "where its validation failed, run with `validate: false` to get it)")
    kernels: list[DebugKernelSpec] | None = Field(
        None, description="the optimize response's `kernels` (and `precompute_kernels`, each with `precompute: "
                          "true`); default: the optimized program grouped as the fair baseline groups it")
    rewrites: dict[str, JsonInt] | None = Field(None, description="the optimize response's `report.rewrites`: "
                                                              "the rules that fired")
    provenance: dict[str, str] | None = Field(None, description="the optimize response's `provenance`: what each "
                                                                "optimized value stands for; default: inferred "
                                                                "by value numbering")
    hardware: str | dict[str, Any] | None = Field(None, description="profile for kernels and for re-optimizing")
    options: OptimizeOptions | None = Field(None, description="options for re-optimizing (bisect_rules)")
    bisect_rules: bool = Field(False, description="find a 1-minimal set of rules whose application makes "
                                                  "validation of the original's optimization fail")
    bisect_time_limit_s: float | None = Field(None, gt=0, description="wall-time budget of the bisection (each "
                                                                      "subset is a whole optimization); default "
                                                                      "and cap: the server's maximum time limit")
    seed: json_int(ge=0) = Field(0, description="seed of the input draw the kernels are compared on")


class KernelDebug(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: int = Field(description="the kernel's id (precompute kernels run first)")
    precompute: bool = Field(description="weight-only work, run once")
    ops: list[str] = Field(description="primitives the kernel computes")
    max_rel_error: float | None = Field(description="worst normwise relative error of its outputs against the "
                                                    "original values they stand for (float64); null: none maps")
    diverges: bool = Field(description="an output differs beyond its dtype's tolerance")
    rewrites: list[str] = Field(description="fired rules whose patterns mention its ops or the ops it replaces")


class Bisection(BaseModel):
    model_config = ConfigDict(extra="allow")

    status: Literal["found", "time_limit", "not_failing"] = Field(
        description="found: `rules` make validation fail, each one needed; time_limit: `rules` make it fail, "
                    "but the budget ran out before every one was shown needed; not_failing: with every rule "
                    "it does not fail")
    rules: list[str] = Field(description="rules whose application makes validation fail (1-minimal when found)")
    configurations: int = Field(description="rule subsets optimized and validated")
    kernel: dict[str, Any] | None = Field(None, description="the first diverging kernel of the program optimized "
                                                            "with `rules` alone: the kernel they built")


class DebugResponse(BaseModel):
    model_config = ConfigDict(extra="allow")

    kernels: list[KernelDebug] = Field(description="per kernel, in execution order")
    first_divergent: dict[str, Any] | None = Field(description="the first kernel beyond tolerance, or null")
    summary: str = Field(description="one line: the first diverging kernel and its rewrites, or agreement")
    validation: dict[str, Any] = Field(description="the whole programs' translation validation verdict")
    bisection: Bisection | None = Field(None, description="present when bisect_rules was asked")


def debug(original: Program, optimized: Program, hardware: HardwareProfile, options: OptimizeOptions,
          kernels: Sequence[KernelToCheck | DebugKernelSpec] | None = None,
          rewrites: dict[str, int] | None = None, bisect_rules: bool = False, seed: int = 0,
          extra_rules: Sequence[NamedRule] = (), provenance: dict[str, str] | None = None,
          bisect_time_limit_s: float | None = None) -> DebugJSON:
    """The debugger's report on `optimized` against `original`; WireError (a 422) naming the field
    when their signatures differ. `extra_rules` join the optimizer's own (in-process only); the
    bisection stops after `bisect_time_limit_s` (None: when it is done)."""
    check_signatures(original, optimized, ("original", "optimized"))
    if kernels is not None:
        kernels = [DebugKernelSpec.model_validate(k).model_dump() for k in kernels]
        _check_kernels(optimized, kernels)
    else:
        lowered = build_kernel_program(optimized, hardware, CONVENTIONAL)
        kernels = [*({**k.to_dict(), "precompute": True} for k in lowered.precompute),
                   *(k.to_dict() for k in lowered.kernels)]
    try:
        found = debug_kernels(original, optimized, kernels, rewrites, rule_patterns(extra_rules), seed, provenance)
    except CannotWiden as err:
        raise WireError(str(err), field="optimized") from None
    result = {**found, "validation": validate(original, optimized)}
    if bisect_rules:
        result["bisection"] = bisect(original, hardware, options, extra_rules, seed, bisect_time_limit_s)
    return result


def _check_kernels(optimized: Program, kernels: list[KernelToCheck]) -> None:
    """WireError naming the field unless every kernel reads and writes values of `optimized`."""
    values = {s["name"] for s in [*optimized["inputs"], *optimized.get("consts", [])]}
    values |= {o["name"] for e in optimized["eqns"] for o in e["out"]}
    for k, kernel in enumerate(kernels):
        for part in ("inputs", "outputs"):
            unknown = [name for name in kernel[part] if name not in values]
            if unknown:
                raise WireError(f"{unknown[0]!r} is not a value of the optimized program",
                                field=f"kernels[{k}].{part}")


def bisect(original: Program, hardware: HardwareProfile, options: OptimizeOptions,
           extra_rules: Sequence[NamedRule] = (), seed: int = 0,
           time_limit_s: float | None = None) -> BisectionJSON:
    """Delta debugging over the rules that fire when `original` is optimized: each subset is
    optimized with only its rules (the others excluded through the options) and validated. After
    `time_limit_s` no further subset is tried: the smallest failing one so far is the answer."""
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
    options = options.model_copy(update={"validate_result": False})
    extra = {r.name: r for r in extra_rules}

    def optimized_with(rules: frozenset[str]) -> ResponseJSON:
        kept = options.model_copy(update={"exclude_rules": sorted(ALGEBRA_RULE_NAMES - rules)})
        return optimize(original, hardware, kept, [r for r in extra_rules if r.name in rules])

    def fails(rules: frozenset[str]) -> bool:
        return validate(original, optimized_with(rules)["program"])["status"] == "failed"

    fired = optimize(original, hardware, options, extra_rules)["report"]["rewrites"]
    candidates = [name for name in fired if name in ALGEBRA_RULE_NAMES or name in extra]
    try:
        rules, tried, minimal = minimal_failing(candidates, fails,
                                                lambda: deadline is not None and time.monotonic() > deadline)
    except NotFailing:
        return {"status": "not_failing", "rules": [], "configurations": 1, "kernel": None}
    response = optimized_with(frozenset(rules))
    kernels = [*({**k, "precompute": True} for k in response["precompute_kernels"]), *response["kernels"]]
    built = debug_kernels(original, response["program"], kernels, response["report"]["rewrites"],
                          rule_patterns(extra_rules), seed, response["provenance"])
    return {"status": "found" if minimal else "time_limit", "rules": rules, "configurations": tried,
            "kernel": built["first_divergent"]}
