"""The optimizer pipeline, the only place that knows the order of the stages.

typecheck -> control flow -> search (ingest, saturate, extract, fuse, extract kernels; whole or
piecewise) -> lower (kernels) -> validate, each a pure function of its inputs, on a fresh e-graph
per request.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import replace

from costmodel.extract import Extraction
from costmodel.profile import HardwareProfile, resolve_profile
from lowering.as_run import carried_kernels, compiled_by_xla, kernels_as_run, runs_as
from lowering.baseline import baseline_kernels
from lowering.kernel_json import EstimatesJSON, KernelJSON, Proof, Resource
from lowering.kernels import NAIVE, POLICIES, Kernel, KernelProgram, build_kernel_program
from lowering.lower_bound import lower_bound
from lowering.pallas_attention import realize_attention
from lowering.pallas_tiles import realize_tiles
from rewrites.registry import NamedRule
from service.optimizer.caller_heap import CALLER_HEAP
from service.optimizer.control_flow import nested_program_count, optimize_nested
from service.optimizer.loop_hoist import hoist_scan_projections, scan_projections
from service.optimizer.loop_invariants import tidy_loops
from service.optimizer.options import OptimizeOptions, OptionsJSON
from service.optimizer.partition import checked_apart, find_pieces, search_pieces
from service.optimizer.progress import stage
from service.optimizer.request_key import canonical_request_id
from service.optimizer.response import typed
from service.optimizer.search import FLOOR_RESOURCES, EGraphFloor, Search, budget, search
from service.optimizer.simplify import simplify
from validation.background import BackgroundValidation
from validation.listing import kernel_listing
from validation.response_json import ExtractionJSON, FusionChoiceJSON, NestedReportJSON, ReportJSON, ResponseJSON
from validation.validate import identical, validate, validate_pieces
from validation.verdict import Verdict
from wire.execute import typecheck
from wire.format import WireError
from wire.json_types import Program
from wire.precision import declared_precision


def baseline_program(program: Program, options: OptimizeOptions) -> Program:
    """The program the baseline is priced on: simplified and its loops tidied as a conventional
    compiler does too (XLA's CSE and algebraic simplifier, its while-loop invariant motion), where
    rules run at all, bit-exactly in `exact` mode. The search also holds it, so its kernels are
    always a choice, and a fallback may return it."""
    return _simplified(tidy_loops(program)[0] if options.rules else program, options)


def _simplified(tidied: Program, options: OptimizeOptions) -> Program:
    """`tidied` as XLA's simplifier leaves it (bit-exactly in `exact` mode), where rules run at all."""
    return simplify(tidied, options.fp_mode == "exact") if options.rules else tidied


def optimize(program: Program, hardware: str | dict | HardwareProfile | None = None,
             options: OptimizeOptions | OptionsJSON | None = None,
             extra_rules: Sequence[NamedRule] = ()) -> ResponseJSON:
    """Optimize a wire program; raises WireError (a 422) if it does not type-check. Every stage
    computes in the precision the program declares (64-bit types stay 64-bit). `extra_rules` run
    beside the algebra's own (in-process only; the request id does not name them)."""
    profile, options = resolve_profile(hardware), OptimizeOptions.coerce(options).resolved()  # parsed once, here
    with CALLER_HEAP.out_of_sight(), declared_precision(program):
        return _optimize(program, profile, options, extra_rules)


def _optimize(program: Program, profile: HardwareProfile, options: OptimizeOptions,
              extra_rules: Sequence[NamedRule]) -> ResponseJSON:
    identity = canonical_request_id(program, profile, options)  # before the loops' share of the time limit is taken
    timings: dict[str, float] = {}
    with stage(timings, "typecheck"):
        typecheck(program)
    notes: list[str] = []
    with stage(timings, "control_flow"):  # bodies first; `program` stays the validation reference
        # the search starts from the program with its loops tidied (its rules find what simplify does, and
        # say so); the baseline is priced on it simplified as well
        tidied, moved = tidy_loops(program) if options.rules else (program, 0)
        written = _simplified(tidied, options)
        nested, others, control_flow, remaining = _loops(tidied, profile, options, extra_rules)
        options = options.model_copy(update={"time_limit_s": remaining})
    with stage(timings, "partition"):
        pieces = find_pieces(nested, profile.kernel.precompute_weights) if options.rules else None
    # pieces that repeat are checked one distinct piece at a time; otherwise the whole program is
    # checked, its inputs drawn beside the search
    by_piece = pieces is not None and nested == program and checked_apart(pieces)
    overlap = options.validate_result and not by_piece
    background: dict[str, float] = {}  # work beside the stages, not part of their sum
    with BackgroundValidation(program, options.fp_mode, background) if overlap else nullcontext() as early:
        if pieces is None:
            found = search(nested, profile, options, timings, early, [written, *others], extra_rules)
        else:  # an encoder's layers: each kind of piece searched once, in a share of the time limit
            share = budget(options).time_limit_s / len({p.signature for p in pieces})
            piece_options = options.model_copy(update={"time_limit_s": share})
            # each piece's e-graph holds its simplified self too, so the baseline's kernels of it are a choice
            found = search_pieces(nested, pieces, lambda piece: search(
                piece, profile, piece_options, timings, alternatives=[_simplified(piece, piece_options)],
                extra_rules=extra_rules))
            if early is not None and found.cycle is None:
                early.start(found.algebraic)  # checked while the stitched program is grouped and lowered
        with stage(timings, "lower"):
            naive = build_kernel_program(program, profile, NAIVE)
            baseline = baseline_kernels(written, profile)
            candidate, lowered, fusion_report = _kernels(found, written, baseline, profile, options, notes)
            searched = candidate  # the bound is over programs of JAX's ops (a fused kernel is not priced as one)
            if options.lowering == "pallas":
                candidate, lowered = with_pallas_kernels(candidate, lowered, written, baseline, profile, notes)
            if compiled_by_xla(profile) and candidate is not written:
                candidate, lowered, as_run = _as_xla_runs_it(candidate, lowered, written, baseline, profile, notes)
                fusion_report |= as_run
        with stage(timings, "validate"):
            validation: Verdict
            if not options.validate_result:
                validation = {
                    "status": "skipped",
                    "max_rel_error": None,
                    "trials": 0,
                    "reason": "validation turned off by the request",
                }
            elif early is not None:
                validation = early.result_for(candidate)
            elif candidate is found.candidate and by_piece:
                validation = validate_pieces(program, candidate, found.searched_pieces, options.fp_mode)
            else:
                validation = validate(program, candidate, options.fp_mode)
            if validation["status"] == "failed":
                notes.append("validation failed; returning the original program (rules fired: "
                             + ", ".join(found.saturation.rules_fired) + ")")
                candidate, lowered = program, baseline_kernels(program, profile)
                searched = program
    if candidate is not program:  # what the returned program holds that the request did not
        notes[:0] = _loop_notes(moved, scan_projections(candidate) - scan_projections(written))
    # the e-graph's record of what each value stands for names the searched program's values: the request's when
    # no loop was rewritten first
    provenance = found.provenance if candidate is found.candidate and nested == program else {}
    start = time.perf_counter()
    response = _response(identity, profile, candidate, lowered, baseline,
                         _estimates(profile, naive, baseline, lowered, [program, written, searched], found.floor,
                                    options.attention_kernels(profile)),
                         validation, _report(found, fusion_report, timings, background, notes, control_flow, program,
                                             candidate), provenance)
    response["report"]["timings_s"]["respond"] = round(time.perf_counter() - start, 6)
    return response


def original_response(program: Program, profile: HardwareProfile, options: OptimizeOptions,
                      note: str) -> ResponseJSON:
    """The response returning `program` unchanged without searching (a worker killed at its
    deadline): estimates from lowering alone, which is cheap; nothing to validate."""
    start = time.perf_counter()
    naive = build_kernel_program(program, profile, NAIVE)
    written = baseline_program(program, options)
    baseline = baseline_kernels(written, profile)
    original = baseline_kernels(program, profile)
    report: ReportJSON = {"rewrites": {},
              "egraph": {"enodes": None, "eclasses": None, "iterations": None, "stop_reason": "time_limit"},
              "extraction": {"method": None, "cost_s": None, "optimality_gap": None, "status": "not run"},
              "equations": {"original": len(program["eqns"]), "optimized": len(program["eqns"]), "op_delta": {}},
              "timings_s": {"fallback": round(time.perf_counter() - start, 6)},
              "notes": [note], "control_flow": None}
    return _response(canonical_request_id(program, profile, options), profile, program, original, baseline,
                     _estimates(profile, naive, baseline, original, [program, written]), identical(), report)


def _response(identity: str, profile: HardwareProfile, program: Program, lowered: KernelProgram,
              baseline: KernelProgram, estimate: EstimatesJSON, validation: Verdict,
              report: ReportJSON, provenance: dict[str, str] | None = None) -> ResponseJSON:
    """The response for `program` in `lowered`'s kernels, checked against its model; the baseline's
    kernels go with it so a report can draw the program before and after; each kernel says how it runs."""
    def listed(kernels: list[Kernel]) -> list[KernelJSON]:
        return [k.to_dict() | {"runs_as": runs_as(k, profile)} for k in kernels]

    per_call = listed(lowered.kernels)
    return typed({"id": identity, "program": program, "kernels": per_call,
            "precompute_kernels": listed(lowered.precompute), "baseline_kernels": listed(baseline.kernels),
            "listing": kernel_listing(lowered, profile.name),
            "estimate": estimate | {"runs_as": dict(Counter(k["runs_as"] for k in per_call))},
            "validation": validation, "report": report, "provenance": provenance or {}, "cache": "miss"})


def _loops(
    tidied: Program, profile: HardwareProfile, options: OptimizeOptions, extra_rules: Sequence[NamedRule]
) -> tuple[Program, list[Program], list[NestedReportJSON], float]:
    """Loop bodies optimized through the whole pipeline, with and without the scans' per-step
    input projections hoisted into one GEMM over every step (real mode), the loops' new invariants
    (a weight concatenated in a body) moved out again; the cheaper under the baseline's policy is
    searched, the other joins the kernel e-graph. Bodies share the request's time limit; what they
    leave of it is returned for the search."""
    variants = [tidied]
    if options.rules and options.fp_mode == "real":
        hoisted, count = hoist_scan_projections(tidied)
        variants += [hoisted] if count else []
    limit, started = budget(options).time_limit_s, time.perf_counter()
    share = limit / (1 + sum(nested_program_count(v) for v in variants))
    # bodies come back as JAX ops: a loop's pricing reads a fused Pallas kernel in a body as an unknown op
    body_options = options.model_copy(update={"time_limit_s": share, "lowering": "xla"})
    done = []
    for variant in variants:
        nested, report = optimize_nested(variant, lambda body: optimize(body, profile, body_options, extra_rules))
        done.append((tidy_loops(nested)[0] if options.rules else nested, report))
    best = min(done, key=lambda d: baseline_kernels(d[0], profile).total.time_s)
    remaining = max(share, limit - (time.perf_counter() - started))
    return best[0], [d[0] for d in done if d is not best], best[1], remaining


def with_pallas_kernels(candidate: Program, lowered: KernelProgram, written: Program,
                       baseline: KernelProgram, profile: HardwareProfile, notes: list[str]
                       ) -> tuple[Program, KernelProgram]:
    """The program with each key-blocked kernel returned as one fused Pallas kernel, and where the
    profile compiles Pallas, each other fused kernel whose values are made apart along an axis (tiled); and its
    kernels. Where the profile's own kernels hold one GEMM, a key-blocked kernel left as ops would
    be a kernel that does not run: the program is then priced as XLA runs it (as the baseline is,
    or the baseline's program where that is no slower)."""
    realized, kernels, realized_notes = realize_attention(candidate, lowered.kernels)
    if profile.kernel.pallas_compiled:
        realized, kernels, tile_notes = realize_tiles(realized, kernels, profile)
        realized_notes += tile_notes
    else:
        realized_notes.append(f"{profile.name} runs Pallas kernels only interpreted (kernel.pallas_compiled): its "
                              "fused kernels other than attention stay JAX ops")
    notes += realized_notes
    try:
        typecheck(realized)
    except WireError as err:  # a fault of the realization: the program as it was, and the reason
        notes.append(f"the fused Pallas kernels do not type-check ({err}); returned as JAX ops")
        realized, kernels = candidate, lowered.kernels
    left = [k for k in kernels if k.kind == "key_blocked" and "flash_attention" not in k.ops]
    if not left or profile.kernel.max_gemms >= 2:
        return realized, replace(lowered, kernels=kernels)
    notes.append("an attention kernel this profile runs only as one Pallas kernel stays JAX ops: "
                 "priced as XLA runs it")
    lowered = baseline_kernels(candidate, profile)
    return (candidate, lowered) if lowered.total.time_s < baseline.total.time_s else (written, baseline)


def _as_xla_runs_it(candidate: Program, lowered: KernelProgram, written: Program,
                    baseline: KernelProgram, profile: HardwareProfile, notes: list[str]
                    ) -> tuple[Program, KernelProgram, FusionChoiceJSON]:
    """The program to return, its kernels as XLA groups it (the fused kernels it carries as chosen),
    priced as the baseline is, and the fusion report's say: what was chosen (the baseline's program
    where the search's gains less than the profile's `min_speedup`) and the search's program's
    time as XLA runs it (`as_run_s`). This is the one comparison that decides on such a profile: the
    baseline is XLA's grouping too, so it is like with like."""
    run = kernels_as_run(candidate, profile, carried_kernels(lowered.kernels))
    if _gain_below_min_speedup(baseline, run, profile, notes, "as XLA groups the program, its "):
        return written, baseline, {"as_run_s": run.total.time_s, "chosen": "min_speedup"}
    return candidate, run, {"as_run_s": run.total.time_s, "chosen": "xla"}


def _loop_notes(moved: int, hoisted: int) -> list[str]:
    """Notes on the loops of a returned program derived from the request (every program the search
    holds has its loops tidied); `hoisted`: scan input projections it runs before the loop that the
    baseline's program runs in the body."""
    notes = [f"moved {moved} loop-invariant equation(s) out of loop bodies"] if moved else []
    if hoisted > 0:
        notes.append(f"hoisted {hoisted} scan input projection GEMM(s) out of the loop body: one GEMM over every step")
    return notes


def _kernels(found: Search, written: Program, baseline: KernelProgram, profile: HardwareProfile,
             options: OptimizeOptions, notes: list[str]) -> tuple[Program, KernelProgram, FusionChoiceJSON]:
    """The program to return, its kernels and the fusion report: the search's program with its
    extracted kernels, or a policy's where cheaper (a piecewise search's kernels end at its cuts, a
    policy's need not); the baseline's program (`written`) where that is no slower or the gain is
    below the profile's `min_speedup`."""
    if found.candidate is None:
        notes.append(f"extraction produced a cycle ({found.cycle}); returning the baseline's program")
        return written, baseline, {"chosen": "baseline"}
    candidate = found.candidate
    extracted = build_kernel_program(candidate, profile, groups=found.groups, key_blocking=options.key_blocking)
    chosen, lowered = min([("egraph", extracted), *((p.name, build_kernel_program(candidate, profile, p))
                                                    for p in POLICIES)], key=lambda c: c[1].total.time_s)
    report: FusionChoiceJSON = {"egraph_s": extracted.total.time_s, "baseline_s": baseline.total.time_s,
                                "chosen": chosen, "programs": found.programs, "seeded_kernels": found.seeded_kernels}
    if compiled_by_xla(profile):  # the search's grouping is not what runs: `_as_xla_runs_it` compares
        return candidate, lowered, report
    # The baseline's kernels are seeded, so extraction starts no worse than they; this catches what
    # seeding cannot express (estimate drift, a piecewise search).
    if lowered.total.time_s > baseline.total.time_s * (1 + 1e-9):  # beyond the sums' rounding
        notes.append("the e-graph's program was estimated slower than the baseline; returning the baseline's program")
        return written, baseline, {**report, "chosen": "baseline"}
    if _gain_below_min_speedup(baseline, lowered, profile, notes):
        return written, baseline, {**report, "chosen": "min_speedup"}
    return candidate, lowered, report


def _gain_below_min_speedup(baseline: KernelProgram, lowered: KernelProgram, profile: HardwareProfile,
                            notes: list[str], priced: str = "") -> bool:
    """Whether `lowered` gains less over `baseline` than the profile's `min_speedup` trusts, so the
    baseline's program is returned (said in `notes`; `priced`: how the two were priced, if said)."""
    if baseline.total.time_s >= profile.min_speedup * lowered.total.time_s:
        return False
    notes.append(f"{priced}estimated speedup {baseline.total.time_s / lowered.total.time_s:.3f}x is below the "
                 f"profile's min_speedup {profile.min_speedup}; returning the baseline's program")
    return True


def _report(found: Search, fusion_report: FusionChoiceJSON, timings: dict[str, float], background: dict[str, float],
            notes: list[str], control_flow: list[NestedReportJSON] | None, program: Program, candidate: Program
            ) -> ReportJSON:
    saturation, fusion, sizes = found.saturation, found.fusion, found.egraph
    return {
        "rewrites": {**saturation.rules_fired, **fusion.rules_fired},
        "egraph": {"enodes": sizes["enodes"], "eclasses": sizes["eclasses"],
                   "iterations": saturation.iterations, "stop_reason": _stop_reason(saturation, fusion),
                   "fusion": {"enodes": sizes["fusion_enodes"], "eclasses": sizes["fusion_eclasses"],
                              "candidate_enodes": found.extraction.candidates, "rounds": fusion.fusion_rounds}},
        "extraction": {**_extraction_report(found.extraction), "algebra": _extraction_report(found.algebra)},
        "fusion": fusion_report,
        "partition": found.pieces or None,
        "equations": {"original": len(program["eqns"]), "optimized": len(candidate["eqns"]),
                      "op_delta": op_delta(program, candidate)},
        "timings_s": {k: round(v, 6) for k, v in timings.items()},
        "background_s": background,
        "notes": notes,
        "control_flow": control_flow,
    }


def op_delta(original: Program, returned: Program) -> dict[str, int]:
    """How the returned program's op counts differ from the original's (a merge: fewer
    dot_general, one concatenate, more slices)."""
    delta = Counter(e["op"] for e in returned["eqns"])
    delta.subtract(Counter(e["op"] for e in original["eqns"]))
    return {op: n for op, n in sorted(delta.items()) if n}


def _stop_reason(saturation, fusion) -> str:
    return fusion.stop_reason if fusion.stop_reason == "time_limit" else saturation.stop_reason


def _extraction_report(extraction: Extraction) -> ExtractionJSON:
    return {"method": extraction.method, "cost_s": extraction.cost, "candidate_enodes": extraction.candidates,
            "optimality_gap": getattr(extraction, "optimality_gap", None),
            "status": getattr(extraction, "status", "heuristic")}


def _ratio(reference: KernelProgram, optimized: KernelProgram) -> float:
    return reference.total.time_s / optimized.total.time_s if optimized.total.time_s else 1.0


def _estimates(profile: HardwareProfile, naive: KernelProgram, baseline: KernelProgram,
               optimized: KernelProgram, programs: list[Program], egraph: EGraphFloor | None = None,
               attention_kernels: bool = False) -> EstimatesJSON:
    floor = lower_bound(programs, profile, egraph.times if egraph else None, attention_kernels)
    proof: dict[Resource, Proof] | None = {
        r: "exact" if r in egraph.exact else "heaviest_path" for r in FLOOR_RESOURCES} if egraph else None
    return {
        "hardware": profile.name,
        "priced_as": profile.kernel.fusion,
        "naive": naive.total.to_dict(),
        "baseline": baseline.total.to_dict(),
        "optimized": optimized.total.to_dict(),
        "precompute": optimized.precompute_total.to_dict(),
        "dispatch_s": profile.kernel.dispatch_overhead_s or 0.0,
        "speedup_vs_baseline": _ratio(baseline, optimized),
        "speedup_vs_naive": _ratio(naive, optimized),
        "optimized_over_bound": optimized.total.time_s / floor.time_s if floor.time_s else None,
        "lower_bound": {**floor.to_dict(), "binding": floor.bound, "over": "egraph" if egraph else "returned",
                        "proof": proof},
    }
