"""What each optimized kernel stands for in the original: the original values its outputs must equal
(the validator's value numbering and pairing, validation/regions.py), the original equations it replaces, and the
fired rules that can have shaped it (those whose patterns mention its ops or the ops it replaces)."""
from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Mapping

from rewrites.fusion import FUSION
from rewrites.registry import NamedRule, pattern_ops
from rewrites.schedule import ALL_FAMILIES
from validation.debug_json import KernelToCheck, Origin
from validation.regions import equations_reaching, find_regions
from validation.value_numbering import ValueTable
from wire.json_types import Program


def stands_for(original: Program, optimized: Program,
               provenance: Mapping[str, str] | None = None) -> dict[str, str]:
    """Optimized value -> the original value it must equal. The optimizer's own record where given
    (`provenance`: the original value in each emitted value's e-class, kept through ingest and
    extraction); else the validator's value numbering: identical computations, values paired
    through equal equations from the outputs down, and the roots of the rewritten regions. The
    outputs always pair."""
    plan = find_regions(original, optimized, ValueTable(real=True))  # kernels are compared within tolerance
    numbered = {} if plan is None else plan.stands_for
    values = {o["name"] for e in original["eqns"] for o in e["out"]} | {s["name"] for s in original["inputs"]}
    recorded = {p: o for p, o in (provenance or {}).items() if o in values}
    paired = {
        p: o for o, p in zip(original["outputs"], optimized["outputs"]) if isinstance(o, str) and isinstance(p, str)
    }
    return {**numbered, **recorded, **paired}


@functools.cache
def _optimizer_rule_patterns() -> dict[str, frozenset[str]]:
    # Reading a rule's patterns prints it with egglog's pretty printer: ~10 ms a rule, 3 s for all.
    return pattern_ops(r for f in [*ALL_FAMILIES, FUSION] for r in f.rules)


def rule_patterns(extra_rules: Iterable[NamedRule] = ()) -> dict[str, frozenset[str]]:
    """Per rule name, the primitives its patterns mention: the optimizer's rules and `extra_rules`."""
    patterns = dict(_optimizer_rule_patterns())
    for name, ops in pattern_ops(extra_rules).items():
        patterns[name] = patterns.get(name, frozenset()) | ops
    return patterns


def kernel_origin(original: Program, kernel: KernelToCheck, mapping: Mapping[str, str],
                  rules_fired: Mapping[str, int] | None, patterns: Mapping[str, frozenset[str]]) -> Origin:
    """For one kernel (as a response lists it): the original value per output (None where none is
    known), the original equations it replaces, whether it computes them as written (the same ops),
    and the fired rules whose patterns mention its ops or those it replaces (none when unchanged;
    every fired rule whose patterns are unknown, such as a caller's own)."""
    targets = {name: mapping.get(name) for name in kernel["outputs"]}
    # the original's equations between the values the kernel's inputs stand for and its outputs'
    replaced = equations_reaching(original, [t for t in targets.values() if t],
                                  [mapping.get(a, a) for a in kernel["inputs"]])
    ops = [original["eqns"][i]["op"] for i in replaced]
    changed = Counter(ops) != Counter(kernel["ops"]) or None in targets.values()
    touched = set(ops) | set(kernel["ops"])
    rewrites = sorted(name for name in (rules_fired or {}) if name not in patterns or patterns[name] & touched)
    return {"stands_for": targets, "replaces": [{"eqn": i, "op": op} for i, op in zip(replaced, ops)],
            "changed": changed, "rewrites": rewrites if changed else []}
