"""The e-graph search for one program: ingest -> saturate -> extract (the algebra) -> fuse ->
extract kernels -> emit. Returns the chosen program and its kernel groups; lowering, validation and
the response belong to the pipeline (service/optimizer/pipeline.py), which may search a program piecewise
(service/optimizer/partition.py).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial

from costmodel.extract import Exclusive, Extraction, Requires, drop_dominated, extract_greedy_dag
from costmodel.ilp import cheaper, extract_auto, extract_ilp, proven_minimum
from costmodel.kernel_cost import (NodeCoster, Proxy, ResourceTimes, gemm_exclusive_groups, proxies, static_classes,
                                   tee_requirements)
from costmodel.path_floor import heaviest_path_floors
from costmodel.profile import HardwareProfile
from costmodel.warm_start import seeded_extraction
from lowering.attention_kernels import with_attention_kernels
from lowering.emit import ExtractionCycle, emit_program, without_unused_consts
from lowering.kernel_json import Resource
from lowering.kernels import POLICIES, Kernel, build_kernel_program, static_names
from lowering.pallas_attention import unrealizable
from rewrites.chain_order import orders_every_matmul, seed_chain_orders
from rewrites.egraph_view import EGraphView, view_egraph
from rewrites.ingest import LoadedProgram, ingest
from rewrites.kernel_seeds import KernelSeed, seed_kernels
from rewrites.registry import NamedRule
from rewrites.schedule import FUSION_ONLY, NO_RULES, Budget, SaturationReport, saturate, schedule_for
from service.optimizer.options import OptimizeOptions
from service.optimizer.progress import report, stage
from validation.background import BackgroundValidation
from wire.json_types import Program

AUTO_ILP_NODE_BUDGET = 5_000  # beyond this the ILP rarely proves anything in the time it gets
# Kernel e-graphs are harder (exclusive GEMMs, tee requirements, weak LP bounds). Started from
# the seeded conventional kernels, 0.6-0.9k candidates (transformer layer, MLP training step, MLP-
# Mixer) prove optimal in 0.1-0.3 s; BERT's 0.9k and the NasRNN's 6.5k keep a gap after 2 s.
AUTO_FUSION_ILP_NODE_BUDGET = 1_000
# `auto`'s ILP time by stage (True: the algebra). Not a share of the request's time limit: that
# limit buys saturation, and a larger e-graph given a shorter ILP came out worse (the NasRNN at a
# 1 s limit: 43.2 us, at 0.1 s: 35.6 us), so a larger limit could return a worse program.
AUTO_ILP_MAX_S = {True: 2.0, False: 0.3}
# The e-graph floor's exact extractions are limited by work, not time, so that a request's lower bound
# is the same on a busy machine as on an idle one: each solve stops after FLOOR_BRANCH_NODES
# branch-and-bound nodes (its dual bound still holds), and they are tried only on kernel e-graphs
# with few alternatives, where HiGHS's root (presolve, cuts) is quick. Measured: every zoo kernel
# e-graph within FLOOR_NODE_BUDGET e-nodes and FLOOR_CHOICE_BUDGET alternatives (e-nodes less
# e-classes; an 80-matmul chain's 318 e-nodes have 30) proves its floors at the root in <= 0.12 s;
# an unrolled RNN's 409 e-nodes over 103 classes (306 alternatives) need 1.7 s for the root alone.
FLOOR_NODE_BUDGET = 500
FLOOR_CHOICE_BUDGET = 100
FLOOR_BRANCH_NODES = 20
FLOOR_SAFETY_S = 2.0  # never reached within the budgets above; it only keeps a request bounded
FLOOR_RESOURCES: tuple[Resource, ...] = ("compute", "memory", "launch")  # ResourceTimes' fields, less their `_s`


@dataclass(frozen=True)
class EGraphFloor:
    """Per resource, the least any program of a kernel e-graph needs per call, and how it was proven:
    the resources in `exact` by an exact extraction, the others by the e-graph's heaviest path."""

    times: ResourceTimes
    exact: frozenset[str]


@dataclass
class Search:
    """What the search chose for one program. `candidate` (None when extraction made a cycle)
    computes the program with the equations of each kernel in `groups`; `algebraic` is the
    algebraic optimum under the first proxy (validated early, beside the fusion stage);
    `programs` counts the programs the kernel e-graph held (the program, its alternatives and the
    distinct algebras)."""

    candidate: Program | None
    groups: list[list[int]]
    algebraic: Program
    saturation: SaturationReport
    fusion: SaturationReport
    algebra: Extraction
    extraction: Extraction
    egraph: dict[str, int]  # enodes / eclasses of the algebra's and the fusion's e-graphs
    seeded_kernels: int = 0
    programs: int = 1
    cycle: str | None = None
    pieces: dict[str, int] = field(default_factory=dict)  # set when searched piecewise
    # when searched piecewise: each distinct piece as written and as searched, which `candidate` stitches
    searched_pieces: list[tuple[Program, Program]] = field(default_factory=list)
    # candidate's value -> the searched program's value in its e-class (lowering/emit.py); empty when stitched
    provenance: dict[str, str] = field(default_factory=dict)
    # per resource, the least any program in the kernel e-graph(s) needs per call (None: no e-graph searched)
    floor: EGraphFloor | None = None


def _progress(saturation: SaturationReport) -> None:
    """After each saturation step: the e-graph's size as progress (a cancelled run stops here)."""
    report(egraph_nodes=saturation.enodes)


def budget(options: OptimizeOptions) -> Budget:
    """The saturation budget of `options` (unset limits: the optimizer's defaults)."""
    options = options.resolved()
    return Budget(iter_limit=options.iter_limit, node_limit=options.node_limit, time_limit_s=options.time_limit_s)


def search(program: Program, profile: HardwareProfile, options: OptimizeOptions,
           timings: dict[str, float], validation: BackgroundValidation | None = None,
           alternatives: Sequence[Program] = (), extra_rules: Sequence[NamedRule] = ()) -> Search:
    """Search one (type-checked, control-flow-optimized) program; stage times add to `timings`.
    `validation` gets the algebraic optimum as soon as it is known (fusion only regroups it).
    `alternatives` (equivalent programs over the same inputs and consts: the baseline's, other
    loop variants) join the kernel e-graph, so their kernels are a choice too. `extra_rules` run
    beside the algebra's own (in-process callers only: rules are not data a request can carry)."""
    with ExitStack() as egraphs:  # each dropped on this thread when the search ends (LoadedProgram.close)
        return _search(program, profile, options, timings, validation, egraphs, alternatives, extra_rules)


def _search(program: Program, profile: HardwareProfile, options: OptimizeOptions, timings: dict[str, float],
            validation: BackgroundValidation | None, egraphs: ExitStack, alternatives: Sequence[Program],
            extra_rules: Sequence[NamedRule]) -> Search:
    with stage(timings, "ingest"):
        loaded = egraphs.enter_context(ingest(program))
    with stage(timings, "saturate"):
        ordered = False
        if options.rules and options.fp_mode == "real":  # matmul associativity: real arithmetic only
            chains = seed_chain_orders(loaded, [partial(price, profile) for price in proxies(profile).values()],
                                       static_names(program, profile.kernel.precompute_weights))
            ordered = orders_every_matmul(program, chains)
        schedule = schedule_for(options.fp_mode, frozenset(options.exclude_rules), extra_rules,
                                ordered) if options.rules else NO_RULES
        saturation = saturate(loaded.egraph, schedule, budget(options), _progress)
    if validation is not None:
        validation.settle()  # the inputs are drawn by now: collection need not wait through extraction
    with stage(timings, "extract"):
        view = view_egraph(loaded.egraph)
        algebras = [_extract_stage(view, loaded, profile, program, options, proxy)[0] for proxy in proxies(profile)]
        untrimmed = [emit_program(view, a.choice, loaded.params, program).program for a in algebras]
        algebraic = without_unused_consts(untrimmed[0])  # eqn indices are unchanged
        report(best_estimate_s=algebras[0].cost)
    if validation is not None:
        validation.start(algebraic)
    with stage(timings, "fuse"):
        # The program, the alternatives and each distinct algebra, in one e-graph (their outputs
        # are one class): extraction weighs every policy's kernels over each, and can mix them.
        leaves = {s["name"] for s in [*program["inputs"], *program.get("consts", [])]}
        distinct: list[Program] = []
        for candidate in [*alternatives, *untrimmed]:
            reads = {s["name"] for s in [*candidate["inputs"], *candidate.get("consts", [])]}
            if candidate != program and candidate not in distinct and reads <= leaves:  # var indices agree
                distinct.append(candidate)
        fused = egraphs.enter_context(ingest(program, distinct, "kernels"))  # all consts kept: var indices agree
        fusion = saturate(fused.egraph, FUSION_ONLY if options.rules else NO_RULES, budget(options), _progress)
        seeds = []
        for tag, candidate in enumerate(fused.programs if options.rules else []):
            candidate = without_unused_consts(candidate)
            for policy in POLICIES:
                kernels = build_kernel_program(candidate, profile, policy).kernels
                seeds.append((tag, seed_kernels(fused, [(k.eqns, set(k.outputs)) for k in kernels], tag)))
            kernels = _attention_kernels(candidate, kernels, profile, options)
            if kernels:
                seeds.append((tag, seed_kernels(fused, [(k.eqns, set(k.outputs)) for k in kernels], tag)))
    with stage(timings, "extract_kernels"):
        kernel_view = view_egraph(fused.egraph)
        extraction, coster = _extract_stage(kernel_view, fused, profile, program, options, None, seeds)
        exclusive, requires = gemm_exclusive_groups(kernel_view), tee_requirements(kernel_view)
        report(egraph_nodes=kernel_view.enode_count, best_estimate_s=extraction.cost)
    with stage(timings, "bound"):
        floor = _floor(kernel_view, coster, exclusive, requires)
    sizes = {"enodes": view.enode_count, "eclasses": len(view.classes),
             "fusion_enodes": kernel_view.enode_count, "fusion_eclasses": len(kernel_view.classes)}
    result = Search(None, [], algebraic, saturation, fusion, algebras[0], extraction, sizes,
                    len({s for _, seed_set in seeds for s in seed_set}), len(fused.programs), floor=floor)
    with stage(timings, "lower"):
        try:
            emitted = emit_program(kernel_view, extraction.choice, fused.params, program)
            result.candidate = without_unused_consts(emitted.program)  # eqn indices (groups) are unchanged
            result.groups = emitted.groups
            result.provenance = emitted.provenance
        except ExtractionCycle as err:
            result.cycle = str(err)
    return result


def _attention_kernels(candidate: Program, kernels: list[Kernel], profile: HardwareProfile,
                       options: OptimizeOptions) -> list[Kernel] | None:
    """A policy's kernels with each attention whole, to run blocked (two GEMMs in one kernel):
    where the profile's kernels may hold two, or where each such kernel is returned as one fused
    Pallas kernel (`lowering: "pallas"`), which must then run key-blocked and be one the fused
    kernel expresses: a profile whose kernels hold one GEMM never prices a kernel XLA would split."""
    if not options.attention_kernels(profile):
        return None
    regrouped = with_attention_kernels(candidate, [k.eqns for k in kernels])
    if not regrouped:
        return None
    kernels = build_kernel_program(candidate, profile, groups=regrouped, key_blocking=options.key_blocking).kernels
    if profile.kernel.max_gemms < 2:
        beyond = [k for k in kernels if k.ops.count("dot_general") > profile.kernel.max_gemms]
        if any(k.kind != "key_blocked" or unrealizable(candidate, k) for k in beyond):
            return None
    return kernels


def _extract(view: EGraphView, cost, options: OptimizeOptions, time_limit_s: float,
             exclusive: Exclusive, requires: Requires, node_budget: int, auto_cap_s: float,
             warm: Extraction | None) -> Extraction:
    """`ilp` gets the whole time limit; `auto` gives it `auto_cap_s` and keeps greedy's answer when
    the ILP cannot beat it in time (e.g. symmetric commutativity-heavy e-graphs). All start from
    the cheaper of greedy and `warm` (the seeded kernels)."""
    if options.extraction == "auto":
        return extract_auto(view, cost, auto_cap_s, node_budget, exclusive, requires, warm)
    start = cheaper(extract_greedy_dag(view, cost, exclusive, requires), warm)
    if options.extraction == "greedy":
        return start
    return extract_ilp(view, cost, warm_start=start, time_limit_s=time_limit_s, exclusive=exclusive,
                       requires=requires)


def _extract_stage(view: EGraphView, loaded: LoadedProgram, profile: HardwareProfile, program: Program,
                   options: OptimizeOptions, proxy: Proxy | None,
                   seeds: Sequence[tuple[int, Sequence[KernelSeed]]] = ()) -> tuple[Extraction, NodeCoster]:
    """Price and extract. The algebra stage (no kernel nodes yet) prices under a `proxy` for the
    kernels the fusion stage can make; `seeds` (a policy's kernels over one of the e-graph's
    programs, by its number) each make a program extraction may start from. Returns the extraction
    and the coster that priced it."""
    coster = NodeCoster(view, loaded.params, profile, static_classes(view, program, profile.kernel.precompute_weights),
                        proxy, options.key_blocking)
    node_cost = {n.id: coster(n) for c in view.classes.values() for n in c.nodes}
    exclusive, requires = gemm_exclusive_groups(view), tee_requirements(view)
    warm = None
    for tag, seed_set in seeds:
        warm = cheaper(warm, seeded_extraction(view, seed_set, node_cost, exclusive, requires, tag))
    keep = frozenset(n.id for n in warm.choice.values()) if warm else frozenset()
    candidates = drop_dominated(view, node_cost, exclusive, requires, keep)
    algebra = proxy is not None
    extraction = _extract(candidates, lambda n: node_cost[n.id], options, budget(options).time_limit_s,
                          exclusive, requires, AUTO_ILP_NODE_BUDGET if algebra else AUTO_FUSION_ILP_NODE_BUDGET,
                          AUTO_ILP_MAX_S[algebra], warm)
    extraction.candidates = candidates.enode_count
    return extraction, coster


def _floor(view: EGraphView, coster: NodeCoster, exclusive: Exclusive, requires: Requires) -> EGraphFloor:
    """Per resource, the least any program in the kernel e-graph needs per call: the larger of its
    heaviest path's (any size) and, for e-graphs within `FLOOR_NODE_BUDGET` e-nodes and
    `FLOOR_CHOICE_BUDGET` alternatives, the exact extraction's with that resource alone as its cost."""
    deadline = time.perf_counter() + FLOOR_SAFETY_S
    times = {n.id: coster.times(n) for c in view.classes.values() for n in c.nodes}
    costs = [{i: getattr(t, f"{resource}_s") for i, t in times.items()} for resource in FLOOR_RESOURCES]
    minima, exact = heaviest_path_floors(view, costs), set()
    small = view.enode_count <= FLOOR_NODE_BUDGET and view.enode_count - len(view.classes) <= FLOOR_CHOICE_BUDGET
    for k, resource in enumerate(FLOOR_RESOURCES):
        remaining = deadline - time.perf_counter()
        if small and remaining > 0:
            proven = proven_minimum(view, costs[k], FLOOR_BRANCH_NODES, remaining, exclusive, requires)
            if proven is not None:
                exact.add(resource)
                minima[k] = max(minima[k], proven)
    return EGraphFloor(ResourceTimes(*minima), frozenset(exact))
