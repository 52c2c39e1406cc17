"""The seeded kernels (rewrites/kernel_seeds.py) found among the e-graph's nodes, as a complete
extraction: the conventional fusion's program, from which greedy and the ILP start.

A seed is matched by what it computes: the kernel node in its root's class with the seed's tees
that computes the classes of the seed's equations (bodies are hash-consed, so that node is the seed
itself or an identical one; of nodes computing the same classes, the seed reads fewest). A program
that repeats an equation has one class for both, named by one of them: the others are not
required. Classes no seed covers keep their plain node.
"""
from __future__ import annotations

from collections.abc import Sequence

from costmodel.egraph_view import EGraphView, ENode, kernel_body_ops
from costmodel.extract import Exclusive, Extraction, Requires, dag_cost, violations
from costmodel.ilp import find_cycles
from costmodel.kernel_cost import KERNEL_OPS
from rewrites.kernel_seeds import KernelSeed


def seeded_extraction(view: EGraphView, seeds: Sequence[KernelSeed], node_cost: dict[str, float],
                      exclusive: Exclusive, requires: Requires) -> Extraction | None:
    """The program of the seeds' kernels and plain nodes elsewhere, or None when it is not a
    valid choice (a class with no plain node, a cycle, a broken exclusive group)."""
    by_origin = {cls.origin: cid for cid, cls in view.classes.items() if cls.origin is not None}
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
    for cid, cls in view.classes.items():
        if cid not in choice:
            plain = [n for n in cls.nodes if n.op not in KERNEL_OPS and n.op != "tee_out"]
            if not plain:
                return None
            choice[cid] = min(plain, key=lambda n: node_cost[n.id])
    if find_cycles(view.roots, choice) or violations(view.roots, choice, exclusive, requires):
        return None
    return Extraction(choice, dag_cost(view, choice, node_cost), "seeded")


def _computes(node: ENode, tees: tuple, ops: set[str], seed: KernelSeed) -> bool:
    written = tuple(t.eclass for t in node.attrs[1]) if node.op == "kernel_tee" else ()
    computed = {b.eclass for b in kernel_body_ops(node)}
    return written == tees and ops <= computed and len(computed) <= len(seed.ops)
