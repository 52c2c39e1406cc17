"""Saturation driver: named schedules run one iteration at a time under explicit budgets.

egglog has no node limit or timeout of its own and one iteration can grow the e-graph a lot, so
the budgets are checked between iterations; the hard deadline belongs to the worker process.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from egglog import EGraph, Ruleset, ruleset

from rewrites.algebra import ALGEBRA
from rewrites.layout import LAYOUT
from rewrites.matmul import MATMUL
from rewrites.merge import MERGE
from rewrites.registry import FpMode, rule_names_by_decl

SINGLE_PATTERN = [ALGEBRA, LAYOUT, MATMUL]
MULTI_PATTERN = [MERGE]  # merges run a bounded number of rounds: they feed on their own output
ALL_FAMILIES = [*SINGLE_PATTERN, *MULTI_PATTERN]
_RULE_NAMES = rule_names_by_decl(ALL_FAMILIES)


@dataclass(frozen=True)
class Budget:
    iter_limit: int = 12
    node_limit: int = 50_000
    time_limit_s: float = 5.0
    merge_rounds: int = 2


@dataclass
class SaturationReport:
    iterations: int = 0
    enodes: int = 0
    stop_reason: str = "saturated"
    rules_fired: dict[str, int] = field(default_factory=dict)
    time_s: float = 0.0


@dataclass(frozen=True)
class Schedule:
    """Rulesets for one fp mode: single-pattern families every iteration, merges for a few rounds."""

    name: str
    every_iteration: Ruleset
    bounded: Ruleset


def _schedule(name: str, fp_mode: FpMode) -> Schedule:
    def combined(families, label):
        return ruleset(*(r.rule for f in families for r in f.rules if fp_mode == "real" or r.mode == "exact"),
                       name=f"{label}-{fp_mode}")
    return Schedule(name, combined(SINGLE_PATTERN, "single"), combined(MULTI_PATTERN, "multi"))


SCHEDULES: dict[FpMode, Schedule] = {"exact": _schedule("exact", "exact"), "real": _schedule("real", "real")}
NO_RULES = Schedule("none", ruleset(name="none-a"), ruleset(name="none-b"))


def term_enodes(egraph: EGraph) -> int:
    """E-nodes of the term language (analysis tables do not count against the budget)."""
    return sum(size for fn, size in egraph.all_function_sizes() if str(fn).startswith("Term."))


def saturate(egraph: EGraph, schedule: Schedule, budget: Budget) -> SaturationReport:
    report, fired, start = SaturationReport(), Counter(), time.perf_counter()
    for iteration in range(budget.iter_limit + 1):
        if iteration == budget.iter_limit:
            report.stop_reason = "iter_limit"
            break
        if time.perf_counter() - start > budget.time_limit_s:
            report.stop_reason = "time_limit"
            break
        changed = False
        rulesets = [schedule.every_iteration] + ([schedule.bounded] if iteration < budget.merge_rounds else [])
        for rs in rulesets:
            run = egraph.run(1, ruleset=rs)
            changed |= run.updated
            for decl, matches in run.num_matches_per_rule.items():
                fired[_RULE_NAMES.get(decl, "unnamed")] += matches
        report.iterations = iteration + 1
        report.enodes = term_enodes(egraph)
        if not changed:
            report.stop_reason = "saturated"
            break
        if report.enodes > budget.node_limit:
            report.stop_reason = "node_limit"
            break
    report.enodes = term_enodes(egraph)
    report.rules_fired = {k: v for k, v in sorted(fired.items()) if v}
    report.time_s = time.perf_counter() - start
    return report

