"""Extracted e-graph selection -> wire program of standard JAX primitives, grouped by kernel.

Each node's primitive and params come from `costmodel.node_equation` (extraction prices nodes
through it too). Every chosen node is one kernel: a fused
`kernel` node emits its whole body (a value it inlines is emitted again in each kernel that
inlines it: that is the recompute extraction paid for).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any

from costmodel.node_equation import node_equation
from costmodel.op_cost import IDIOMS
from lowering.idioms import expand
from rewrites.egraph_view import BodyNode, EGraphView, ENode
from rewrites.params import ParamsTable
from rewrites.terms import bits_float, float_bits
from wire.json_types import Eqn, Lit, Program, Tensor


class ExtractionCycle(ValueError):
    """The selection is not a DAG (a bug in extraction); the pipeline falls back to the original."""


@dataclass
class EmittedProgram:
    program: Program
    groups: list[list[int]]  # per chosen node, in emission order: the indices of its equations
    # emitted value -> the original's value in its e-class (what it stands for: the e-graph's claim)
    provenance: dict[str, str]


def wire_literal(bits: int, dtype: str) -> Lit:
    """The wire form of a `Term.lit`: ints and bools as such, non-finite floats as strings."""
    value = bits_float(bits)
    if dtype == "bool":
        return {"lit": bool(value), "dtype": dtype}
    if dtype.startswith(("int", "uint")):
        return {"lit": int(value), "dtype": dtype}
    if math.isfinite(value):
        return {"lit": value, "dtype": dtype}
    return {"lit": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"), "dtype": dtype}


def emit_program(view: EGraphView, choice: dict[str, ENode], table: ParamsTable,
                 original: Program) -> EmittedProgram:
    """The wire program that computes the roots of `view` with one chosen node per e-class, and
    its equations grouped by the chosen node (kernel) they belong to. It keeps the original's
    inputs and consts, so `var` indices mean the same in it (see `without_unused_consts`)."""
    emitter = _Emitter(view, choice, table, original)
    groups: list[list[int]] = []
    for cid in emission_order(view, choice):
        first = len(emitter.eqns)
        emitter.emit(cid)
        if len(emitter.eqns) > first:
            groups.append(list(range(first, len(emitter.eqns))))
    program = {"format": original["format"], "inputs": original["inputs"], "consts": original.get("consts", []),
               "eqns": emitter.eqns, "outputs": [emitter.names[r] for r in view.roots]}
    return EmittedProgram(program, groups, emitter.provenance)


class _Emitter:
    """The equations of a selection, appended one chosen node at a time (operands first), and the
    name (or literal) each emitted e-class has."""

    def __init__(self, view: EGraphView, choice: dict[str, ENode], table: ParamsTable, original: Program):
        self.view, self.choice, self.table, self.original = view, choice, table, original
        self.leaves = [*original["inputs"], *original.get("consts", [])]
        self.names: dict[str, Any] = {}
        self.eqns: list[Eqn] = []
        self.provenance: dict[str, str] = {}
        self.opaque_outs: dict[tuple, list[str]] = {}
        self.teed: dict[tuple, list[str]] = {}  # (body, tees) of an emitted kernel_tee -> the values it also writes

    def out_spec(self, cid: str) -> Tensor:
        cls = self.view.classes[cid]
        name = f"t{len(self.eqns)}_{cid.rsplit('-', 1)[-1]}"
        if cls.original_values:
            eqn, out = cls.original_values[0]
            self.provenance[name] = self.original["eqns"][eqn]["out"][out]["name"]
        return {"name": name, "shape": list(cls.shape), "dtype": cls.dtype}

    def emit_op(self, node: ENode | BodyNode, ins: list[Any]) -> str:
        """Equations computing one op (an idiom expands to several); returns the output name."""
        cls = self.view.classes[node.eclass]
        op, params = node_equation(node, cls, self.table)
        spec = self.out_spec(node.eclass)
        if op in IDIOMS:
            avals = [(self.view.classes[c].shape, self.view.classes[c].dtype) for c in _operand_classes(node)]
            self.eqns.extend(expand(op, params, ins, avals, spec["name"]))
        else:
            self.eqns.append({"op": op, "in": ins, "out": [spec], "params": params})
        return spec["name"]

    def emit_body(self, node: ENode) -> str:
        local = {}
        for body in node.body_ops:
            local[body] = self.emit_op(body, [self.names[o.eclass] if o.op == "arg" else local[o]
                                              for o in body.operands])
        if node.op == "kernel_tee":
            self.teed[node.attrs] = [local[t] for t in node.attrs[1]]
        return local[node.attrs[0]]

    def emit(self, cid: str) -> None:
        node = self.choice[cid]
        self.names[cid] = self._emitted(node)

    def _emitted(self, node: ENode) -> Any:
        """What stands for `node`'s e-class in the program: a name, or a literal."""
        if node.op == "var":
            return self.leaves[int(node.attrs[0])]["name"]
        if node.op == "lit":
            return wire_literal(*node.attrs)
        if node.op == "flit":
            return wire_literal(float_bits(node.attrs[0]), node.attrs[1])
        if node.op in ("kernel", "kernel_tee"):
            return self.emit_body(node)
        if node.op == "tee_out":
            return self.teed[node.attrs[:2]][node.attrs[2]]  # its kernel (a child) was emitted first
        ins = [self.names[c] for c in node.children]
        if node.op == "opaque":
            return self._opaque(node, ins)
        return self.emit_op(node, ins)

    def _opaque(self, node: ENode, ins: list[Any]) -> str:
        key = (node.attrs[1], node.children)
        if key not in self.opaque_outs:
            entry = self.table.get(node.attrs[1])
            base = len(self.eqns)
            outs = [{"name": f"t{base}_o{k}", "shape": s, "dtype": d} for k, (s, d) in enumerate(entry["out"])]
            for position, literal in entry.get("literals", []):
                ins.insert(position, literal)
            self.eqns.append({"op": entry["primitive"], "in": ins, "out": outs, "params": entry["params"]})
            self.opaque_outs[key] = [o["name"] for o in outs]
        return self.opaque_outs[key][int(node.attrs[2])]


def without_unused_consts(program: Program) -> Program:
    """`program` without the consts no equation or output reads (a rewrite may fold them away)."""
    read = {a for e in program["eqns"] for a in e["in"] if isinstance(a, str)}
    read |= {o for o in program["outputs"] if isinstance(o, str)}
    return {**program, "consts": [c for c in program.get("consts", []) if c["name"] in read]}


def _operand_classes(node: ENode | BodyNode) -> list[str]:
    return [o.eclass for o in node.operands] if isinstance(node, BodyNode) else list(node.children)


def emission_order(view: EGraphView, choice: dict[str, ENode]) -> list[str]:
    """Chosen classes reachable from the roots, children first. Among ready classes the one whose
    equation came first in the original goes first, so an unchanged program comes back unchanged;
    a class the original does not have goes just before its first user, depth first, so producers
    stay next to their consumers for fusion (a reordered matmul chain runs as a chain)."""
    post: list[str] = []
    done: set[str] = set()
    for root in view.roots:
        _post_order(root, choice, post, done)
    position = {cid: i for i, cid in enumerate(post)}
    users: dict[str, list[str]] = {}
    for cid in post:
        for child in set(choice[cid].children):
            users.setdefault(child, []).append(cid)
    priority: dict[str, float] = {}
    for cid in reversed(post):  # users first
        origin = view.classes[cid].origin
        priority[cid] = origin if origin is not None else min((priority[u] for u in users.get(cid, ())),
                                                              default=math.inf)
    waiting = {cid: len(set(choice[cid].children)) for cid in post}
    ready = [(priority[c], i, c) for i, c in enumerate(post) if waiting[c] == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, i, cid = heapq.heappop(ready)
        order.append(cid)
        for user in users.get(cid, ()):
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, (priority[user], position[user], user))
    return order


def _post_order(root: str, choice: dict[str, ENode], out: list[str], done: set[str]) -> None:
    """Iterative DFS (programs can be deeper than Python's recursion limit); appends to `out`."""
    stack, on_path = [(root, False)], set()
    while stack:
        cid, expanded = stack.pop()
        if cid in done:
            continue
        if expanded:
            on_path.discard(cid)
            done.add(cid)
            out.append(cid)
            continue
        if cid in on_path:
            raise ExtractionCycle(f"e-class {cid} depends on itself in the selection")
        on_path.add(cid)
        stack.append((cid, True))
        stack.extend((c, False) for c in choice[cid].children if c not in done)
