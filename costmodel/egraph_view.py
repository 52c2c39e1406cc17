"""The serialized e-graph as plain Python: term e-classes with shapes, dtypes and decoded nodes.

Extraction runs here rather than inside egglog, whose extractor does not survive real models.
Analysis tables and primitive values are folded into the term nodes.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from egglog import EGraph

TERM_PREFIX = "Term."
BODY_PREFIX = "Body."
ANALYSES = frozenset(["shape", "dtype", "result_dtype", "first_part_shape", "output", "positive", "literal_value",
                      "slot_lo", "slot_hi"])


@dataclass(frozen=True)
class ENode:
    """One term node: `op` is the constructor name; `attrs` its non-term arguments in order
    (strings, ints, floats, int tuples); `children` the e-classes of its term arguments in order
    (a Vec[Term] argument is flattened in place)."""

    id: str
    op: str
    eclass: str
    attrs: tuple
    children: tuple[str, ...]

    @cached_property
    def body_ops(self) -> tuple[BodyNode, ...]:
        """Every op a `kernel` or `kernel_tee` node computes, operands first, each once; the root
        last (tees are its operands or further roots that do not read it). Pricing, exclusive
        groups, warm starts and emission each read it: made once per node."""
        root, *tees = kernel_roots(self.attrs)
        return tuple(dict.fromkeys(b for r in (*tees, root) for b in r.ops))


@dataclass(frozen=True, eq=False)
class BodyNode:
    """One op inside a fused kernel's body. `op` and `attrs` are those of the Term constructor it
    mirrors; `operands` its body operands; `eclass` the Term class whose value it computes (for
    `arg`: the class it reads). Decoding makes one object per Body class, so identity is
    structural equality (and hashing a deep body costs nothing)."""

    op: str
    attrs: tuple
    operands: tuple[BodyNode, ...]
    eclass: str

    def __repr__(self) -> str:  # the dataclass repr would unfold a shared body as a tree
        return f"BodyNode({self.op}, {self.eclass}, {len(self.operands)} operands)"

    @cached_property
    def reads(self) -> tuple[str, ...]:
        """Classes read by the body, in first-use order."""
        if self.op == "arg":
            return (self.eclass,)
        return tuple(dict.fromkeys(c for o in self.operands for c in o.reads))

    @cached_property
    def ops(self) -> tuple[BodyNode, ...]:
        """Ops of the body (no args), operands first; a shared subtree appears once."""
        if self.op == "arg":
            return ()
        return tuple(dict.fromkeys([*(b for o in self.operands for b in o.ops), self]))


def kernel_roots(attrs: tuple) -> tuple[BodyNode, ...]:
    """The bodies a kernel node's attrs name as computed: its root, then its tees."""
    return (attrs[0], *(attrs[1] if len(attrs) > 1 else ()))


@dataclass
class EClass:
    id: str
    shape: tuple[int, ...] = ()
    dtype: str = ""
    nodes: list[ENode] = field(default_factory=list)
    origins: dict[int, int] = field(default_factory=dict)  # ingested program -> its first equation in the class
    # the first ingested program's (equation, output) values in the class, first first: what it stands for
    original_values: list[tuple[int, int]] = field(default_factory=list)

    @property
    def origin(self) -> int | None:
        """The (first) equation of the ingested program this class came from, if any."""
        return self.origins.get(0)


@dataclass
class EGraphView:
    classes: dict[str, EClass]
    roots: list[str]

    @property
    def enode_count(self) -> int:
        return sum(len(c.nodes) for c in self.classes.values())

    @classmethod
    def from_nodes(cls, nodes: list[ENode], roots: list[str]) -> EGraphView:
        """A view built by hand (tests, examples): classes are gathered from the nodes."""
        classes: dict[str, EClass] = {}
        for node in nodes:
            classes.setdefault(node.eclass, EClass(node.eclass)).nodes.append(node)
        return cls(classes, roots)


_EQUATION_LET = re.compile(r"\$(?:a(\d+))?e(\d+)_(\d+)")


def _primitive(op: str, type_name: str):
    if type_name == "String":
        return json.loads(op)
    if type_name == "i64":
        return int(op)
    if type_name == "f64":
        return float(op)
    raise ValueError(f"unexpected primitive {type_name}: {op}")


def view_egraph(egraph: EGraph) -> EGraphView:
    """Serialize `egraph` (extraction-gym JSON) and decode its term e-classes."""
    data = json.loads(egraph._serialize(split_primitive_outputs=False).to_json())
    nodes, class_types = data["nodes"], {k: v["type"] for k, v in data["class_data"].items()}

    term_classes = {cid for cid, t in class_types.items() if t.endswith(".Term") and "Vec[" not in t}
    is_term_class = term_classes.__contains__

    values: dict[str, Any] = {}  # every dot of an e-graph reads the same few Vec literals

    def value(node_id: str):
        """A primitive argument: scalar, or a tuple for a Vec[i64]."""
        if node_id not in values:
            node = nodes[node_id]
            type_name = class_types[node["eclass"]]
            values[node_id] = tuple(value(c) for c in node["children"]) if type_name.startswith("egglog.builtins.Vec") \
                else _primitive(node["op"], type_name.rsplit(".", 1)[-1])
        return values[node_id]

    bodies: dict[str, BodyNode] = {}  # one node per Body class: bodies are never rewritten

    def body(node_id: str) -> BodyNode:
        """A Body class decoded into its (only) node's tree; memoized, bodies share subtrees."""
        node = nodes[node_id]
        if node["eclass"] not in bodies:
            attrs, operands, terms = [], [], []
            for child in node["children"]:
                child_class = nodes[child]["eclass"]
                if class_types[child_class].endswith(".Body"):
                    operands.append(body(child))
                elif class_types[child_class].endswith(".Body]"):  # Vec[Body]: flattened in place
                    operands.extend(body(c) for c in nodes[child]["children"])
                elif is_term_class(child_class):
                    terms.append(child_class)
                else:
                    attrs.append(value(child))
            bodies[node["eclass"]] = BodyNode(node["op"][len(BODY_PREFIX):], tuple(attrs), tuple(operands), terms[-1])
        return bodies[node["eclass"]]

    def kernel_attrs(node) -> tuple:
        """(root body, tee bodies[, index]) of a kernel, kernel_tee or tee_out node."""
        root, *rest = node["children"]
        if not rest:
            return (body(root),)
        return (body(root), tuple(body(c) for c in nodes[rest[0]]["children"]),
                *(value(c) for c in rest[1:]))

    classes: dict[str, EClass] = {}
    roots: dict[int, str] = {}

    def eclass(cid: str) -> EClass:
        if cid not in classes:  # made only when missing (setdefault would make one per node)
            classes[cid] = EClass(cid)
        return classes[cid]

    for node_id, node in nodes.items():
        op = node["op"]
        if op in ("Term.kernel", "Term.kernel_tee", "Term.tee_out"):
            attrs = kernel_attrs(node)
            if op != "Term.kernel" or any(o.op != "arg" for o in attrs[0].operands):  # a kernel of one op
                cid = node["eclass"]                                                  # is its plain node
                # tee_out depends on the kernel that writes it, in the class of that kernel's body
                children = (attrs[0].eclass,) if op == "Term.tee_out" else \
                    tuple(dict.fromkeys(c for b in kernel_roots(attrs) for c in b.reads))
                eclass(cid).nodes.append(ENode(node_id, op[len(TERM_PREFIX):], cid, attrs, children))
        elif op.startswith(TERM_PREFIX):
            attrs, children = [], []
            for child in node["children"]:
                child_class = nodes[child]["eclass"]
                if is_term_class(child_class):
                    children.append(child_class)
                elif class_types[child_class].endswith(".Term]"):  # Vec[Term]
                    children.extend(nodes[c]["eclass"] for c in nodes[child]["children"])
                else:
                    attrs.append(value(child))
            cid = node["eclass"]
            eclass(cid).nodes.append(ENode(node_id, op[len(TERM_PREFIX):], cid, tuple(attrs), tuple(children)))
    # An analysis value's class holds the analysis nodes plus the one primitive node of the value.
    value_nodes = {n["eclass"]: node_id for node_id, n in nodes.items() if n["op"] not in ANALYSES}
    for node in nodes.values():
        if node["op"] in ("shape", "dtype") and node["children"]:
            cid = nodes[node["children"][0]]["eclass"]
            if cid in classes:
                setattr(classes[cid], node["op"], value(value_nodes[node["eclass"]]))
        elif node["op"] == "output":
            roots[int(nodes[node["children"][0]]["op"])] = node["eclass"]
    for cid, cls in classes.items():  # ingest names equation lets e{index}_{output} (a{k}e... in alternative k)
        for match in _EQUATION_LET.finditer(data["class_data"][cid].get("let", "")):
            program, eqn = int(match[1] or 0), int(match[2])
            cls.origins[program] = min(eqn, cls.origins.get(program, eqn))
            if program == 0:
                cls.original_values.append((eqn, int(match[3])))
        cls.original_values.sort()
    return EGraphView(classes, [roots[i] for i in range(len(roots))])
