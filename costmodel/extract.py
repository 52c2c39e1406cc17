"""Extraction over the serialized e-graph: the cheapest program under a per-node cost.

Greedy-DAG: each e-class keeps the cheapest set of nodes that computes it, where a node shared by
several users is paid once (costs are summed over the union of the children's sets).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable

from costmodel.egraph_view import EGraphView, ENode


@dataclass
class Extraction:
    choice: dict[str, ENode]  # e-class id -> chosen node
    cost: float  # DAG cost of everything reachable from the roots
    method: str


def dag_cost(view: EGraphView, choice: dict[str, ENode], node_cost: dict[str, float]) -> float:
    seen, stack, total = set(), list(view.roots), 0.0
    while stack:
        cid = stack.pop()
        if cid in seen:
            continue
        seen.add(cid)
        total += node_cost[choice[cid].id]
        stack.extend(choice[cid].children)
    return total


def extract_greedy_dag(view: EGraphView, cost_of: Callable[[ENode], float]) -> Extraction:
    node_cost = {n.id: cost_of(n) for c in view.classes.values() for n in c.nodes}
    parents: dict[str, list[ENode]] = {}
    for cls in view.classes.values():
        for node in cls.nodes:
            for child in set(node.children):
                parents.setdefault(child, []).append(node)
    best: dict[str, tuple[float, dict[str, float], ENode]] = {}
    # Cheapest-first worklist: most classes settle on their first (and final) value.
    queue = [(node_cost[n.id], n.id, n) for c in view.classes.values() for n in c.nodes if not n.children]
    heapq.heapify(queue)
    while queue:
        _, _, node = heapq.heappop(queue)
        if any(c not in best for c in node.children):
            continue
        costs: dict[str, float] = {}
        for child in node.children:
            costs.update(best[child][1])
        if node.eclass in costs:
            continue  # the node needs its own class: a cycle
        costs[node.eclass] = node_cost[node.id]
        total = sum(costs.values())
        if node.eclass in best and best[node.eclass][0] <= total:
            continue
        best[node.eclass] = (total, costs, node)
        for parent in parents.get(node.eclass, ()):
            heapq.heappush(queue, (total, parent.id, parent))
    missing = [r for r in view.roots if r not in best]
    if missing:
        raise ValueError(f"no finite-cost term for output classes {missing}")
    choice = {cid: entry[2] for cid, entry in best.items()}
    return Extraction(choice, dag_cost(view, choice, node_cost), "greedy")
