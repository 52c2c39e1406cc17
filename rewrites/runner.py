"""Rulesets run on an e-graph as egglog commands converted once per process.

egglog-python's `EGraph.run` checks on every call, rule by rule, that the ruleset's rules are
registered (hashing each rule's whole declaration) and turns the report's per-rule matches back
into declarations (hashing them again): about 0.2 s of a 1-layer encoder's search, over some fifty
runs. Our rulesets do not change once built, so a ruleset is registered in an e-graph once, run
by a command converted once, and its matches are reported per rule declaration by identity.
"""
from __future__ import annotations

from dataclasses import dataclass

from egglog import EGraph, Ruleset, back_off, run

_COMMANDS: dict[tuple, object] = {}  # (ruleset, how it runs) -> egglog's command: the same in every e-graph


@dataclass(frozen=True)
class RunResult:
    updated: bool
    matches: dict[int, int]  # id of a rule's declaration -> its matches in this run (rules that matched)


def ensure_registered(egraph: EGraph, ruleset: Ruleset) -> None:
    """Add `ruleset`'s rules to `egraph` unless they are there (rulesets are never extended)."""
    if ruleset.__egg_ident__ not in egraph._state.rulesets:
        egraph._add_decls(ruleset)
        egraph._state.ruleset_to_egg(ruleset.__egg_ident__)


def run_ruleset(egraph: EGraph, ruleset: Ruleset, match_limit: int | None = None,
                saturate: bool = False) -> RunResult:
    """One run of `ruleset` (under `back_off(match_limit)` when given), or runs until it changes
    nothing (`saturate`)."""
    ensure_registered(egraph, ruleset)
    key = (ruleset.__egg_ident__, match_limit, saturate)
    if key not in _COMMANDS:
        schedule = run(ruleset, scheduler=back_off(match_limit=match_limit)) if match_limit is not None \
            else run(ruleset)
        schedule = schedule.saturate() if saturate else schedule
        egraph._add_decls(schedule)
        _COMMANDS[key] = egraph._state.run_schedule_to_egg(schedule.schedule)
    state = egraph._state
    (output,) = state._run_program(_COMMANDS[key])
    rules, matches = state.rule_name_to_command_decl, {}
    for name, n in output.report.num_matches_per_rule.items():
        if n:
            matches[id(rules[name])] = matches.get(id(rules[name]), 0) + n
    return RunResult(output.report.updated, matches)
