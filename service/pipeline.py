"""The optimizer pipeline, the only place that knows the order of the stages.

ingest -> saturate -> extract -> lower (emit + kernels) -> validate, each a pure function of its
inputs, on a fresh e-graph per request.
"""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

from costmodel.egraph_view import EGraphView, view_egraph
from costmodel.extract import Exclusive, Extraction, Requires, drop_dominated, extract_greedy_dag
from costmodel.ilp import cheaper, extract_auto, extract_ilp
from costmodel.kernel_cost import NodeCoster, gemm_exclusive_groups, tee_requirements
from costmodel.profile import HardwareProfile, load_profile, profile_from_dict
from costmodel.warm_start import seeded_extraction
from lowering.emit import ExtractionCycle, emit_program, without_unused_consts
from lowering.kernels import KernelProgram, build_kernel_program, lower_bound
from lowering.listing import kernel_listing
from lowering.to_jax import typecheck
from lowering.validate import validate
from rewrites.ingest import LoadedProgram, ingest
from rewrites.kernel_seeds import KernelSeed, seed_kernels
from rewrites.schedule import FUSION_ONLY, NO_RULES, SCHEDULES, Budget, saturate
from service.control_flow import optimize_nested
from service.options import OptimizeOptions
from service.settings import get_settings

VERSION = "0.1.0"


def resolve_profile(hardware: str | dict | HardwareProfile | None) -> HardwareProfile:
    if isinstance(hardware, HardwareProfile):
        return hardware
    if isinstance(hardware, dict):
        return profile_from_dict(hardware, source="request hardware")
    return load_profile(hardware or get_settings().default_hardware)


def request_id(program: dict, profile: HardwareProfile, options: OptimizeOptions) -> str:
    canonical = json.dumps([program, profile.model_dump(), options.model_dump(), VERSION], sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def static_classes(view: EGraphView, program: dict, precompute_weights: bool = True) -> set[str]:
    """E-classes computable from constants, and from weights when the profile precomputes
    weight-only work (then free per call)."""
    n_inputs = len(program["inputs"])
    weights = {i for i, s in enumerate(program["inputs"]) if precompute_weights and s.get("role") == "weight"}
    static: set[str] = set()
    changed = True
    while changed:
        changed = False
        for cid, cls in view.classes.items():
            if cid in static:
                continue
            for node in cls.nodes:
                if node.op == "var":
                    ok = int(node.attrs[0]) >= n_inputs or int(node.attrs[0]) in weights
                else:
                    ok = node.op != "opaque" and all(c in static for c in node.children)
                if ok:
                    static.add(cid)
                    changed = True
                    break
    return static


@contextmanager
def _stage(timings: dict[str, float], name: str):
    start = time.perf_counter()
    yield
    timings[name] = round(time.perf_counter() - start, 6)


def _budget(options: OptimizeOptions) -> Budget:
    s = get_settings()
    return Budget(iter_limit=min(options.iter_limit, s.max_iter_limit),
                  node_limit=min(options.node_limit or s.default_node_limit, s.max_node_limit),
                  time_limit_s=min(options.time_limit_s or s.default_time_limit_s, s.max_time_limit_s))


AUTO_ILP_NODE_BUDGET = 5_000  # beyond this the ILP rarely proves anything in the time it gets
# Kernel e-graphs are harder (exclusive GEMMs, tee requirements, weak LP bounds). Started from
# the seeded conventional kernels, 0.6-0.9k candidates (transformer layer, MLP training step, MLP-
# Mixer) prove optimal in 0.1-0.3 s; BERT's 0.9k and the NasRNN's 6.5k keep a gap after 2 s.
AUTO_FUSION_ILP_NODE_BUDGET = 1_000
AUTO_ILP_TIME_FRACTION = 0.25  # of the request's time limit, capped below
AUTO_ILP_MAX_S = {True: 2.0, False: 0.3}  # cap by stage (fusion_proxy: the algebra)


def _extract(view: EGraphView, cost, options: OptimizeOptions, time_limit_s: float,
             exclusive: Exclusive, requires: Requires, node_budget: int, auto_cap_s: float,
             warm: Extraction | None) -> Extraction:
    """`ilp` gets the whole time limit; `auto` gives it a quarter (at most `auto_cap_s`) and keeps
    greedy's answer when the ILP cannot beat it in time (e.g. symmetric commutativity-heavy
    e-graphs). All start from the cheaper of greedy and `warm` (the seeded kernels)."""
    if options.extraction == "auto":
        return extract_auto(view, cost, min(auto_cap_s, AUTO_ILP_TIME_FRACTION * time_limit_s), node_budget,
                            exclusive, requires, warm)
    start = cheaper(extract_greedy_dag(view, cost, exclusive, requires), warm)
    if options.extraction == "greedy":
        return start
    return extract_ilp(view, cost, warm_start=start, time_limit_s=time_limit_s, exclusive=exclusive,
                       requires=requires)


def _extract_stage(loaded: LoadedProgram, profile: HardwareProfile, program: dict, options: OptimizeOptions,
                   fusion_proxy: bool, seeds: Sequence[KernelSeed] = ()) -> tuple[EGraphView, Extraction]:
    """Serialize, price and extract. With `fusion_proxy` (the algebra stage, which has no kernel
    nodes yet) vector ops are priced as fused epilogues, anticipating the fusion stage. `seeds`
    (the conventional kernels, seeded into the e-graph) make the program extraction starts from."""
    view = view_egraph(loaded.egraph)
    coster = NodeCoster(view, loaded.params, profile, static_classes(view, program, profile.kernel.precompute_weights),
                        fusion_proxy)
    node_cost = {n.id: coster(n) for c in view.classes.values() for n in c.nodes}
    exclusive, requires = gemm_exclusive_groups(view), tee_requirements(view)
    warm = seeded_extraction(view, seeds, node_cost, exclusive, requires) if seeds else None
    keep = frozenset(n.id for n in warm.choice.values()) if warm else frozenset()
    candidates = drop_dominated(view, node_cost, exclusive, requires, keep)
    extraction = _extract(candidates, lambda n: node_cost[n.id], options, _budget(options).time_limit_s,
                          exclusive, requires, AUTO_ILP_NODE_BUDGET if fusion_proxy else AUTO_FUSION_ILP_NODE_BUDGET,
                          AUTO_ILP_MAX_S[fusion_proxy], warm)
    extraction.candidates = candidates.enode_count
    return view, extraction


def optimize(program: dict[str, Any], hardware: str | dict | HardwareProfile | None = None,
             options: OptimizeOptions | dict | None = None) -> dict[str, Any]:
    """Optimize a wire program; raises WireError (a 422) if it does not type-check."""
    options = options if isinstance(options, OptimizeOptions) else OptimizeOptions.model_validate(options or {})
    profile = resolve_profile(hardware)
    timings: dict[str, float] = {}
    with _stage(timings, "typecheck"):
        typecheck(program)
    with _stage(timings, "control_flow"):  # bodies first; `program` stays the validation reference
        nested, control_flow = optimize_nested(program, lambda body: optimize(body, profile, options))
    with _stage(timings, "ingest"):
        loaded = ingest(nested)
    with _stage(timings, "saturate"):
        schedule = SCHEDULES[options.fp_mode] if options.rules else NO_RULES
        saturation = saturate(loaded.egraph, schedule, _budget(options))
    with _stage(timings, "extract"):
        view, algebra = _extract_stage(loaded, profile, program, options, fusion_proxy=True)
        algebraic = emit_program(view, algebra.choice, loaded.params, nested).program
    with _stage(timings, "fuse"):
        fused = ingest(algebraic)  # all consts kept: var indices mean the same as in `program`
        fusion = saturate(fused.egraph, FUSION_ONLY if options.rules else NO_RULES, _budget(options))
        algebraic = without_unused_consts(algebraic)  # eqn indices are unchanged
        greedy = build_kernel_program(algebraic, profile, fuse=True)  # the conventional kernels
        seeds = seed_kernels(fused, [(k.eqns, set(k.outputs)) for k in greedy.kernels]) if options.rules else []
    with _stage(timings, "extract_kernels"):
        kernel_view, extraction = _extract_stage(fused, profile, program, options, fusion_proxy=False, seeds=seeds)
    notes: list[str] = []
    fusion_report: dict[str, Any] = {"chosen": "none"}
    with _stage(timings, "lower"):
        naive = build_kernel_program(program, profile, fuse=False)
        baseline = build_kernel_program(program, profile, fuse=True)
        try:
            emitted = emit_program(kernel_view, extraction.choice, fused.params, program)
            candidate = without_unused_consts(emitted.program)  # eqn indices (groups) are unchanged
            lowered = build_kernel_program(candidate, profile, groups=emitted.groups)
            # The greedy kernels are e-nodes the extraction starts from, so this guard is for
            # seeds it could not match (a program that repeats an equation) and estimate drift.
            fusion_report = {"egraph_s": lowered.total.time_s, "greedy_s": greedy.total.time_s, "chosen": "egraph",
                             "seeded_kernels": len(seeds)}
            if greedy.total.time_s < lowered.total.time_s:
                candidate, lowered, fusion_report["chosen"] = algebraic, greedy, "greedy"
        except ExtractionCycle as err:
            candidate, lowered = program, baseline
            notes.append(f"extraction produced a cycle ({err}); returning the original program")
        if lowered.total.time_s > baseline.total.time_s:
            notes.append("optimized estimate was slower than the baseline; returning the original program")
            candidate, lowered = program, baseline
    with _stage(timings, "validate"):
        validation = validate(program, candidate, options.fp_mode) if options.validate_result \
            else {"status": "skipped", "max_rel_error": None, "trials": 0}
        if validation["status"] == "failed":
            notes.append("validation failed; returning the original program (rules fired: "
                         + ", ".join(saturation.rules_fired) + ")")
            candidate, lowered = program, baseline
    return {
        "id": request_id(program, profile, options),
        "program": candidate,
        "kernels": [k.to_dict() for k in lowered.kernels],
        "precompute_kernels": [k.to_dict() for k in lowered.precompute],
        "listing": kernel_listing(lowered, profile.name),
        "estimate": _estimates(profile, naive, baseline, lowered, [program, candidate]),
        "validation": validation,
        "report": {
            "rewrites": {**saturation.rules_fired, **fusion.rules_fired},
            "egraph": {"enodes": view.enode_count, "eclasses": len(view.classes),
                       "iterations": saturation.iterations, "stop_reason": _stop_reason(saturation, fusion),
                       "fusion": {"enodes": kernel_view.enode_count, "eclasses": len(kernel_view.classes),
                                  "candidate_enodes": extraction.candidates, "rounds": fusion.fusion_rounds}},
            "extraction": {**_extraction_report(extraction), "algebra": _extraction_report(algebra)},
            "fusion": fusion_report,
            "equations": {"original": len(program["eqns"]), "optimized": len(candidate["eqns"])},
            "timings_s": timings,
            "notes": notes,
            "control_flow": control_flow,
        },
        "cache": "miss",
    }


def _stop_reason(saturation, fusion) -> str:
    return fusion.stop_reason if fusion.stop_reason == "time_limit" else saturation.stop_reason


def _extraction_report(extraction: Extraction) -> dict[str, Any]:
    return {"method": extraction.method, "cost_s": extraction.cost, "candidate_enodes": extraction.candidates,
            "optimality_gap": getattr(extraction, "optimality_gap", None),
            "status": getattr(extraction, "status", "heuristic")}


def _estimates(profile: HardwareProfile, naive: KernelProgram, baseline: KernelProgram,
               optimized: KernelProgram, programs: list[dict]) -> dict[str, Any]:
    return {
        "hardware": profile.name,
        "naive": naive.total.to_dict(),
        "baseline": baseline.total.to_dict(),
        "optimized": optimized.total.to_dict(),
        "precompute": optimized.precompute_total.to_dict(),
        "speedup_vs_baseline": baseline.total.time_s / optimized.total.time_s if optimized.total.time_s else 1.0,
        "lower_bound": lower_bound(programs, profile).to_dict(),
    }
