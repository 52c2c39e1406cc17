"""Kernels with each attention as one kernel of its own: a grouping extraction starts from.

Greedy GEMM chaining fills a kernel in program order, so in a whole layer the score product joins
the projections before it and the mix opens the next kernel: no kernel holds the attention whole,
and none can run key-blocked. Here a policy's kernels give up the equations of every attention
(costmodel/key_blocking.py finds them) to one kernel per attention; the rest keep their grouping,
split where they held equations on both sides of an attention, in an order every kernel's
operands are computed before it.
"""
from __future__ import annotations

from graphlib import CycleError, TopologicalSorter

from costmodel.key_blocking import Step, attention_groups
from lowering.kernels import avals_of
from wire.json_types import Program


def with_attention_kernels(program: Program, groups: list[list[int]]) -> list[list[int]] | None:
    """`groups` (a policy's kernels, by equation index) with each attention of `program` taken out
    as a group of its own, in a valid order; None when the program has no attention or no such
    order exists (an attention's equations are shared with another's)."""
    attentions = attention_groups([Step.of(e) for e in program["eqns"]], avals_of(program))
    taken = {i for group in attentions for i in group}
    if not attentions or len(taken) != sum(map(len, attentions)):
        return None
    downstream = [_downstream(program, attention) for attention in attentions]
    rest = []
    for group in groups:
        pieces = [[i for i in group if i not in taken]]
        # a kernel holding equations before and after an attention is cut there
        for below in downstream:
            pieces = [part for piece in pieces for part in ([i for i in piece if i not in below],
                                                             [i for i in piece if i in below]) if part]
        rest += pieces
    return _ordered(program, [*rest, *attentions])


def _downstream(program: Program, group: list[int]) -> set[int]:
    """The equations computed from what `group` computes."""
    values = {o["name"] for i in group for o in program["eqns"][i]["out"]}
    below = set()
    for i, eqn in enumerate(program["eqns"][min(group):], min(group)):
        if i not in group and any(a in values for a in eqn["in"] if isinstance(a, str)):
            below.add(i)
            values |= {o["name"] for o in eqn["out"]}
    return below


def _ordered(program: Program, groups: list[list[int]]) -> list[list[int]] | None:
    """The groups in an order where each runs after the groups computing its operands (a view a
    policy folded into several kernels is computed by each)."""
    eqns = program["eqns"]
    producer = {o["name"]: i for i, e in enumerate(eqns) for o in e["out"]}
    holders: dict[int, set[int]] = {}
    for g, group in enumerate(groups):
        for i in group:
            holders.setdefault(i, set()).add(g)
    after = {g: set() for g in range(len(groups))}
    for g, group in enumerate(groups):
        for i in group:
            for a in eqns[i]["in"]:
                source = producer.get(a) if isinstance(a, str) else None
                if source is not None and g not in holders.get(source, {g}):
                    after[g] |= holders[source]
    try:
        order = list(TopologicalSorter(after).static_order())
    except CycleError:
        return None
    return [sorted(groups[g]) for g in order]
