"""A floor under every acyclic program of an e-graph, in near-linear time: its heaviest path.

Any program the e-graph holds is a DAG of chosen e-nodes, and its total cost is at least the cost
of its costliest root-to-leaf path (costs are non-negative). The least such path over all programs
is found as a grammar's cheapest derivation (Knuth's generalization of Dijkstra's algorithm): a
node's value is its own cost plus the largest of its children's values, a class's value the least
of its nodes', and a class is settled when it is the cheapest one left with a ready node. Every
value it settles is the least over finite derivations, so cycles of the e-graph (x = T(T(x))) never
lower it. Exclusive groups and other side constraints of extraction only remove programs, so the
floor holds for them too. It is weaker than an exact extraction wherever a program's work runs in
parallel branches, and it is proven at any size.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from rewrites.egraph_view import EGraphView


def heaviest_path_floors(view: EGraphView, costs: Sequence[dict[str, float]]) -> list[float]:
    """Under each of `costs` (non-negative, per e-node id), the least over the acyclic programs of
    `view` of their costliest path from an output to the leaves: at most each program's total
    cost. The e-graph's reader lists are built once for all of them."""
    readers: dict[str, list] = {}
    nodes, leaves = [], []
    for cls in view.classes.values():
        for node in cls.nodes:
            children = set(node.children)
            if node.eclass in children:
                continue  # a node that reads its own class never ends a derivation
            nodes.append((node, len(children)))
            for child in children:
                readers.setdefault(child, []).append(node)
            if not children:
                leaves.append(node)
    return [_least_heaviest_path(view, cost, readers, nodes, leaves) for cost in costs]


def _least_heaviest_path(view: EGraphView, cost: dict[str, float], readers: dict[str, list],
                         nodes: list, leaves: list) -> float:
    waiting = {node.id: count for node, count in nodes}
    heap = [(cost[node.id], node.eclass) for node in leaves if math.isfinite(cost[node.id])]
    heapq.heapify(heap)
    settled: dict[str, float] = {}
    heaviest_child: dict[str, float] = {}
    while heap:
        value, cid = heapq.heappop(heap)
        if cid in settled:
            continue
        settled[cid] = value
        for node in readers.get(cid, ()):
            nid = node.id
            if value > heaviest_child.get(nid, 0.0):
                heaviest_child[nid] = value
            waiting[nid] -= 1
            if waiting[nid] == 0 and node.eclass not in settled and math.isfinite(cost[nid]):
                heapq.heappush(heap, (cost[nid] + heaviest_child.get(nid, 0.0), node.eclass))
    missing = [r for r in view.roots if r not in settled]
    if missing:
        raise ValueError(f"no finite-cost term for output classes {missing}")
    return max((settled[r] for r in view.roots), default=0.0)
