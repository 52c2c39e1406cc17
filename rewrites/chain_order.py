"""Matrix-chain ordering: the cheapest parenthesisation of each chain of matmuls, found by the
classic O(n^3) dynamic program and added to the chain's e-class.

The reassociation rules (rewrites/matmul.py) reach every order of an n-matmul chain only after
building a Catalan number of them: an 80-matmul chain never saturates, and extraction sees the
orders the time limit allowed. The dynamic program finds the cheapest order directly under the
price of one product (one order per price: as a GEMM kernel of its own, and where the profile runs
GEMMs back to back, as one of a run). It is matmul associativity, an identity of real arithmetic, so it is
seeded in `real` mode only; the e-graph still weighs it against everything its rules find.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Union

import numpy as np

from rewrites.egglog_internals import direct_union, register
from rewrites.ingest import DTYPE, SHAPE, TERMS, LoadedProgram, encode_typed
from rewrites.terms import Term
from wire.json_types import Eqn, Program

PLAIN_MATMUL = [[[1], [0]], [[], []]]  # (m, k) @ (k, n): contract lhs dim 1 with rhs dim 0, no batch
Order = Union[int, tuple["Order", "Order"]]  # a leaf index, or (left, right) multiplied


@dataclass(frozen=True)
class Chain:
    """A tree of plain 2-D matmuls with identical params, flattened: `leaves[i]` is
    dims[i] x dims[i + 1]; `root` names the value the chain computes."""

    root: str
    leaves: tuple[str, ...]
    dims: tuple[int, ...]
    params: dict[str, Any]
    dtype: str


def find_chains(program: Program, min_leaves: int = 3) -> list[Chain]:
    """Maximal matmul chains of `program`: an operand that is a matmul read only by the next one
    (with the same params and dtype) is flattened into it."""
    eqns = program["eqns"]
    readers = Counter(a for a in [*(a for e in eqns for a in e["in"]), *program["outputs"]] if isinstance(a, str))
    matmuls = {e["out"][0]["name"]: e for e in eqns if _is_plain_matmul(e)}

    def inlined(operand: str, params: dict[str, Any]) -> bool:
        eqn = matmuls.get(operand)
        return eqn is not None and readers[operand] == 1 and eqn["params"] == params

    def leaves(name: str) -> list[str]:
        eqn = matmuls[name]
        return [leaf for a in eqn["in"] for leaf in (leaves(a) if inlined(a, eqn["params"]) else [a])]

    avals = (
        {s["name"]: s["shape"] for s in program["inputs"]}
        | {o["name"]: o["shape"] for e in eqns for o in e["out"]}
        | {c["name"]: c["shape"] for c in program.get("consts", [])}
    )
    inner = {a for name, eqn in matmuls.items() for a in eqn["in"] if inlined(a, eqn["params"])}
    chains = []
    for name, eqn in matmuls.items():
        if name in inner:
            continue
        names = leaves(name)
        if len(names) >= min_leaves:
            dims = (avals[names[0]][0], *(avals[n][1] for n in names))
            chains.append(Chain(name, tuple(names), dims, eqn["params"], eqn["out"][0]["dtype"]))
    return chains


# From this many leaves (42 orders) enumerating a chain's orders by rewriting costs more than the
# dynamic program; shorter chains are left to the rules, which also combine them with the others.
MIN_ORDERED_LEAVES = 6


def orders_every_matmul(program: Program, chains: Sequence[Chain]) -> bool:
    """Whether `chains` hold every plain matmul of `program` (a chain of n leaves is n - 1 of them)
    and one of them is long enough that rewriting its orders would cost more than ordering it."""
    return (any(len(c.leaves) >= MIN_ORDERED_LEAVES for c in chains)
            and sum(len(c.leaves) - 1 for c in chains) == sum(map(_is_plain_matmul, program["eqns"])))


def _is_plain_matmul(eqn: Eqn) -> bool:
    params = eqn.get("params") or {}
    return (eqn["op"] == "dot_general" and len(eqn["out"]) == 1 and len(eqn["out"][0]["shape"]) == 2
            and all(isinstance(a, str) for a in eqn["in"]) and params.get("dimension_numbers") == PLAIN_MATMUL)


def cheapest_order(dims: Sequence[int], price: Callable[[int, int, int], float],
                   free: Sequence[bool] = ()) -> tuple[float, Order]:
    """The matrix-chain dynamic program: the cheapest way to multiply matrices dims[i] x dims[i+1],
    where `price(m, k, n)` is one (m x k) @ (k x n) product. A run of `free` leaves (weights,
    whose product is precomputed) costs nothing. Ties go to the earliest split."""
    count = len(dims) - 1
    dearer = np.concatenate([[0], np.cumsum(~np.array(tuple(free) or (False,) * count))])  # non-free leaves before each
    steps = _split_prices(dims, price)
    cost, split = np.zeros((count, count)), np.zeros((count, count), dtype=np.int64)
    for span in range(1, count):  # bottom up: every sub-chain before the chains containing it, all of a span at once
        i = np.arange(count - span)
        j = i + span
        k = i[:, None] + np.arange(span)  # each sub-chain's splits: i..k times k+1..j
        step = np.where((dearer[j + 1] == dearer[i])[:, None], 0.0, steps(i, j, k))
        totals = cost[i[:, None], k] + cost[k + 1, j[:, None]] + step
        best = np.argmin(totals, axis=1)
        cost[i, j], split[i, j] = totals[np.arange(len(i)), best], i + best

    def order(i: int, j: int) -> Order:
        return i if i == j else (order(i, int(split[i, j])), order(int(split[i, j]) + 1, j))

    return float(cost[0, count - 1]), order(0, count - 1)


def _split_prices(dims: Sequence[int], price: Callable[[int, int, int], float]
                  ) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """`steps(i, j, k)`: per sub-chain i[r]..j[r], the price of its last product when split after
    each k[r, :]. Priced once per distinct (m, k, n): a table over the distinct dimensions where
    that is fewer calls."""
    values = sorted(set(dims))
    index = np.array([values.index(d) for d in dims])
    count = len(dims) - 1
    if len(values) ** 3 <= count ** 3 // 6:
        table = np.array([[[price(m, k, n) for n in values] for k in values] for m in values])
        return lambda i, j, k: table[index[i][:, None], index[k + 1], index[j + 1][:, None]]
    price = cache(price)
    return lambda i, j, k: np.array([[price(dims[r], dims[c + 1], dims[q + 1]) for c in row]
                                     for r, q, row in zip(i, j, k)], dtype=float).reshape(k.shape)


def seed_chain_orders(loaded: LoadedProgram, prices: Sequence[Callable[[dict, str, int, int, int], float]],
                      free: set[str]) -> list[Chain]:
    """Add the cheapest order of every matmul chain of `loaded`'s program under each of `prices`
    (`price(params, dtype, m, k, n)`: one product) to the chain's e-class; `free` are the values
    precomputed once."""
    chains = find_chains(loaded.program)
    commands = []
    for chain in chains:
        free_leaves = [leaf in free for leaf in chain.leaves]
        orders = [cheapest_order(chain.dims, lambda m, k, n, c=chain, p=price: p(c.params, c.dtype, m, k, n),
                                 free_leaves)[1] for price in prices]
        built: dict[Order, tuple[Term, int, int]] = {}  # products two orders share are built once
        for order in dict.fromkeys(orders):
            term, _, _ = _build(loaded, chain, order, commands, built)
            commands.append(direct_union(loaded.env[chain.root], term))
    if commands:
        register(loaded.egraph, commands)
    return chains


def _build(loaded: LoadedProgram, chain: Chain, order: Order, commands: list,
           built: dict[Order, tuple[Term, int, int]]) -> tuple[Term, int, int]:
    """The term multiplying `order` out, with its (rows, cols); new products get their shape and
    dtype (the e-class invariant) through `commands`."""
    if isinstance(order, int):
        return loaded.env[chain.leaves[order]], chain.dims[order], chain.dims[order + 1]
    if order in built:
        return built[order]
    (a, m, _), (b, _, n) = (_build(loaded, chain, side, commands, built) for side in order)
    eqn = {"op": "dot_general", "in": ["a", "b"], "params": chain.params,
           "out": [{"name": "ab", "shape": [m, n], "dtype": chain.dtype}]}
    action, term = loaded.fresh_let(encode_typed(TERMS, eqn, [a, b], loaded.params))  # a tree, not nested
    commands += [action, SHAPE.set(term, to=[m, n]), DTYPE.set(term, to=chain.dtype)]
    built[order] = term, m, n
    return built[order]
