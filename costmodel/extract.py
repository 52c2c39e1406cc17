"""Extraction over the serialized e-graph: the cheapest program under a per-node cost.

Greedy-DAG: each e-class keeps the cheapest set of nodes that computes it, where a node shared by
several users is paid once (costs are summed over the union of the children's sets).

Exclusive groups (primary nodes, secondary nodes): a chosen program uses at most one node of a
group (a GEMM is computed once: by its own node or inside one fused kernel). Greedy bans the chosen
secondary nodes of a violated group and re-costs what used them until none is violated; the ILP
states each group as a constraint.

Requirements (node, needed node): a node may be chosen only with the node it needs (a tee_out
with the kernel that writes its value). Greedy bans a chosen node whose requirement is unmet.

Dominance pruning: a node is dropped when another node of its class costs no more, needs a subset
of its children and belongs to a subset of its groups; any program using it can use the other
instead, so extraction stays exact on the smaller e-graph.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from rewrites.egraph_view import EGraphView, ENode


@dataclass
class Extraction:
    choice: dict[str, ENode]  # e-class id -> chosen node
    cost: float  # DAG cost of everything reachable from the roots
    method: str
    candidates: int | None = None  # e-nodes extraction chose among (after dominance pruning)


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


Exclusive = Sequence[tuple[frozenset[str], frozenset[str]]]


Requires = Sequence[tuple[str, str]]


def violations(roots: list[str], choice: dict[str, ENode], exclusive: Exclusive, requires: Requires = ()) -> set[str]:
    """Chosen secondary node ids of every violated exclusive group, and chosen nodes whose
    requirement is not chosen."""
    if not exclusive and not requires:
        return set()
    reached, stack = set(), list(roots)
    while stack:
        cid = stack.pop()
        if cid not in reached:
            reached.add(cid)
            stack.extend(choice[cid].children)
    used = {choice[c].id for c in reached}
    bad: set[str] = set()
    for primary, secondary in exclusive:
        chosen = secondary & used
        if len(chosen) + len(primary & used) > 1:
            bad |= chosen
    return bad | {node for node, needed in requires if node in used and needed not in used}


def drop_dominated(view: EGraphView, node_cost: dict[str, float], exclusive: Exclusive = (),
                   requires: Requires = (), keep: frozenset[str] = frozenset()) -> EGraphView:
    """The view without dominated nodes (see the module docstring). A needed node (a kernel_tee)
    also provides what its requirers need: it is dominated only by a node needed the same way
    (a kernel writing the same extra value), and a requirer whose needed node is gone goes too.
    Nodes in `keep` (a warm start's) stay."""
    groups: dict[str, set[int]] = {}
    for index, (primary, secondary) in enumerate(exclusive):
        for node_id in primary | secondary:
            groups.setdefault(node_id, set()).add(index)
    ids = {n.id: n for c in view.classes.values() for n in c.nodes}
    provides: dict[str, set[str]] = {}
    for node, needed in requires:
        provides.setdefault(needed, set()).add(ids[node].eclass)
    kept_ids: set[str] = set()
    classes = {}
    for cid, cls in view.classes.items():
        ranked = sorted(((node_cost[n.id], frozenset(n.children), frozenset(groups.get(n.id, ())),
                          frozenset(provides.get(n.id, ())), n) for n in cls.nodes),
                        key=lambda t: (t[0], len(t[1]), len(t[2]), -len(t[3]), t[4].id))
        kept: list[tuple] = []
        for cost, children, member, gives, node in ranked:
            if node.id in keep or not any(c <= cost and ch <= children and m <= member and g >= gives
                                          for c, ch, m, g, _ in kept):
                kept.append((cost, children, member, gives, node))
        classes[cid] = [k[4] for k in kept]
        kept_ids.update(k[4].id for k in kept)
    orphans = {node for node, needed in requires if needed not in kept_ids}
    return EGraphView({cid: replace(view.classes[cid], nodes=[n for n in nodes if n.id not in orphans])
                       for cid, nodes in classes.items()}, view.roots)


def extract_greedy_dag(view: EGraphView, cost_of: Callable[[ENode], float], exclusive: Exclusive = (),
                       requires: Requires = ()) -> Extraction:
    node_cost = {n.id: cost_of(n) for c in view.classes.values() for n in c.nodes}
    greedy = _Greedy(view, node_cost)
    while True:
        choice = greedy.choice()
        bad = violations(view.roots, choice, exclusive, requires)
        if not bad:
            return Extraction(choice, dag_cost(view, choice, node_cost), "greedy")
        greedy.ban(bad)  # only secondary and requiring nodes are banned; plain nodes always remain


class _Greedy:
    """Greedy-DAG's costs, kept across bans: a ban re-costs only the classes whose cheapest set
    used a banned node (each class's set names every class it spans), not the whole e-graph."""

    def __init__(self, view: EGraphView, node_cost: dict[str, float]):
        self.view, self.node_cost = view, node_cost
        self.banned: set[str] = set()
        self.parents: dict[str, list[ENode]] = {}
        self.waiting: dict[str, int] = {}  # node id -> its children classes that have no cost yet
        for cls in view.classes.values():
            for node in cls.nodes:
                children = set(node.children)
                self.waiting[node.id] = len(children)
                for child in children:
                    self.parents.setdefault(child, []).append(node)
        self.best: dict[str, tuple[float, dict[str, float], ENode]] = {}
        # Cheapest-first worklist: most classes settle on their first (and final) value. A node
        # enters it once every child class has a cost, and again each time one of them improves.
        self.queue = [(node_cost[n.id], n.id, n) for c in view.classes.values() for n in c.nodes if not n.children]
        heapq.heapify(self.queue)

    def choice(self) -> dict[str, ENode]:
        self._settle()
        missing = [r for r in self.view.roots if r not in self.best]
        if missing:
            raise ValueError(f"no finite-cost term for output classes {missing}")
        return {cid: entry[2] for cid, entry in self.best.items()}

    def ban(self, nodes: set[str]) -> None:
        self.banned |= nodes
        lost = {cid for cid, (_, _, node) in self.best.items() if node.id in nodes}
        stale = [cid for cid, (_, spans, _) in self.best.items() if not lost.isdisjoint(spans)]
        for cid in stale:
            del self.best[cid]
            for parent in self.parents.get(cid, ()):
                self.waiting[parent.id] += 1
        for cid in stale:
            for node in self.view.classes[cid].nodes:
                if not self.waiting[node.id] and node.id not in self.banned:
                    floor = max((self.best[c][0] for c in node.children), default=0.0)
                    heapq.heappush(self.queue, (self.node_cost[node.id] + floor, node.id, node))

    def _settle(self) -> None:
        best, queue, node_cost, banned, waiting = self.best, self.queue, self.node_cost, self.banned, self.waiting
        parents, pop, push = self.parents, heapq.heappop, heapq.heappush
        while queue:
            node = pop(queue)[2]
            if node.id in banned:
                continue
            # The node's DAG cost is at least its own plus its dearest child's (costs are >= 0):
            # when that cannot beat the class's best, skip merging the children's cost maps.
            floor = 0.0
            for child in node.children:
                entry = best.get(child)
                if entry is None:
                    break  # a child lost its cost after this entry was queued
                if entry[0] > floor:
                    floor = entry[0]
            else:
                cls, own = node.eclass, node_cost[node.id]
                current = best.get(cls)
                if current is not None and current[0] <= own + floor:
                    continue
                costs: dict[str, float] = {}
                for child in node.children:
                    costs.update(best[child][1])
                if cls in costs:
                    continue  # the node needs its own class: a cycle
                costs[cls] = own
                total = sum(costs.values())
                if current is not None and current[0] <= total:
                    continue
                best[cls] = (total, costs, node)
                for parent in parents.get(cls, ()):
                    pid = parent.id
                    if current is None:
                        waiting[pid] -= 1
                    if not waiting[pid] and pid not in banned:
                        push(queue, (total, pid, parent))
