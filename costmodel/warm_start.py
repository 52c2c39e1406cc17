"""The seeded kernels (rewrites/kernel_seeds.py) found among the e-graph's nodes, as a complete
extraction: one fusion policy's program, from which greedy and the ILP start.

The seeds of one policy were made over one of the e-graph's programs (the original or an algebraic
alternative). A seed is matched by what it computes: the kernel node in its root's class with the
seed's tees that computes the classes of the seed's equations (bodies are hash-consed, so that node
is the seed itself or an identical one; of nodes computing the same classes, the seed reads
fewest). Classes no seed covers keep a plain node of that same program: one whose operands the
program computes before it (its own equation, or an equal one), so the extraction is that
program's kernels and not a mixture with another program's unfused ops. A program that repeats an
equation has one class for both, named by the first.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from costmodel.extract import Exclusive, Extraction, Requires, dag_cost, violations
from costmodel.ilp import find_cycles
from costmodel.kernel_cost import KERNEL_OPS
from costmodel.node_equation import LEAF_OPS
from rewrites.egraph_view import EClass, EGraphView, ENode
from rewrites.kernel_seeds import KernelSeed


def seeded_extraction(view: EGraphView, seeds: Sequence[KernelSeed], node_cost: dict[str, float],
                      exclusive: Exclusive, requires: Requires, program: int = 0) -> Extraction | None:
    """The program of the seeds' kernels (all made over `program`) and that program's plain nodes
    elsewhere, or None when it is not a valid choice (a class with no plain node, a cycle, a broken
    exclusive group)."""
    by_origin = {cls.origins[program]: cid for cid, cls in view.classes.items() if program in cls.origins}
    choice: dict[str, ENode] = {}
    for seed in seeds:
        root = by_origin.get(seed.root)
        tees = tuple(by_origin.get(i) for i in seed.tees)
        ops = {by_origin[i] for i in seed.ops if i in by_origin}
        matches = [n for n in view.classes[root].nodes if n.op in KERNEL_OPS and _computes(n, tees, ops, seed)] \
            if root is not None and None not in tees else []
        if not matches:
            continue  # the program dedups an equation the seed names: its classes stay plain
        kernel = min(matches, key=lambda n: (len(n.children), node_cost[n.id]))
        choice[root] = kernel
        for k, tee in enumerate(tees):
            choice[tee] = next(n for n in view.classes[tee].nodes
                               if n.op == "tee_out" and n.attrs[:2] == kernel.attrs and n.attrs[2] == k)
    stack, reached = list(view.roots), set()
    while stack:  # the plain nodes of the classes the program reaches
        cid = stack.pop()
        if cid in reached:
            continue
        reached.add(cid)
        if cid not in choice:
            node = _plain_node(view, view.classes[cid], program, node_cost)
            if node is None:
                return None
            choice[cid] = node
        stack.extend(choice[cid].children)
    if find_cycles(view.roots, choice) or violations(view.roots, choice, exclusive, requires):
        return None
    return Extraction(choice, dag_cost(view, choice, node_cost), "seeded")


def _plain_node(view: EGraphView, cls: EClass, program: int, node_cost: dict[str, float]) -> ENode | None:
    """The cheapest plain node of `cls` whose operands `program` computes before the class (or
    are leaves): its own equation, or one equal to it."""
    position = cls.origins.get(program, math.inf)
    plain = [n for n in cls.nodes if n.op not in KERNEL_OPS and n.op != "tee_out"]
    own = [n for n in plain if all(view.classes[c].origins.get(program, -1 if _leaf(view.classes[c]) else math.inf)
                                   < position for c in n.children)]
    return min(own or plain, key=lambda n: node_cost[n.id], default=None)


def _leaf(cls: EClass) -> bool:
    return any(n.op in LEAF_OPS for n in cls.nodes)


def _computes(node: ENode, tees: tuple, ops: set[str], seed: KernelSeed) -> bool:
    written = tuple(t.eclass for t in node.attrs[1]) if node.op == "kernel_tee" else ()
    computed = {b.eclass for b in node.body_ops}
    return written == tees and ops <= computed and len(computed) <= len(seed.ops)
