"""Named rules with their fp mode, grouped into families, and the rulesets built from them."""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from egglog import RewriteOrRule, Ruleset, ruleset

from rewrites.egglog_internals import rule_id
from wire.primitives import GENERIC_TERMS, PRIMITIVES

FpMode = Literal["exact", "real"]
# Term constructors of their own, by the primitive they stand for.
_CONSTRUCTOR_PRIMITIVES = {p.term: p.name for p in PRIMITIVES.values() if p.term and p.term not in GENERIC_TERMS}
_OP_STRING = re.compile(r'(?:Term|Body)\.(?:unary|binary|reduce)\(\s*"(\w+)"')
_CONSTRUCTOR = re.compile(r"(?:Term|Body)\.(\w+)\(")
_NOT_OPS = {"unary", "binary", "reduce", "lit", "flit", "var", "kernel", "kernel_tee", "tee_out", "opaque", "arg"}


@dataclass(frozen=True)
class NamedRule:
    """One rewrite. `exact`: bit-for-bit in IEEE arithmetic; `real`: an identity of real numbers."""

    name: str
    family: str
    mode: FpMode
    rule: RewriteOrRule
    throttled: bool = False  # runs under egglog's back_off scheduler (commutativity, associativity)

    def allowed_in(self, fp_mode: FpMode) -> bool:
        """Exact rules run in both modes; real-arithmetic identities only where `real` allows them."""
        return fp_mode == "real" or self.mode == "exact"


class Family:
    """A rule family (one file under rewrites/): collects named rules as they are declared."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.rules: list[NamedRule] = []

    def add(self, name: str, mode: FpMode, *rules: RewriteOrRule, throttled: bool = False) -> None:
        """Register one named rule; a name may stand for several egglog rules (e.g. per rank)."""
        self.rules.extend(NamedRule(name, self.name, mode, r, throttled) for r in rules)

    def ruleset(self, fp_mode: FpMode) -> Ruleset:
        return ruleset(*(r.rule for r in self.rules if r.allowed_in(fp_mode)), name=f"{self.name}-{fp_mode}")

    @property
    def names(self) -> list[str]:
        return sorted({r.name for r in self.rules})


def rule_names_by_decl(rules: Iterable[NamedRule]) -> dict[int, str]:
    """egglog reports matches per rule declaration; this maps them (by identity: a declaration's
    hash walks all of it) back to rule names."""
    return {rule_id(r.rule): r.name for r in rules}


def pattern_ops(rules: Iterable[NamedRule]) -> dict[str, frozenset[str]]:
    """Per rule name, the primitives its patterns mention (either side), as the wire names them:
    which kernels a rule can have shaped."""
    ops: dict[str, set[str]] = {}
    for r in rules:
        text = str(r.rule)
        found = set(_OP_STRING.findall(text))
        found |= {_CONSTRUCTOR_PRIMITIVES.get(c, c) for c in _CONSTRUCTOR.findall(text) if c not in _NOT_OPS}
        ops.setdefault(r.name, set()).update(found)
    return {name: frozenset(found) for name, found in ops.items()}
