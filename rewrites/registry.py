"""Named rules with their fp mode, grouped into families, and the rulesets built from them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from egglog import RewriteOrRule, Ruleset, ruleset

FpMode = Literal["exact", "real"]


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


def rule_names_by_decl(families: list[Family]) -> dict[object, str]:
    """egglog reports matches per rule declaration; this maps them back to rule names."""
    return {r.rule.decl: r.name for f in families for r in f.rules}
