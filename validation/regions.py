"""What the optimizer changed: the optimized program's values paired with the original's (over
their value numbering, validation/value_numbering.py), the rewritten regions of the optimized one,
and the original values that feed each region (translation validation checks those regions
instead of whole programs, validation/validate.py)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from validation.normal_forms import is_literal, unordered
from validation.value_numbering import STRUCTURE_DEPTHS, Numbered, ValueTable, canon
from wire.json_types import Program
from wire.primitives import deterministic


@dataclass
class Region:
    eqns: list[int]  # optimized-program equations, in program order
    roots: list[tuple[str, str]]  # (original value, optimized value) that must be equal
    boundary: list[tuple[str, str]] = field(default_factory=list)  # (optimized input, original value fed)

    def subprogram(self, optimized: Program, numbered: Numbered) -> Program:
        eqns = [optimized["eqns"][i] for i in self.eqns]
        used = {a for e in eqns for a in e["in"] if isinstance(a, str)} | {p for _, p in self.roots}
        return {"format": optimized["format"],
                "inputs": [{"name": p, "shape": list(numbered.aval[p][0]), "dtype": numbered.aval[p][1]}
                           for p, _ in self.boundary],
                "consts": [c for name, c in numbered.consts.items() if name in used], "eqns": eqns,
                "outputs": [p for _, p in self.roots]}


@dataclass
class RegionPlan:
    regions: list[Region]
    share: float  # of the optimized program's equations that regions run
    numbered: Numbered | None = None  # the optimized program's
    original_numbered: Numbered | None = None
    stands_for: dict[str, str] = field(default_factory=dict)  # optimized value -> the original value it must equal
    relied: set[int] = field(default_factory=set)  # numbers of `verified` values the plan took as their original


class _NoPlan(Exception):
    """The two programs do not correspond closely enough for a region check."""


def _operand_pairs(o: str, p: str, o_num: Numbered, p_num: Numbered) -> list[tuple[str, str]] | None:
    """The operand pairs of two values' normal forms where those are the same op, params, output and
    literal operands, None where they differ (or an operand pair's types do); a commutative op's
    operands are swapped when that pairs more identical structures."""
    eo, ep = o_num.form.get(o), p_num.form.get(p)
    if eo is None or ep is None or is_literal(eo) or is_literal(ep) or o_num.output[o] != p_num.output[p]:
        return None
    if not deterministic(eo):  # alike operands need not make alike values
        return None
    if (eo["op"], canon(eo.get("params") or {}), [(x["shape"], x["dtype"]) for x in eo["out"]]) != \
            (ep["op"], canon(ep.get("params") or {}), [(x["shape"], x["dtype"]) for x in ep["out"]]):
        return None
    literals_o, literals_p = [o_num.literal(a) for a in eo["in"]], [p_num.literal(a) for a in ep["in"]]
    ins_o = [a for a, lit in zip(eo["in"], literals_o) if lit is None]
    ins_p = [a for a, lit in zip(ep["in"], literals_p) if lit is None]
    if len(eo["in"]) != len(ep["in"]):
        return None
    if unordered(eo, p_num.real):
        if sorted(filter(None, literals_o)) != sorted(filter(None, literals_p)) or len(ins_o) != len(ins_p):
            return None
        if len(ins_o) > 2:
            kids = _matched_terms(ins_o, ins_p, o_num, p_num)
            return kids if kids is not None and all(o_num.aval[a] == p_num.aval[b] for a, b in kids) else None
        alike = lambda a, b: o_num.key[a] == p_num.key[b] or o_num.structure(a, 3) == p_num.structure(b, 3)
        if len(ins_o) == 2 and sum(map(alike, ins_o, ins_p[::-1])) > sum(map(alike, ins_o, ins_p)):
            ins_p.reverse()
    elif literals_o != literals_p:
        return None
    kids = list(zip(ins_o, ins_p))
    return kids if all(o_num.aval[a] == p_num.aval[b] for a, b in kids) else None


def _matched_terms(terms_o: list[str], terms_p: list[str], o_num: Numbered,
                   p_num: Numbered) -> list[tuple[str, str]] | None:
    """The terms of two flattened sums (products) paired: identical values with each other, then
    what is left where that is one term each, or where each left term's operand structure is
    alike exactly one of the other side's; None where the pairing would be a guess. (A wrong
    pair is not a wrong verdict, only a region check that fails: each pair is checked or numbered
    equal, as a binary op's operands are.)"""
    left, kids, rest = list(terms_p), [], []
    for a in terms_o:
        same = next((b for b in left if p_num.key[b] == o_num.key[a]), None)
        if same is None:
            rest.append(a)
        else:
            left.remove(same)
            kids.append((a, same))
    if len(rest) <= 1:
        return kids + list(zip(rest, left))
    for a in rest:
        alike = [b for b in left if o_num.structure(a, 3) == p_num.structure(b, 3)]
        if len(alike) != 1:
            return None
        left.remove(alike[0])
        kids.append((a, alike[0]))
    return kids


def find_regions(original: Program, optimized: Program, table: ValueTable | None = None,
                 verified: Mapping[int, str] | None = None) -> RegionPlan | None:
    """Pair the optimized program's values with the original's: top-down from the outputs through
    equations with the same op and params; where they differ, the optimized side becomes a region
    grown upward until it reaches values known to equal an original value (identical computation,
    a pair, a value an earlier check showed equal to it: `verified`, by number in `table`, or a
    unique match of the operand structure). None when no pairing exists."""
    table = table or ValueTable()
    o_num, p_num = Numbered(original, table), Numbered(optimized, table)
    if [o_num.aval[s["name"]] for s in original["inputs"]] != [p_num.aval[s["name"]] for s in optimized["inputs"]] \
            or len(original["outputs"]) != len(optimized["outputs"]):
        return None
    pairing = _Pairing(o_num, p_num, verified or {})
    try:
        pairing.settle(list(zip(original["outputs"], optimized["outputs"])))
        groups = pairing.grown_regions(optimized)
    except _NoPlan:
        return None
    return pairing.plan(optimized, groups)


class _Pairing:
    """Optimized values paired with the original values they must equal, and the roots of the
    rewritten regions where the two programs' equations stop matching."""

    def __init__(self, o_num: Numbered, p_num: Numbered, verified: Mapping[int, str]):
        self.o_num, self.p_num, self.verified = o_num, p_num, verified
        self.relied: set[int] = set()  # numbers of `verified` values the plan relies on
        self.pairs: set[tuple[str, str]] = set()
        self.partner: dict[str, str] = {}  # optimized value -> an original value it must equal
        self.roots: list[tuple[str, str]] = []
        self.o_keys = set(o_num.key.values())
        self.by_structure: dict[tuple[int, str], list[str]] = {}
        for name in o_num.producer:
            for depth in STRUCTURE_DEPTHS:
                self.by_structure.setdefault((depth, o_num.structure(name, depth)), []).append(name)

    def settle(self, stack: list[tuple[Any, Any]]) -> None:
        """Pair each (original, optimized) value on `stack` and, through equal equations, their
        operands; a pair whose equations differ is a region's root. _NoPlan when a pair cannot be."""
        o_num, p_num = self.o_num, self.p_num
        while stack:
            o, p = stack.pop()
            if not isinstance(o, str) or not isinstance(p, str):
                if canon(o) != canon(p):
                    raise _NoPlan
                continue
            if (o, p) in self.pairs:
                continue
            self.pairs.add((o, p))
            self.partner.setdefault(p, o)
            if o_num.key[o] == p_num.key[p]:
                continue
            if self.verified.get(p_num.key[p]) == o:
                self.relied.add(p_num.key[p])
                continue
            if o_num.aval[o] != p_num.aval[p]:
                raise _NoPlan
            kids = _operand_pairs(o, p, o_num, p_num)
            if kids is None:
                self.roots.append((o, p))
            else:
                stack.extend(kids)

    def known(self, p: str) -> bool:
        """Whether optimized value `p` is known to equal an original value (pairing it if so)."""
        o_num, p_num = self.o_num, self.p_num
        if p in self.partner or p in p_num.consts:
            return True
        if p_num.key[p] in self.o_keys:
            self.partner[p] = o_num.by_key[p_num.key[p]]
            return True
        if p_num.key[p] in self.verified:
            self.settle([(self.verified[p_num.key[p]], p)])
            return True
        for depth in STRUCTURE_DEPTHS:
            candidates = self.by_structure.get((depth, p_num.structure(p, depth)), [])
            if len(candidates) == 1 and o_num.aval[candidates[0]] == p_num.aval[p]:
                self.settle([(candidates[0], p)])
                return True
        return False

    def grown_regions(self, optimized: Program) -> list[tuple[set[int], list[tuple[str, str]]]]:
        """(equations, roots) of each region: from each root upward to known values, regions that
        overlap merged."""
        groups: list[tuple[set[int], list[tuple[str, str]]]] = []
        done = 0
        while done < len(self.roots):  # growing one region may pair values that open new roots
            o_root, p_root = self.roots[done]
            done += 1
            members: set[int] = set()
            todo = [p_root] if p_root in self.p_num.producer else []
            while todo:
                i = self.p_num.producer[todo.pop()][0]
                if i in members:
                    continue
                members.add(i)
                todo.extend(a for a in optimized["eqns"][i]["in"] if isinstance(a, str) and not self.known(a))
            overlapping = [g for g in groups if g[0] & members]
            for g in overlapping:
                groups.remove(g)
                members |= g[0]
            groups.append((members, [r for g in overlapping for r in g[1]] + [(o_root, p_root)]))
        return groups

    def source(self, p: str) -> str:
        """The original value fed to a region input: an identical computation where there is one
        (a root fed its own claimed partner would check nothing), else its pair."""
        key = self.p_num.key[p]
        return self.o_num.by_key[key] if key in self.o_keys else self.partner[p]

    def plan(self, optimized: Program, groups: list[tuple[set[int], list[tuple[str, str]]]]) -> RegionPlan:
        o_num, p_num = self.o_num, self.p_num
        regions = []
        for members, group_roots in groups:
            order = sorted(members)
            produced = {o["name"] for i in order for o in optimized["eqns"][i]["out"]}
            needed = [a for i in order for a in optimized["eqns"][i]["in"]] + [p for _, p in group_roots]
            boundary = list(dict.fromkeys(a for a in needed if isinstance(a, str) and a not in produced
                                          and a not in p_num.consts))
            regions.append(Region(order, group_roots, [(p, self.source(p)) for p in boundary]))
        share = sum(len(r.eqns) for r in regions) / max(len(optimized["eqns"]), 1)
        identical = {p: o_num.by_key[key] for p, key in p_num.key.items() if key in self.o_keys}
        return RegionPlan(regions, share, p_num, o_num, {**self.partner, **identical}, self.relied)


def equations_reaching(program: Program, names: Iterable[str], stop: Iterable[str] = (),
                       alias: dict[str, str] | None = None) -> list[int]:
    """Indices, in program order, of the equations that compute `names`, back to the values in
    `stop` (not computed: read). `alias` names a value read in place of another."""
    alias = alias or {}
    producer = {o["name"]: i for i, e in enumerate(program["eqns"]) for o in e["out"]}
    stop, found, stack = set(stop), set(), [alias.get(n, n) for n in names]
    while stack:
        name = stack.pop()
        if name in stop or name not in producer or producer[name] in found:
            continue
        found.add(producer[name])
        stack.extend(alias.get(a, a) for a in program["eqns"][producer[name]]["in"] if isinstance(a, str))
    return sorted(found)


def cone(program: Program, outputs: list[str], fed: list[str] = (),
         alias: dict[str, str] | None = None) -> Program:
    """The part of `program` that computes `outputs` from the values `fed` (taken as inputs, in
    that order, ahead of the program inputs the part still reads); consts it reads stay consts.
    `alias` names values equal to a fed one (a repeated computation): read as that one."""
    alias = alias or {}
    order = equations_reaching(program, outputs, fed, alias)
    eqns = [{**e, "in": [alias.get(a, a) if isinstance(a, str) else a for a in e["in"]]}
            for e in (program["eqns"][i] for i in order)]
    outputs = [alias.get(o, o) for o in outputs]
    read = ({a for e in eqns for a in e["in"] if isinstance(a, str)} | set(outputs)) - set(fed)
    avals = {o["name"]: o for e in program["eqns"] for o in e["out"]} | {s["name"]: s for s in program["inputs"]}
    inputs = [{"name": n, "shape": avals[n]["shape"], "dtype": avals[n]["dtype"]} for n in fed]
    inputs += [s for s in program["inputs"] if s["name"] in read]
    return {"format": program["format"], "inputs": inputs,
            "consts": [c for c in program.get("consts", []) if c["name"] in read], "eqns": eqns, "outputs": outputs}


def check_key(original: Program, optimized: Program, region: Region, plan: RegionPlan) -> str:
    """Regions with equal keys are the same check: the same optimized computation compared with the
    same original computation, fed the same original values (a later candidate's region where an
    earlier one's was). Alike regions at other places are other checks: what one place feeds them
    shows nothing about what another does (an encoder's layers: one may see only negatives)."""
    return region_signature(region.subprogram(optimized, plan.numbered)) + \
        region_signature(original_side(original, region, plan)) + json.dumps([o for _, o in region.boundary])


def original_side(original: Program, region: Region, plan: RegionPlan) -> Program:
    """The original's computation of the region's roots from the values fed to the region (its
    inputs, in boundary order, ahead of the program inputs it still reads)."""
    fed = [o for _, o in region.boundary]
    numbered = plan.original_numbered
    fed_by_key = {numbered.key[o]: o for o in fed}
    alias = {n: fed_by_key[k] for n, k in numbered.key.items() if k in fed_by_key and n not in fed_by_key.values()}
    return cone(original, [o for o, _ in region.roots], fed, alias)


def distinct_checks(original: Program, optimized: Program, plan: RegionPlan) -> dict[str, Region]:
    """The plan's regions by `check_key`, one per distinct check, in the order the original reaches them."""
    checks: dict[str, Region] = {}
    for region in sorted(plan.regions, key=lambda r: max(r.eqns, default=-1)):
        checks.setdefault(check_key(original, optimized, region, plan), region)
    return checks


def region_signature(program: Program) -> str:
    """The region's structure with its value names replaced by their order of appearance."""
    names: dict[str, str] = {}
    rename = lambda n: names.setdefault(n, f"v{len(names)}")
    for spec in program["inputs"]:
        rename(spec["name"])
    for c in program["consts"]:
        rename(c["name"])
    eqns = [(e["op"], canon(e.get("params") or {}), [rename(a) if isinstance(a, str) else a for a in e["in"]],
             [(rename(o["name"]), o["shape"], o["dtype"]) for o in e["out"]]) for e in program["eqns"]]
    return canon([[(s["shape"], s["dtype"]) for s in program["inputs"]], [c["data"] for c in program["consts"]],
                   eqns, [rename(o) for o in program["outputs"]]])
