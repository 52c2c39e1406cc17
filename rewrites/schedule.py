"""Saturation driver: named schedules run one iteration at a time under explicit budgets.

egglog has no node limit or timeout of its own and one iteration can grow the e-graph a lot, so
the budgets are checked between iterations; the hard deadline belongs to the worker process.
"""
from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Callable

from egglog import EGraph, Ruleset, ruleset

from rewrites.algebra import ALGEBRA
from rewrites.back_off import RestingRules
from rewrites.concat_split import CONCAT_SPLIT
from rewrites.egglog_internals import RunResult, ruleset_name, run_ruleset
from rewrites.fusion import FUSION, MAX_BODY_OPS
from rewrites.idioms import IDIOMS
from rewrites.layout import LAYOUT
from rewrites.matmul import MATMUL
from rewrites.merge import MERGE
from rewrites.online_softmax import ONLINE_SOFTMAX
from rewrites.registry import FpMode, NamedRule, rule_names_by_decl
from rewrites.shapes import SHAPES

SINGLE_PATTERN = [ALGEBRA, LAYOUT, MATMUL, IDIOMS, CONCAT_SPLIT, ONLINE_SOFTMAX]
MULTI_PATTERN = [MERGE]  # merges run a bounded number of rounds: they feed on their own output
ALL_FAMILIES = [*SINGLE_PATTERN, *MULTI_PATTERN]  # the algebra; fusion runs as its own stage
_RULE_NAMES = rule_names_by_decl(r for f in [*ALL_FAMILIES, FUSION] for r in f.rules)
ALGEBRA_RULE_NAMES = frozenset(r.name for f in ALL_FAMILIES for r in f.rules)  # what a request may exclude


AfterStep = Callable[["SaturationReport"], None]


def type_new_terms(egraph: EGraph) -> RunResult:
    """The shape and dtype analysis run until every term has its type."""
    return run_ruleset(egraph, SHAPES, saturate=True)


@dataclass(frozen=True)
class Budget:
    iter_limit: int = 12
    node_limit: int = 50_000
    time_limit_s: float = 5.0
    merge_rounds: int = 8  # a group of n matmuls sharing an operand merges fully in n - 1 rounds
    ac_match_limit: int = 1_000  # back_off: an AC rule matching more than this in one pass is skipped
    fusion_rounds: int = MAX_BODY_OPS  # each round grows kernel bodies by one op


@dataclass
class SaturationReport:
    iterations: int = 0
    enodes: int = 0
    stop_reason: str = "saturated"
    rules_fired: dict[str, int] = field(default_factory=dict)
    time_s: float = 0.0
    fusion_rounds: int = 0


@dataclass(frozen=True)
class Schedule:
    """Rulesets for one fp mode: single-pattern rules every iteration (commutativity and
    associativity throttled by back_off), multi-pattern merges for a bounded number of rounds;
    then fusion rounds (bodies grow one op per round)."""

    name: str
    every_iteration: Ruleset
    bounded: Ruleset
    throttled: tuple[Ruleset, ...] = ()  # one rule set per throttled rule, each under back_off
    fusion: Ruleset | None = None
    rule_names: dict[int, str] = field(default_factory=lambda: _RULE_NAMES)  # egglog rule's id -> rule name


def _schedule(fp_mode: FpMode, without: frozenset[str] = frozenset(), label: str = "",
              extra: Sequence[NamedRule] = ()) -> Schedule:
    """`extra` rules run every iteration beside the single-pattern families (under back_off when
    throttled); rules named in `without` do not run."""
    def allowed(rules, throttled):
        return [r for r in rules if r.allowed_in(fp_mode) and r.throttled == throttled and r.name not in without]

    def combined(rules, kind):
        return ruleset(*(r.rule for r in rules), name=f"{kind}-{fp_mode}{label}")
    single = [*(r for f in SINGLE_PATTERN for r in f.rules), *extra]
    throttled = allowed(single, True)
    # each throttled rule alone, so that back_off's verdict (held back or not) is that rule's
    return Schedule(fp_mode + label, combined(allowed(single, False), "single"),
                    combined(allowed([r for f in MULTI_PATTERN for r in f.rules], False), "multi"),
                    tuple(combined([r for r in throttled if r.name == name], f"ac-{name}")
                          for name in dict.fromkeys(r.name for r in throttled)),
                    rule_names={**_RULE_NAMES, **rule_names_by_decl(extra)})


SCHEDULES: dict[FpMode, Schedule] = {"exact": _schedule("exact"), "real": _schedule("real")}
# For a program whose every plain matmul lies in a chain the matrix-chain dynamic program ordered
# (rewrites/chain_order.py): its orders are the cheapest under every price extraction uses, so
# reassociating by rewrites would only enumerate dearer ones (a Catalan number of them).
ORDERED_CHAIN_RULES = frozenset({"matmul-assoc-right", "matmul-assoc-left"})
CHAINS_ORDERED = _schedule("real", ORDERED_CHAIN_RULES, "-chains-ordered")
NO_RULES = Schedule("none", ruleset(name="none-a"), ruleset(name="none-b"))
# Kernel boundaries for given programs (the original and the algebraic optimum): fusion
# enumerates kernels per algebraic alternative, which multiplies (a transformer layer's saturated
# e-graph grows 20x with 4-op bodies); over a few chosen programs 8-op bodies stay small.
FUSION_ONLY = Schedule("fusion-only", ruleset(name="fusion-only-a"), ruleset(name="fusion-only-b"),
                       fusion=FUSION.ruleset("exact"))


def schedule_for(fp_mode: FpMode, without: frozenset[str] = frozenset(), extra: Sequence[NamedRule] = (),
                 chains_ordered: bool = False) -> Schedule:
    """The algebra's schedule for `fp_mode` without the rules named in `without` and with `extra`
    ones (a rule bisection's configurations; a test's own rules): the shared constants when
    neither is given. Each other selection gets rulesets named after it (one e-graph never holds
    two rulesets of one name)."""
    if chains_ordered:
        without = without | ORDERED_CHAIN_RULES
    if not extra and without == (ORDERED_CHAIN_RULES if chains_ordered else frozenset()):
        return CHAINS_ORDERED if chains_ordered else SCHEDULES[fp_mode]
    selection = hashlib.blake2b(repr((sorted(without), [r.name for r in extra])).encode(), digest_size=6).hexdigest()
    return _schedule(fp_mode, frozenset(without), f"-{selection}", extra)


def table_sizes(egraph: EGraph) -> dict[str, int]:
    """Rows of every table, the term language's and the analyses' (one shape row per class)."""
    return {str(fn): size for fn, size in egraph.all_function_sizes()}


def term_enodes(egraph: EGraph, sizes: dict[str, int] | None = None) -> int:
    """E-nodes of the term language (analysis tables do not count against the budget)."""
    return sum(size for fn, size in (table_sizes(egraph) if sizes is None else sizes).items()
               if fn.startswith("Term."))


def _record(result: RunResult, fired: Counter, names: dict[int, str] = _RULE_NAMES) -> None:
    for rule, matches in result.matches.items():
        fired[names.get(rule, "unnamed")] += matches


def _fuse(egraph: EGraph, fusion: Ruleset, budget: Budget, start: float, report: SaturationReport,
          fired: Counter, after_step: AfterStep) -> None:
    """Fusion rounds until bodies stop growing; the time limit still applies (the algebra's node
    limit does not: bodies are bounded by their size guard)."""
    for _ in range(budget.fusion_rounds):
        if time.perf_counter() - start > budget.time_limit_s:
            report.stop_reason = "time_limit"
            return
        result = run_ruleset(egraph, fusion)
        _record(result, fired)
        report.fusion_rounds += 1
        after_step(report)
        if not result.updated:
            return


def _next_iteration(durations: list[float], sizes: list[int]) -> tuple[float, float]:
    """(seconds, e-nodes) the next iteration will likely take and reach: growth so far continued
    geometrically. An iteration cannot be interrupted, and on an 80-matmul chain the one after a
    9 s iteration took 60 s, so budgets are checked against where the next iteration lands. An
    iteration's time grows with the e-graph, at most as its square (that chain: 3.3x the e-nodes,
    6.5x the time); a slower iteration over an e-graph that barely grew (a family's first matches,
    a pause) is a one-off, not a rate to extrapolate."""
    if len(durations) < 2 or durations[-2] <= 0 or sizes[-2] <= 0:
        return (durations[-1] if durations else 0.0), float(sizes[-1] if sizes else 0)
    growth = max(1.0, sizes[-1] / sizes[-2])
    return durations[-1] * max(1.0, min(durations[-1] / durations[-2], growth ** 2)), sizes[-1] * growth


def saturate(egraph: EGraph, schedule: Schedule, budget: Budget,
             after_step: AfterStep = lambda report: None) -> SaturationReport:
    """Run `schedule` one iteration at a time under `budget`; `after_step` sees the report after
    each iteration and fusion round (progress; an exception from it stops the run there)."""
    report, fired, start = SaturationReport(), Counter(), time.perf_counter()
    durations: list[float] = []
    resting = RestingRules()
    type_new_terms(egraph)  # learns the program's result dtypes (`result_dtype`) before any rule reads them
    tables = table_sizes(egraph)
    sizes = [term_enodes(egraph, tables)]
    for iteration in range(budget.iter_limit + 1):
        if iteration == budget.iter_limit:
            report.stop_reason = "iter_limit"
            break
        next_s, next_nodes = _next_iteration(durations, sizes)
        if time.perf_counter() - start + next_s > budget.time_limit_s:
            report.stop_reason = "time_limit"
            break
        if next_nodes > 2 * budget.node_limit:  # the node limit may be crossed, not doubled
            report.stop_reason = "node_limit"
            break
        began = time.perf_counter()
        changed = False
        steps: list[tuple[Ruleset, int | None]] = [(schedule.every_iteration, None)]  # (rules, back_off limit)
        awake = [resting.awake(ruleset_name(rules), iteration) for rules in schedule.throttled]
        rested = not all(awake)
        steps += [(rules, budget.ac_match_limit) for rules, runs in zip(schedule.throttled, awake) if runs]
        if iteration < budget.merge_rounds:
            steps.append((schedule.bounded, None))
        for rules, match_limit in steps:
            result = run_ruleset(egraph, rules, match_limit)
            changed |= result.updated
            if match_limit is not None and result.updated and not result.matches:  # held back
                resting.held_back(ruleset_name(rules), iteration)
            _record(result, fired, schedule.rule_names)
            type_new_terms(egraph)  # before the next step's guards read them
        report.iterations = iteration + 1
        before, tables = tables, table_sizes(egraph)
        report.enodes = term_enodes(egraph, tables)
        after_step(report)
        durations.append(time.perf_counter() - began)
        sizes.append(report.enodes)
        # back_off reports a change whenever it held a rule back, even where the e-graph did not
        # change; an iteration that added no row and merged no classes leaves the next one the
        # same e-graph, so it would hold the same rules back again.
        if not changed or tables == before:
            if rested:  # a resting rule has not run on the e-graph as it is now
                resting.wake_all(iteration + 1)
                continue
            report.stop_reason = "saturated"
            break
        if report.enodes > budget.node_limit:
            report.stop_reason = "node_limit"
            break
    if schedule.fusion is not None:
        _fuse(egraph, schedule.fusion, budget, start, report, fired, after_step)
    report.enodes = term_enodes(egraph)
    report.rules_fired = {k: v for k, v in sorted(fired.items()) if v}
    report.time_s = time.perf_counter() - start
    return report

