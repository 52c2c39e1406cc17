"""Small random e-graphs with a known least program, for the extraction tests and the floors'."""
from __future__ import annotations

import itertools

from hypothesis import strategies as st

from costmodel.extract import dag_cost
from costmodel.ilp import find_cycles
from rewrites.egraph_view import EGraphView, ENode


@st.composite
def egraphs(draw):
    """Classes c0..c{n-1}; each has a node whose children are all later classes (so every class is
    derivable), plus optional cheap nodes whose children may be any class (shared children, and
    cycles when they point back to an earlier class or their own)."""
    n = draw(st.integers(2, 6))
    costs = st.sampled_from([0.0, 0.1, 0.5, 1.0, 2.0, 3.0, 7.0])
    cheap = st.sampled_from([0.0, 0.0, 0.1, 0.5, 1.0])  # extra nodes: cheap, so cycles tempt the LP
    nodes, table = [], {}
    for i in range(n):
        later = [f"c{j}" for j in range(i + 1, n)]
        children = tuple(draw(st.lists(st.sampled_from(later), max_size=2))) if later else ()
        extra = draw(st.lists(st.lists(st.sampled_from([f"c{j}" for j in range(n)]), min_size=1,
                                       max_size=2), max_size=2))
        for k, ch in enumerate([children, *map(tuple, extra)]):
            node = ENode(f"n{i}_{k}", "op", f"c{i}", (k,), ch)
            nodes.append(node)
            table[node.id] = draw(cheap if k else costs)
    roots = ["c0"] + (["c1"] if draw(st.booleans()) else [])
    return EGraphView.from_nodes(nodes, roots), table


def least_dag_cost(view: EGraphView, table: dict[str, float]) -> float:
    """The cheapest acyclic program of `view` under `table`, by trying every choice."""
    best = float("inf")
    ids = list(view.classes)
    for combo in itertools.product(*(view.classes[c].nodes for c in ids)):
        choice = dict(zip(ids, combo))
        if not find_cycles(view.roots, choice):
            best = min(best, dag_cost(view, choice, table))
    return best
