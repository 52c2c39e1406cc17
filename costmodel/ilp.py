"""Exact DAG extraction as an integer program (scipy.optimize.milp / HiGHS), with lazy cycle cuts.

Variables: a binary x per e-node that can ever be chosen, a binary a per e-class reachable from the
roots. Constraints: for each class sum(x in class) = a_class; for each node and each distinct child
class x_node <= a_child; a_root = 1. Objective: cost . x, so a node shared by several users is paid
once. Acyclicity is enforced lazily: solve, walk the chosen nodes from the roots, and for every cycle
found add the cut sum(x over the cycle's nodes) <= len(cycle) - 1; re-solve until the chosen program
is acyclic, the round cap is hit, or the (total) time limit runs out.

Warm start: scipy's milp has no incumbent argument, so the greedy solution enters as a cutoff row
cost . x <= greedy_cost (it stays feasible, and the solver may prune everything worse) and as the
fallback returned when the ILP finds nothing better in time.

Lower bound: every round solves a relaxation of the acyclic problem (fewer cycle cuts) restricted to
programs no worse than the warm start, which contains the optimum; so each round's dual bound
(`mip_dual_bound`) is a valid lower bound on the optimal DAG cost, and the reported gap is
(returned cost - best bound) / returned cost. Costs are assumed non-negative.

`proven_minimum` solves it for other objectives (one resource of the cost model at a time): the
least any program in the e-graph needs of it, as far as the solver proves within a node limit.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from costmodel.extract import Exclusive, Extraction, Requires, dag_cost, extract_greedy_dag
from rewrites.egraph_view import EGraphView, ENode, closed_bottom_up

OBJECTIVE_SCALE = 1e4  # the reference cost (greedy's) maps to this many objective units
MIP_REL_GAP = 1e-6
LP_TOLERANCE = 1e-7  # HiGHS's feasibility tolerance, as a share of the objective's total: below it is proven


@dataclass
class IlpExtraction(Extraction):
    optimality_gap: float | None = None  # proven relative gap of `cost`; None when no bound was proven
    status: str = "optimal"  # optimal | time_limit | infeasible_fallback
    cuts: int = 0  # cycle cuts added over all rounds
    solve_s: float = 0.0  # wall time of extract_ilp, pruning and all rounds included
    rounds: int = 0  # milp solves
    used_warm_start: bool = False  # the returned choice is the warm start (no better ILP program found)


class _Problem:
    """The pruned e-graph as index arrays: nodes 0..n-1 (x), classes 0..m-1 (a, at n..n+m-1)."""

    def __init__(self, view: EGraphView, node_cost: dict[str, float]):
        nodes = _prune(view, node_cost)
        self.nodes: list[ENode] = nodes
        self.class_ids: list[str] = sorted({n.eclass for n in nodes})
        self.class_index = {c: i for i, c in enumerate(self.class_ids)}
        self.node_index = {n.id: i for i, n in enumerate(nodes)}
        self.cost = np.array([node_cost[n.id] for n in nodes], dtype=float)
        n, m = len(nodes), len(self.class_ids)
        rows, cols, vals = [], [], []
        for i, node in enumerate(nodes):  # class rows: sum(x in class) - a = 0
            rows.append(self.class_index[node.eclass])
            cols.append(i)
            vals.append(1.0)
        for j in range(m):
            rows.append(j)
            cols.append(n + j)
            vals.append(-1.0)
        row = m
        for i, node in enumerate(nodes):  # child rows: x - a_child <= 0
            for child in sorted(set(node.children)):
                rows += [row, row]
                cols += [i, n + self.class_index[child]]
                vals += [1.0, -1.0]
                row += 1
        self.base = (np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64), np.array(vals))
        self.base_lb = np.concatenate([np.zeros(m), np.full(row - m, -np.inf)])
        self.base_ub = np.zeros(row)
        self.base_rows = row
        self.n, self.m = n, m


def _prune(view: EGraphView, node_cost: dict[str, float]) -> list[ENode]:
    """Nodes that can be part of an acyclic finite-cost program reachable from the roots."""
    candidates = [n for c in view.classes.values() for n in c.nodes
                  if math.isfinite(node_cost[n.id]) and n.eclass not in n.children
                  and all(ch in view.classes for ch in n.children)]
    derivable, waiting = closed_bottom_up(candidates)  # classes some candidate computes from the leaves
    missing = [r for r in view.roots if r not in derivable]
    if missing:
        raise ValueError(f"no finite-cost term for output classes {missing}")
    usable: dict[str, list[ENode]] = {}
    for node in candidates:
        if waiting[node.id] == 0:
            usable.setdefault(node.eclass, []).append(node)
    reached, stack, kept = set(), list(view.roots), []
    while stack:
        cid = stack.pop()
        if cid in reached:
            continue
        reached.add(cid)
        for node in usable[cid]:
            kept.append(node)
            stack.extend(node.children)
    return kept


def _side_rows(
    problem: _Problem, exclusive: Exclusive, requires: Requires
) -> list[tuple[list[int], list[float], float]]:
    """(columns, coefficients, upper bound) rows: sum(x over an exclusive group) <= 1 and
    x_node - x_needed <= 0, over the variables that survived pruning."""
    rows = []
    for primary, secondary in exclusive:
        cols = [problem.node_index[i] for i in sorted(primary | secondary) if i in problem.node_index]
        if len(cols) > 1:
            rows.append((cols, [1.0] * len(cols), 1.0))
    for node, needed in requires:
        if node in problem.node_index:
            if needed in problem.node_index:
                rows.append(([problem.node_index[node], problem.node_index[needed]], [1.0, -1.0], 0.0))
            else:
                rows.append(([problem.node_index[node]], [1.0], 0.0))
    return rows


def find_cycles(roots: list[str], choice: dict[str, ENode]) -> list[list[ENode]]:
    """Cycles among the chosen nodes reachable from `roots`: one per back edge of a DFS, each as
    the list of nodes on it (node i has a child in the class of node i+1, the last in the first's)."""
    state: dict[str, int] = {}  # 1 on the DFS stack, 2 done
    cycles: list[list[ENode]] = []
    for root in roots:
        if root in state:
            continue
        path: list[str] = [root]
        iters = [iter(choice[root].children)]
        state[root] = 1
        while iters:
            child = next(iters[-1], None)
            if child is None:
                state[path.pop()] = 2
                iters.pop()
                continue
            if state.get(child) == 1:
                cycles.append([choice[c] for c in path[path.index(child):]])
            elif child not in state:
                state[child] = 1
                path.append(child)
                iters.append(iter(choice[child].children))
    return cycles


def _choice_from(problem: _Problem, x: np.ndarray, roots: list[str]) -> dict[str, ENode]:
    chosen = {problem.nodes[i].eclass: problem.nodes[i] for i in np.flatnonzero(x[:problem.n] > 0.5)}
    choice, stack = {}, list(roots)
    while stack:
        cid = stack.pop()
        if cid in choice:
            continue
        choice[cid] = chosen[cid]
        stack.extend(chosen[cid].children)
    return choice


def extract_ilp(view: EGraphView, cost_of: Callable[[ENode], float], *,
                warm_start: Extraction | None = None, time_limit_s: float = 10.0,
                max_rounds: int = 100, mip_rel_gap: float = MIP_REL_GAP, exclusive: Exclusive = (),
                requires: Requires = (), node_limit: int | None = None) -> IlpExtraction:
    """The cheapest acyclic DAG extraction, or the best found within `time_limit_s` (all rounds).

    `warm_start` (greedy-DAG when None) bounds the objective and is returned when the ILP finds
    nothing better; the result's cost is never above it. `node_limit` caps each solve's
    branch-and-bound nodes: a work limit, so what it proves does not depend on the machine's load."""
    start = time.perf_counter()
    deadline = start + time_limit_s
    node_cost = {n.id: float(cost_of(n)) for c in view.classes.values() for n in c.nodes}
    if warm_start is None:
        warm_start = extract_greedy_dag(view, lambda node: node_cost[node.id], exclusive, requires)
    warm_cost = dag_cost(view, warm_start.choice, node_cost)
    if find_cycles(view.roots, warm_start.choice):
        raise ValueError("warm_start choice is cyclic")
    problem = _Problem(view, node_cost)
    n, m = problem.n, problem.m
    if n == 0:  # nothing to choose (a program with no outputs): the warm start is optimal
        return IlpExtraction(warm_start.choice, warm_cost, "ilp", optimality_gap=0.0,
                             solve_s=time.perf_counter() - start, used_warm_start=True)

    positive = problem.cost[problem.cost > 0]
    reference = warm_cost if math.isfinite(warm_cost) and warm_cost > 0 else float(positive.sum()) or 1.0
    scale = reference / OBJECTIVE_SCALE
    c = np.concatenate([problem.cost / scale, np.zeros(m)])
    lower = np.zeros(n + m)
    for root in view.roots:
        lower[n + problem.class_index[root]] = 1.0
    bounds = Bounds(lower, np.ones(n + m))
    integrality = np.ones(n + m)

    side_rows = _side_rows(problem, exclusive, requires)
    best_choice, best_cost = warm_start.choice, warm_cost
    best_from_warm, status, lower_bound = True, "time_limit", -math.inf
    cut_rows: list[list[int]] = []
    rounds = 0
    while rounds < max_rounds:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            break
        constraints = _constraints(problem, warm_cost / scale if math.isfinite(warm_cost) else None, scale,
                                   [*side_rows, *((cut, [1.0] * len(cut), len(cut) - 1.0) for cut in cut_rows)])
        res = milp(c, constraints=constraints, integrality=integrality, bounds=bounds,
                   options={"time_limit": max(remaining, 1e-3), "mip_rel_gap": mip_rel_gap,
                            **({} if node_limit is None else {"node_limit": node_limit})})
        rounds += 1
        bound = getattr(res, "mip_dual_bound", None)
        if bound is not None and math.isfinite(bound):
            lower_bound = max(lower_bound, bound * scale)
        if res.x is None:
            if res.status != 1:  # infeasible (only numerically: the warm start satisfies every row)
                status = "infeasible_fallback"  # or a solver failure: no bound worth reporting
                lower_bound = -math.inf
            break  # (status 1: the time limit hit before any incumbent)
        choice = _choice_from(problem, res.x, view.roots)
        cycles = find_cycles(view.roots, choice)
        if not cycles:
            cost = dag_cost(view, choice, node_cost)
            if cost <= best_cost:
                best_choice, best_cost, best_from_warm = choice, cost, False
            if res.status == 0:
                status = "optimal"
            break
        if res.status != 0:
            break  # a cyclic incumbent with no time left to cut it
        for cycle in cycles:  # a cut is violated by this solution, so it is never a duplicate
            cut_rows.append(sorted(problem.node_index[node.id] for node in cycle))

    if find_cycles(view.roots, best_choice):
        raise AssertionError("extract_ilp produced a cyclic choice")  # never: both sources are acyclic
    return IlpExtraction(best_choice, best_cost, "ilp", optimality_gap=_gap(best_cost, lower_bound), status=status,
                         cuts=len(cut_rows), solve_s=time.perf_counter() - start, rounds=rounds,
                         used_warm_start=best_from_warm)


def _constraints(problem: _Problem, cutoff: float | None, scale: float,
                 rows: list[tuple[list[int], list[float], float]]) -> LinearConstraint:
    """The problem's own rows, the objective cutoff (scaled cost at most `cutoff`: keeps the warm
    start feasible and prunes worse programs) and `rows` (columns, coefficients, upper limit)."""
    base_rows, base_cols, base_vals = problem.base
    lb, ub = [problem.base_lb], [problem.base_ub]
    extra_r, extra_c, extra_v = [], [], []
    r = problem.base_rows
    if cutoff is not None:
        nz = np.flatnonzero(problem.cost)
        extra_r += [r] * len(nz)
        extra_c += nz.tolist()
        extra_v += (problem.cost[nz] / scale).tolist()
        lb.append([-np.inf])
        ub.append([cutoff * (1 + 1e-9) + 1e-6])
        r += 1
    for row_cols, coefs, limit in rows:
        extra_r += [r] * len(row_cols)
        extra_c += row_cols
        extra_v += coefs
        lb.append([-np.inf])
        ub.append([limit])
        r += 1
    A = coo_matrix((np.concatenate([base_vals, extra_v]),
                    (np.concatenate([base_rows, np.array(extra_r, dtype=np.int64)]),
                     np.concatenate([base_cols, np.array(extra_c, dtype=np.int64)]))),
                   shape=(r, problem.n + problem.m)).tocsr()
    return LinearConstraint(A, np.concatenate(lb), np.concatenate(ub))


def _gap(best_cost: float, lower_bound: float) -> float | None:
    """The proven relative gap of `best_cost` over the solver's bound; None without a bound."""
    if not math.isfinite(lower_bound):
        return None
    gap = max(0.0, (best_cost - lower_bound) / best_cost) if best_cost > 0 else 0.0
    return 0.0 if gap < 1e-12 else gap  # below: rounding of the scaled objective


def extract_auto(view: EGraphView, cost_of: Callable[[ENode], float], time_limit_s: float,
                 node_budget: int = 20_000, exclusive: Exclusive = (), requires: Requires = (),
                 warm_start: Extraction | None = None) -> Extraction:
    """Greedy-DAG always; the ILP too when the e-graph has fewer than `node_budget` e-nodes,
    started from the cheaper of greedy and `warm_start`. Returns the cheapest (the ILP on ties:
    it carries the proven gap)."""
    node_cost: dict[str, float] = {}

    def cached(node: ENode) -> float:
        if node.id not in node_cost:
            node_cost[node.id] = float(cost_of(node))
        return node_cost[node.id]

    start = cheaper(extract_greedy_dag(view, cached, exclusive, requires), warm_start)
    if view.enode_count >= node_budget:
        return start
    ilp = extract_ilp(view, cached, warm_start=start, time_limit_s=time_limit_s, exclusive=exclusive,
                      requires=requires)
    return ilp if ilp.cost <= start.cost else start


def cheaper(extraction: Extraction | None, other: Extraction | None) -> Extraction | None:
    """The cheaper of two extractions, either of which may be missing (a warm start that could
    not be built); the first on ties."""
    if extraction is None or (other is not None and other.cost < extraction.cost):
        return other
    return extraction


def proven_minimum(view: EGraphView, cost: dict[str, float], node_limit: int, time_limit_s: float,
                   exclusive: Exclusive = (), requires: Requires = ()) -> float | None:
    """A proven lower bound on the least total `cost` (non-negative, per e-node) of any acyclic
    program the e-graph holds: the exact extraction's optimum less its proven gap and the solver's
    tolerance, each solve stopped after `node_limit` branch-and-bound nodes (a bound that does not
    depend on the machine's speed); None when nothing is proven within `time_limit_s`."""
    result = extract_ilp(view, lambda node: cost[node.id], time_limit_s=time_limit_s, exclusive=exclusive,
                         requires=requires, node_limit=node_limit)
    if result.optimality_gap is None or result.solve_s >= time_limit_s:
        return None
    return max(0.0, result.cost * (1 - result.optimality_gap) - LP_TOLERANCE * sum(cost.values()))
